"""The shape-edge sweep: every kernel at edge shapes on the emulator, plus static evidence.

For each kernel and edge class (f4pipe.aiter.shaperules.EDGE_CLASSES) a few shapes run on the
emulator
in at least two workgroup orders, each workgroup as if alone, with D pre-filled with a canary
(every element outside the user's [0,M) x [0,N) included). A run is
- "fault" when the emulator refused an access outside every allocation,
- "wrong" when an element of D[:M, :N] misses the reference (first bad index, expected, got)
  or a canary outside it changed (in some order),
- "race" when the results are right in every order tried but non-atomic stores of two
  workgroups hit the same dword (on hardware the order is not ours to pick),
- "safe" otherwise.
Unsafe shapes are also run with the "pad" remedy, whose padding is f4pipe's own: only the
user's view is checked there. `agrees` says whether f4pipe.aiter.shaperules's rules predicted the
verdict; the tests and the report hold that to be true for every row.

Static evidence (store_evidence) reads the disassembly: which kernarg fields reach the
num_records of the buffer resources that the D stores use, and which scalar compares on N
guard the epilogue's stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from f4pipe.aiter.manifest import KernelEntry, Manifest
from f4pipe.aiter.shaperules import (
    D_ROW_ALIGN,
    EDGE_K_MIN,
    EDGE_K_MULTI,
    EDGE_K_TAIL,
    EDGE_K_TAIL_ROW,
    EDGE_M_ROWS,
    EDGE_N_CHUNK,
    EDGE_N_TILE,
    K_PADDINGS,
    SCALE_PADDINGS,
    STORE_CHUNK32,
    STORE_FULL_TILE,
    STORE_UNBOUNDED,
    edge_rule,
    is_safe,
    reproducer,
)
from f4pipe.core.cache import f4pipe_identity
from f4pipe.core.errors import EmulatorError
from f4pipe.core.layout import BASE_VARIANTS, EMULATOR_DEVICE_ID, SEED_A, SEED_B, SWEEP_ORDERS
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.core.verdicts import (
    FAULT,
    HAZARD,
    RACE,
    SAFE,
    SAFETY_RANK,
    WRONG,
    worst_verdict,
)
from f4pipe.host.gemm import GemmRequest, GemmResult, run_gemm, run_gemms
from f4pipe.host.kernarg import KERNARG_FIELDS, BufferLayout
from f4pipe.host.operands import generate_operand
from f4pipe.host.reference import reference_of_values
from f4pipe.host.verify import bad_mask
from f4pipe.pipeline.parallel import map_ordered
from f4pipe.pipeline.progress import track
from f4pipe.pipeline.resultstore import ResultStore, kernel_identity, reuse_or_run

if TYPE_CHECKING:  # the emulator is imported where a kernel runs: reused sweeps never need it
    from f4pipe.emu import EmulatorDevice

#: bf16 NaN with a payload no kernel computes: any other value there was written by a kernel.
CANARY = 0x7FC1
#: Orders every sweep runs (each workgroup as if alone, so the order is the only freedom).
DEFAULT_ORDERS = SWEEP_ORDERS
M_EDGE_RESIDUES = (1, 17, 31, 33)
K_MULTIPLES = (768, 1024)
BASE_K = 512
#: The K-tail classes' K: the largest tail the 64-element granule allows (192 past K, six
#: padding scale columns) after two whole blocks (noBpreShuffle needs K >= 512).
TAIL_K = BASE_K + 64


@dataclass(frozen=True)
class EdgeShape:
    edge_class: str
    m: int
    n: int
    k: int
    scale_pad: str = "driver"  # what the K tail reads (f4pipe.aiter.shaperules.SCALE_PADDINGS)
    k_pad: str = "none"  # the A and B rows' own K padding (K_PADDINGS)


def k_tail_shapes(entry: KernelEntry) -> list[EdgeShape]:
    """One shape per K-tail class, the smallest that shows it (M = 1: the tile's only row;
    M = 2, or 256 where the M rule needs it: a row that reads the next one past K; N = tile_n,
    K = TAIL_K), under every scale padding and A/B K padding."""
    rows = edge_rule(entry).d_row_multiple
    several = 2 if rows == D_ROW_ALIGN else rows  # noBpreShuffle: M % 256 == 0 (its M rule)
    return [
        EdgeShape(edge, m, entry.tile_n, TAIL_K, scale_pad, k_pad)
        for edge, m in ((EDGE_K_TAIL_ROW, 1), (EDGE_K_TAIL, several))
        for scale_pad in SCALE_PADDINGS
        for k_pad in K_PADDINGS
    ]


def edge_shapes(entry: KernelEntry) -> list[EdgeShape]:
    """The sweep's shapes for one kernel: N = tile_n + r (r = 16 and tile_n - 16 for the
    32-column chunk class; r = 32 and tile_n - 32 for the tile class), M = q*tile_m + r for
    r in 1, 17, 31, 33, K = 256 and two larger multiples; the other dimensions aligned, and
    small enough that all 35 kernels take a few minutes."""
    tm, tn = entry.tile_m, entry.tile_n
    shapes = [EdgeShape(EDGE_N_CHUNK, tm, tn + r, BASE_K) for r in sorted({16, tn - 16})] + [
        EdgeShape(EDGE_N_TILE, tm, tn + r, BASE_K) for r in sorted({32, tn - 32}) if r < tn
    ]
    shapes += [
        EdgeShape(EDGE_M_ROWS, tm * (i % 2) + r, 2 * tn, BASE_K)
        for i, r in enumerate(M_EDGE_RESIDUES)
    ]
    shapes.append(EdgeShape(EDGE_K_MIN, tm, 2 * tn, 256))
    shapes += [EdgeShape(EDGE_K_MULTI, tm, tn, k) for k in K_MULTIPLES]
    return shapes + k_tail_shapes(entry)


@dataclass(frozen=True)
class OrderOutcome:
    """One run in one workgroup order."""

    order: str
    fault: str = ""
    bad: int = 0
    first_bad: tuple[int, int] | None = None
    expected: float | None = None
    got: float | None = None
    canary_damaged: int = 0
    first_canary: tuple[int, int] | None = None
    races: int = 0
    race_summary: str = ""
    hazards: int = 0  # timing hazards (f4pipe.analysis.timing) of the run
    hazard_summary: str = ""


def order_request(shape: EdgeShape, policy: str) -> GemmRequest:
    """The run of `shape` under `policy` ("unsafe": as asked, D pre-filled with the canary;
    "pad": the remedy), returning the whole padded D and unverified (the sweep checks)."""
    m, n, k = shape.m, shape.n, shape.k
    prefill = None
    if policy == "unsafe":
        prefill = np.full(BufferLayout(m, n, k).d_shape, CANARY, dtype=np.uint16)
    return GemmRequest(
        m,
        n,
        k,
        d_prefill=prefill,
        keep_padded_d=True,
        verify=False,
        edge_policy=policy,
        scale_pad=shape.scale_pad,
        k_pad=shape.k_pad,
    )


def run_order(
    device: EmulatorDevice,
    entry: KernelEntry,
    co_path: Path,
    shape: EdgeShape,
    policy: str,
    ref: np.ndarray,
) -> OrderOutcome:
    """One run of `shape` under `policy` in the device's workgroup order."""
    from f4pipe.emu import LaunchFault

    try:
        result = run_gemm(device, entry, co_path, order_request(shape, policy))
    except LaunchFault as fault:
        return outcome_of(device.workgroup_order, shape, policy, ref, fault)
    return outcome_of(device.workgroup_order, shape, policy, ref, result)


def outcome_of(
    order: str, shape: EdgeShape, policy: str, ref: np.ndarray, result: GemmResult | Exception
) -> OrderOutcome:
    """What a run (or the LaunchFault it ended in) shows against the reference `ref`."""
    from f4pipe.emu import LaunchFault

    if isinstance(result, LaunchFault):  # the races of the launch up to its fault
        races = result.stats.races
        return OrderOutcome(
            order, fault=str(result), races=races.count, race_summary=races.summary()
        )
    if isinstance(result, Exception):
        raise result
    m, n = shape.m, shape.n
    out: dict[str, Any] = {
        "hazards": result.hazards or 0,
        "hazard_summary": result.hazard_summary,
    }
    bad = bad_mask(result.d, ref, result.gdz)
    out["bad"] = int(bad.sum())
    if out["bad"]:
        i, j = (int(x) for x in np.argwhere(bad)[0])
        out.update(first_bad=(i, j), expected=float(ref[i, j]), got=float(result.d[i, j]))
    if policy == "unsafe":  # the seed layout is the user's: nothing outside [0,M)x[0,N) moves
        bits = result.d_padded_bits
        assert bits is not None
        outside = np.ones(bits.shape, dtype=bool)
        outside[:m, :n] = False
        damaged = outside & (bits != CANARY)
        out["canary_damaged"] = int(damaged.sum())
        if out["canary_damaged"]:
            out["first_canary"] = tuple(int(x) for x in np.argwhere(damaged)[0])
    return OrderOutcome(order, races=result.races or 0, race_summary=result.race_summary, **out)


def verdict_of(outcomes: Sequence[OrderOutcome]) -> str:
    """The worst verdict any order shows (core.verdicts ranks them)."""
    shown = {
        FAULT: any(o.fault for o in outcomes),
        WRONG: any(o.bad or o.canary_damaged for o in outcomes),
        HAZARD: any(o.hazards for o in outcomes),
        RACE: any(o.races for o in outcomes),
    }
    return worst_verdict([SAFE, *(v for v, seen in shown.items() if seen)])


def reference_for(shape: EdgeShape) -> np.ndarray:
    return references_for([shape])[shape]


def references_for(shapes: Sequence[EdgeShape]) -> dict[EdgeShape, np.ndarray]:
    """reference_for of each shape, each operand dequantized once: a kernel's edge shapes
    pair 350 A and 315 B operands in 805 references over the 35 kernels."""
    values: dict[tuple[int, int, int], np.ndarray] = {}

    def dequantized(rows: int, k: int, seed: int) -> np.ndarray:
        if (rows, k, seed) not in values:
            values[rows, k, seed] = generate_operand(rows, k, seed).dequantize()
        return values[rows, k, seed]

    return {
        s: reference_of_values(dequantized(s.m, s.k, SEED_A), dequantized(s.n, s.k, SEED_B))
        for s in shapes
    }


def sweep_kernel(
    entry: KernelEntry,
    co_path: Path,
    keys: ArtifactKeys,
    *,
    orders: Sequence[str] = DEFAULT_ORDERS,
    shapes: Iterable[EdgeShape] | None = None,
    evidence: StoreEvidence | None = None,
) -> list[dict[str, Any]]:
    """SAFETY rows of one kernel: each edge shape unprotected, and unsafe ones padded too."""
    from f4pipe.emu import EmulatorDevice, SharedRuns

    if len(orders) < 2:
        raise EmulatorError(f"the sweep needs at least two workgroup orders, got {list(orders)}")
    evidence = evidence or store_evidence(co_path, entry.symbol)
    rule = edge_rule(entry)
    shared = SharedRuns()  # each launch executes once; the other orders replay its stores
    devices = {
        o: EmulatorDevice(workgroup_order=o, isolate_workgroups=True, shared_runs=shared)
        for o in orders
    }
    rows = []
    try:
        todo = list(shapes) if shapes is not None else edge_shapes(entry)
        cases = []  # (shape, policy, predicted safe), each run in every order
        for shape in todo:
            pads = {"scale_pad": shape.scale_pad, "k_pad": shape.k_pad}
            predicted_safe = is_safe(entry, shape.m, shape.n, shape.k, **pads)
            for policy in ("unsafe",) if predicted_safe else ("unsafe", "pad"):
                cases.append((shape, policy, predicted_safe))
        refs = references_for(todo)
        requests = [order_request(shape, policy) for shape, policy, _ in cases]
        results = {
            o: run_gemms(devices[o], entry, co_path, requests)
            for o in track(list(orders), f"safety {entry.name}")
        }
        for i, (shape, policy, predicted_safe) in enumerate(cases):
            outcomes = [outcome_of(o, shape, policy, refs[shape], results[o][i]) for o in orders]
            verdict = verdict_of(outcomes)
            expect_safe = predicted_safe or policy == "pad"
            rows.append(
                _row(keys, entry, rule.store, shape, policy, outcomes, verdict, evidence)
                | {"rule_safe": expect_safe, "agrees": (verdict == SAFE) == expect_safe}
            )
    finally:
        for device in devices.values():
            device.close()
    return rows


def _worst(outcomes: Sequence[OrderOutcome]) -> OrderOutcome:
    return max(outcomes, key=lambda o: SAFETY_RANK[verdict_of([o])])


def _row(
    keys: ArtifactKeys,
    entry: KernelEntry,
    store: str,
    shape: EdgeShape,
    policy: str,
    outcomes: Sequence[OrderOutcome],
    verdict: str,
    evidence: StoreEvidence,
) -> dict[str, Any]:
    worst = _worst(outcomes)
    wrong_orders = [o.order for o in outcomes if o.bad or o.canary_damaged]
    detail = worst.fault or worst.hazard_summary
    if worst.bad:
        i, j = worst.first_bad  # type: ignore[misc]
        detail = (
            f"{worst.bad} bad element(s) in D[:M,:N] ({worst.order}); first D[{i},{j}] "
            f"expected {worst.expected:.6g} got {worst.got:.6g}"
        )
    if worst.canary_damaged:
        i, j = worst.first_canary  # type: ignore[misc]
        detail += ("; " if detail else "") + (
            f"{worst.canary_damaged} canary element(s) outside D[:M,:N] overwritten "
            f"({worst.order}); first D[{i},{j}]"
        )
    races = max(o.races for o in outcomes)
    race_detail = next((o.race_summary for o in outcomes if o.races), "")
    return {
        **keys.as_row(),
        "kernel": entry.name,
        "tile_m": entry.tile_m,
        "tile_n": entry.tile_n,
        "bpreshuffle": entry.bpreshuffle,
        "store_class": store,
        "edge_class": shape.edge_class,
        "m": shape.m,
        "n": shape.n,
        "k": shape.k,
        "policy": policy,
        "scale_pad": shape.scale_pad,
        "k_pad": shape.k_pad,
        "orders": ",".join(o.order for o in outcomes),
        "verdict": verdict,
        "order_dependent": 0 < len(wrong_orders) < len(outcomes),
        "bad": max(o.bad for o in outcomes),
        "first_bad_row": None if not worst.bad else worst.first_bad[0],  # type: ignore[index]
        "first_bad_col": None if not worst.bad else worst.first_bad[1],  # type: ignore[index]
        "expected": worst.expected if worst.bad else None,
        "got": worst.got if worst.bad else None,
        "canary_damaged": max(o.canary_damaged for o in outcomes),
        "races": races,
        "race_detail": race_detail,
        "detail": detail,
        "static_d_bound": evidence.d_bound,
        "static_n_guards": evidence.n_guard_summary,
        "static_n_bounded": evidence.n_bounded,
        "static_k_loop": evidence.k_loop_summary,
        "static_load_bound": evidence.load_bound,
        "reproducer": (
            reproducer(
                entry.name,
                shape.m,
                shape.n,
                shape.k,
                order=worst.order,
                scale_pad=shape.scale_pad,
                k_pad=shape.k_pad,
            )
            if verdict != SAFE and policy == "unsafe"
            else ""
        ),
    }


def sweep(
    manifest: Manifest,
    keys: ArtifactKeys,
    *,
    kernels: Sequence[str] | None = None,
    orders: Sequence[str] = DEFAULT_ORDERS,
    store: ResultStore | None = None,
    workers: int = 1,
    variant: str = BASE_VARIANTS[0],
) -> list[dict[str, Any]]:
    """SAFETY rows for the manifest's kernels (or the named ones), kernels spread over
    `workers` processes; a kernel whose sweep `store` holds (same bytes, manifest row, orders,
    toolchain, f4pipe) is not run again. `variant`: the code objects' (an edit's
    `edit-<name>`), set on every row after the store's, which are keyed by content alone."""
    entries = [manifest.get(k) for k in kernels] if kernels else list(manifest)

    def kernel_rows(entry: KernelEntry) -> list[dict[str, Any]]:
        co_path = manifest.co_path(entry)
        inputs = {}
        if store is not None:
            inputs = {
                "kernel": kernel_identity(entry, co_path, EMULATOR_DEVICE_ID, store),
                "orders": list(orders),
                "device_id": EMULATOR_DEVICE_ID,
                "toolchain_id": keys.toolchain_id,
                "f4pipe": f4pipe_identity(),
            }
        return reuse_or_run(
            store,
            "safety",
            inputs,
            {"aiter_id": keys.aiter_id},
            lambda: sweep_kernel(entry, co_path, keys, orders=orders),
        )

    label = "safety" if len(entries) > 1 else ""
    per_kernel = map_ordered(kernel_rows, entries, workers=workers, label=label)
    return [{**row, "variant": variant} for rows in per_kernel for row in rows]


# --- static evidence -------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreEvidence:
    """What the disassembly says about a kernel's D stores."""

    kernel: str
    stores: int  # non-atomic buffer stores
    d_bound_fields: tuple[str, ...]  # kernarg fields reaching the stores' num_records
    d_bound_constant: bool  # a store's num_records is a constant (no shape bound at all)
    n_guards: tuple[str, ...]  # "pc: instruction" of scalar compares on N in the epilogue
    k_loop: tuple[str, ...] = ()  # "pc: compare (counter += step)" of the K loop's back edge
    load_bound_fields: tuple[str, ...] = ()  # kernarg fields reaching the loads' num_records

    @property
    def n_bounded(self) -> bool:
        """True if a compare on N guards the epilogue's stores. (N reaching num_records is not
        a column bound: there it only enters through the tile's row offset.)"""
        return bool(self.n_guards)

    @property
    def d_bound(self) -> str:
        if self.d_bound_constant and not self.d_bound_fields:
            return "constant (no M or N bound)"
        return "from " + ", ".join(self.d_bound_fields) if self.d_bound_fields else "none"

    @property
    def k_loop_summary(self) -> str:
        """The K loop's back edges (unrolled copies counted): trip count ceil(K / step)."""
        if not self.k_loop:
            return "none found"
        return f"{len(self.k_loop)} back edge(s) on K, first {self.k_loop[0]}"

    @property
    def load_bound(self) -> str:
        """Which fields bound the A, B and scale loads as first set up (K among them or
        not): a bound without K lets the last block read past K within the rows."""
        fields = ", ".join(self.load_bound_fields) or "none"
        if "K" not in self.load_bound_fields:
            return f"from {fields} (not K)"
        if "log2_k_split" in self.load_bound_fields:
            return f"from {fields} (K with log2_k_split: the splitK chunk)"
        return f"from {fields}"

    @property
    def n_guard_summary(self) -> str:
        if not self.n_guards:
            return "none"
        return f"{len(self.n_guards)}: " + "; ".join(self.n_guards[:3])


_KERNARG_AT = {f.offset + 4 * i: f.name for f in KERNARG_FIELDS for i in range(max(1, f.size // 4))}
Taint = frozenset[str]
_NONE: Taint = frozenset()


def _regs(op) -> range:
    return range(op.index, op.index + op.count) if op is not None and op.kind == "s" else range(0)


def store_evidence(co_path: Path, symbol: str) -> StoreEvidence:
    """Follow kernarg fields through scalar instructions (in program order) to the D stores.

    A linear pass, not a full data-flow analysis: every kernarg field is loaded at the top and
    the epilogue follows the main loop in address order in all 35 kernels, so a register's
    taint at a store is the one its last write in address order gave it."""
    from f4pipe.arch.disasm import format_instruction
    from f4pipe.codeobj.program import Program

    prog = Program.load(co_path, symbol)
    insts = prog.instructions_from(prog.entry)
    taint: dict[int, Taint] = {}
    scc: Taint = _NONE
    stores = 0
    fields: set[str] = set()
    constant = False
    mfma_pcs = [i.pc for i in insts if i.name.startswith("v_mfma")]
    store_pcs = [i.pc for i in insts if i.name.startswith("buffer_store")]
    first_store = min(store_pcs) if store_pcs else 0
    epilogue = max((p for p in mfma_pcs if p < first_store), default=0)
    guards: list[str] = []
    k_loop: list[str] = []
    load_fields: set[str] = set()
    load_bases: set[int] = set()
    for at, inst in enumerate(insts):
        if inst.name == "s_endpgm" and inst.pc > (max(store_pcs) if store_pcs else 0):
            break
        srcs = [taint.get(r, _NONE) for op in inst.srcs for r in _regs(op)]
        union: Taint = frozenset().union(*srcs) if srcs else _NONE
        if inst.fmt == "SMEM" and inst.srcs and inst.srcs[0].index == prog.kernarg_sgpr:
            for j, r in enumerate(_regs(inst.dst)):
                name = _KERNARG_AT.get(inst.offset + 4 * j)
                taint[r] = frozenset({name}) if name else _NONE
            continue
        if inst.fmt == "SOPC":
            scc = union
            if "N" in union and epilogue < inst.pc <= max(store_pcs, default=0):
                guards.append(f"{inst.pc:#x}: {format_instruction(inst, prog.labels)}")
            if "K" in union:
                step = _loop_step(insts, at)
                if step:
                    k_loop.append(f"{inst.pc:#x}: {format_instruction(inst, prog.labels)} {step}")
            continue
        if inst.name.startswith("buffer_load") and inst.srcs[2].index not in load_bases:
            load_bases.add(inst.srcs[2].index)  # the bound as set up, before the loop moves it
            load_fields.update(taint.get(inst.srcs[2].index + 2, _NONE))
        if inst.name.startswith("buffer_store"):
            stores += 1
            base = inst.srcs[2].index
            bound = taint.get(base + 2, _NONE)
            fields.update(bound)
            constant |= not bound
            continue
        if inst.fmt in ("SOP1", "SOP2", "SOPK") and inst.dst is not None:
            uses_scc = "cselect" in inst.name or "addc" in inst.name or "subb" in inst.name
            value = union | (scc if uses_scc else _NONE)
            if inst.fmt == "SOPK" and not inst.name.startswith("s_movk"):
                value |= taint.get(inst.dst.index, _NONE)
            for r in _regs(inst.dst):
                taint[r] = value
            if inst.fmt == "SOP2":
                scc = union
            continue
        for r in _regs(inst.dst):  # VALU writing SGPRs (readlane, v_cmp masks): sources' taint
            taint[r] = union
    return StoreEvidence(
        kernel=Path(co_path).stem,
        stores=stores,
        d_bound_fields=tuple(sorted(fields)),
        d_bound_constant=constant,
        n_guards=tuple(guards),
        k_loop=tuple(k_loop),
        load_bound_fields=tuple(sorted(load_fields)),
    )


#: How far (instructions) a K-loop compare may sit after its counter's step, and its branch
#: after it (the kernels interleave MFMAs and the next block's loads between them).
LOOP_WINDOW = 8
BRANCH_WINDOW = 400


def _loop_step(insts, at: int) -> str:
    """ "(counter += step)" when the compare at `at` is a loop's back edge: an s_addk_i32 on one
    of its operands shortly before it, and a conditional branch shortly after (no other compare
    between)."""
    cmp = insts[at]
    regs = {op.index for op in cmp.srcs if op is not None and op.kind == "s"}
    after = insts[at + 1 : at + 1 + BRANCH_WINDOW]
    branch = next((i for i in after if i.fmt == "SOPC" or i.name.startswith("s_cbranch")), None)
    if branch is None or not branch.name.startswith("s_cbranch_scc"):
        return ""
    for prev in reversed(insts[max(0, at - LOOP_WINDOW) : at]):
        if prev.name == "s_addk_i32" and prev.dst is not None and prev.dst.index in regs:
            return f"(counter += {prev.imm:#x})"
    return ""


def static_store_class(evidence: StoreEvidence) -> str:
    """The store class the disassembly implies, to hold f4pipe.aiter.shaperules's table against."""
    if "M" not in evidence.d_bound_fields:
        return STORE_UNBOUNDED
    return STORE_CHUNK32 if evidence.n_guards else STORE_FULL_TILE
