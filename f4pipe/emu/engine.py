"""Execute a batch of waves: explicit register state, operand access, and the lockstep scheduler.

The f4gemm kernels are SPMD, so all waves of a batch (several workgroups x 4 waves) run in
lockstep: each step takes the waves at the lowest pc and executes that one instruction for all
of them at once, with register files shaped [registers, waves, lanes]. Waves that diverge (a
branch on a workgroup id) simply split into groups; lowest-pc-first lets a lagging group catch
up so they merge again. Waves wait at s_barrier until every live wave of their workgroup has
arrived. Values are computed with memory completing at issue; whether the kernel may rely on
that is timing.py's question: with a TimingRun attached (`Executor.timing`, on by default in
EmulatorDevice) every step first advances the waves' memory counters and wait-state windows and
reports any read of a result before the wait that retires it on hardware, any LDS word read
before its writer's wait and barrier, and any wait state too few (timing.py, waitstates.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from f4pipe.analysis.timingrun import TimingRun
from f4pipe.arch import isa
from f4pipe.arch.decode import Instruction, Operand
from f4pipe.codeobj.program import Program
from f4pipe.core.errors import EmulatorError
from f4pipe.emu.handlers import HANDLERS
from f4pipe.emu.memory import GlobalMemory, LaunchesFault

NUM_SGPRS = 128  # operand codes 0..127 (incl. vcc, m0, exec) index this array directly
NUM_VREGS = 512  # v0..v255, then a0..a255 at isa.AGPR_BASE
LANES = 64
LANE = np.arange(LANES, dtype=np.uint64)

Sel = slice | np.ndarray


@dataclass
class WaveIds:
    """Where each wave of a batch sits in the launch (for errors, traces and race reports).

    wg_linear: each workgroup's launch-order number (x fastest, then y, z), which names it in
    race reports and numbers its waves for tracing; None = consecutive from
    first_global_wave / waves_per_group (a batch of workgroups in launch order)."""

    first_global_wave: int
    waves_per_group: int
    wg_ids: np.ndarray  # [num_wg, 3] workgroup ids (x, y, z)
    wg_linear: np.ndarray | None = None
    #: Several launches in one batch (f4pipe.emu.colaunch): each workgroup's launch, and the
    #: tag its stores carry (unique across the launches); None = one launch, tagged wg_linear.
    wg_owner: np.ndarray | None = None
    wg_writer: np.ndarray | None = None

    def linear(self) -> np.ndarray:
        if self.wg_linear is not None:
            return np.asarray(self.wg_linear, dtype=np.int64)
        first = self.first_global_wave // self.waves_per_group
        return first + np.arange(len(self.wg_ids), dtype=np.int64)


class Executor:
    """State of one batch of waves and the step loop that runs it to completion."""

    def __init__(
        self,
        program: Program,
        memory: GlobalMemory,
        ids: WaveIds,
        *,
        max_instructions: int,
        trace_wave: int | None = None,
        trace_out: TextIO | None = None,
    ) -> None:
        self.program = program
        self.memory = memory
        self.ids = ids
        num_wg = len(ids.wg_ids)
        self.num_wg = num_wg
        self.W = num_wg * ids.waves_per_group
        W = self.W
        self.sgpr = np.zeros((NUM_SGPRS, W), dtype=np.uint32)
        self.vgpr = np.zeros((NUM_VREGS, W, LANES), dtype=np.uint32)
        self.scc = np.zeros(W, dtype=np.uint32)
        self.pc = np.full(W, program.entry, dtype=np.int64)
        self.done = np.zeros(W, dtype=bool)
        self.at_barrier = np.zeros(W, dtype=bool)
        self.gpr_idx_en = np.zeros(W, dtype=bool)
        self.icount = np.zeros(W, dtype=np.int64)
        self.wg = np.repeat(np.arange(num_wg), ids.waves_per_group)
        self.wg_linear = ids.linear()  # launch-order number of each batch workgroup
        self.wg_writer = self.wg_linear if ids.wg_writer is None else ids.wg_writer
        self.wg_owner = ids.wg_owner
        #: The waves the last error was raised for (error()): which launch of a batch failed.
        self.fault_waves: np.ndarray | None = None
        #: Launches (wg_owner values) whose waves faulted and were stopped (drop_launches).
        self.dropped: set[int] = set()
        self.global_waves = self.wg_linear[self.wg] * ids.waves_per_group + (
            np.arange(W) % ids.waves_per_group
        )
        self.lds = np.zeros((num_wg, max(program.lds_bytes, 4) // 4), dtype=np.uint32)
        self.exec_full = True
        self.exec_mask = np.ones((W, LANES), dtype=bool)
        self.max_instructions = max_instructions
        self.flush_denorms = program.flush_f32_denorms
        self.trace_wave = trace_wave
        self.trace_out = trace_out
        self.steps = 0
        self.dynamic_instructions = 0
        self.timing: TimingRun | None = None  # set by the device when hazards are checked
        # Called as observer(executor, inst, sel) before each step executes (the cycle
        # model's path recorder, f4pipe.perf.trace); None = nobody watches.
        self.observer: Callable[[Executor, Instruction, Sel], None] | None = None
        self.gpr_idx_active = False  # some wave has s_set_gpr_idx_on in force
        #: Handlers' own caches for this batch (ops_mfma's decoded operands), by handler.
        self.memo: dict[str, dict] = {}

    # --- naming -------------------------------------------------------------------------

    def global_wave(self, w: int) -> int:
        return int(self.global_waves[w])

    def where(self, inst: Instruction, sel: Sel) -> str:
        from f4pipe.arch.disasm import format_instruction

        waves = np.arange(self.W)[sel]
        w = int(waves[0])
        wg = self.ids.wg_ids[self.wg[w]]
        more = f" and {len(waves) - 1} more waves in lockstep" if len(waves) > 1 else ""
        return (
            f"{self.program.symbol} pc {inst.pc:#x} "
            f"({format_instruction(inst, self.program.labels)}), "
            f"wave {self.global_wave(w)} (workgroup {tuple(int(x) for x in wg)}, "
            f"wave {w % self.ids.waves_per_group} of it){more}"
        )

    def where_wave(self, sel: Sel) -> str:
        """The first selected wave, named as in errors (for hazard reports)."""
        w = int(np.arange(self.W)[sel][0])
        wg = self.ids.wg_ids[self.wg[w]]
        return (
            f"wave {self.global_wave(w)}, workgroup {tuple(int(x) for x in wg)}, "
            f"wave {w % self.ids.waves_per_group} of it"
        )

    def error(self, inst: Instruction, sel: Sel, what: str) -> EmulatorError:
        self.fault_waves = np.arange(self.W)[sel]
        return EmulatorError(f"{what} at {self.where(inst, sel)}")

    # --- operand access -----------------------------------------------------------------

    def nsel(self, sel: Sel) -> int:
        return self.W if isinstance(sel, slice) else len(sel)

    def access_owners(
        self, sel: Sel, shape: tuple[int, ...], ok: np.ndarray | None = None
    ) -> np.ndarray | None:
        """The launch of each address's wave (addresses [n waves, ...], `ok` selecting those
        accessed) when the batch holds several launches (f4pipe.emu.colaunch); else None."""
        if self.wg_owner is None:
            return None
        per_wave = self.wg_owner[self.wg[sel]]
        owners = np.broadcast_to(per_wave.reshape((-1,) + (1,) * (len(shape) - 1)), shape)
        return owners if ok is None else owners[ok]

    def s(self, op: Operand, sel: Sel) -> np.ndarray:
        """A 32-bit scalar source, shape [n] (or a 0-d constant)."""
        if op.kind == "s":
            return self.sgpr[op.index, sel]
        if op.kind == "imm":
            if op.code in isa.UNMODELLED_OPERANDS:
                raise EmulatorError(f"operand code {op.code} (special source) is not modelled")
            return np.uint32(op.value)
        raise EmulatorError(f"scalar operand expected, got {op}")

    def s64(self, op: Operand, sel: Sel) -> np.ndarray:
        """A 64-bit scalar source (register pair or sign-extended constant) as uint64."""
        if op.kind == "s":
            lo = self.sgpr[op.index, sel].astype(np.uint64)
            hi = self.sgpr[op.index + 1, sel].astype(np.uint64)
            return lo | (hi << np.uint64(32))
        v = op.value
        if op.code != isa.LITERAL and v & 0x80000000:
            v |= 0xFFFFFFFF00000000
        return np.uint64(v)

    def set_s(self, code: int, sel: Sel, value) -> None:
        self.sgpr[code, sel] = value
        if code in (isa.EXEC_LO, isa.EXEC_HI):
            self.exec_changed()

    def exec_changed(self) -> None:
        """Re-read the lane mask from EXEC's SGPRs; whoever writes them directly (set_s does
        it itself; launching.initial_state) calls it."""
        ex = self.sgpr[isa.EXEC_LO].astype(np.uint64) | (
            self.sgpr[isa.EXEC_HI].astype(np.uint64) << np.uint64(32)
        )
        self.exec_mask = ((ex[:, None] >> LANE) & np.uint64(1)).astype(bool)
        self.exec_full = bool(self.exec_mask.all())

    def v(self, op: Operand, sel: Sel, idx: int = 0) -> np.ndarray:
        """A 32-bit vector source, broadcastable to [n, 64]; `idx` is the GPR-index offset."""
        if op.kind == "v":
            r = op.index + idx
            if r > 255:
                raise EmulatorError(f"indexed VGPR v{r} is out of range")
            return self.vgpr[r, sel]
        if op.kind == "a":
            r = op.index + idx
            if r > 255:
                raise EmulatorError(f"indexed AGPR a{r} is out of range")
            return self.vgpr[isa.AGPR_BASE + r, sel]
        return self.s(op, sel)[..., None] if op.kind == "s" else self.s(op, sel)

    def vregs(self, op: Operand, sel: Sel) -> np.ndarray:
        """op.count consecutive vector registers, shape [count, n, 64]."""
        base = op.index + (isa.AGPR_BASE if op.kind == "a" else 0)
        if op.kind not in ("v", "a") or op.index + op.count > 256:
            raise EmulatorError(f"register range {op} is not a vector register range")
        block = self.vgpr[base : base + op.count]
        return block[:, sel]

    def reg_index(self, op: Operand, idx: int = 0) -> int:
        if op.kind not in ("v", "a"):
            raise EmulatorError(f"vector register destination expected, got {op}")
        r = op.index + idx
        if r + op.count > 256:
            raise EmulatorError(f"register {op.kind}{r} (+{op.count}) is out of range")
        return r + (isa.AGPR_BASE if op.kind == "a" else 0)

    def set_v(self, reg: int, sel: Sel, value) -> None:
        """Write a VGPR/AGPR (file index) for the selected waves, honouring EXEC."""
        if self.exec_full:
            self.vgpr[reg, sel] = value
        else:
            old = self.vgpr[reg, sel]
            self.vgpr[reg, sel] = np.where(self.exec_mask[sel], value, old)

    def lane_mask(self, sel: Sel) -> np.ndarray:
        return self.exec_mask[sel]

    def vcc_mask(self, code: int, sel: Sel) -> np.ndarray:
        """A 64-bit lane mask held in an SGPR pair, as bool [n, 64]."""
        lo = self.sgpr[code, sel].astype(np.uint64)
        hi = self.sgpr[code + 1, sel].astype(np.uint64)
        bits = lo | (hi << np.uint64(32))
        return ((bits[:, None] >> LANE) & np.uint64(1)).astype(bool)

    def set_mask(self, code: int, sel: Sel, mask: np.ndarray) -> None:
        """Write bool [n, 64] as a 64-bit lane mask into an SGPR pair (inactive lanes 0)."""
        mask = mask & self.exec_mask[sel]
        words = np.packbits(mask, axis=1, bitorder="little").view(np.uint32)
        self.set_s(code, sel, words[:, 0])
        self.set_s(code + 1, sel, words[:, 1])

    def gpr_index(self, inst: Instruction, sel: Sel) -> tuple[int, int, int, int] | None:
        """Per-operand (src0, src1, src2, dst) offsets when GPR indexing is on, else None.

        Raises when the selected waves disagree (the step loop then splits the group)."""
        if not self.gpr_idx_active:  # no wave has indexing on: the common case, no array op
            return None
        en = self.gpr_idx_en[sel]
        if not en.any():
            return None
        m0 = self.sgpr[isa.M0, sel] & np.uint32(0xF0FF)  # only index and mode bits matter
        if not en.all() or (m0 != m0[0]).any():
            raise _SplitGroup
        m = int(m0[0])
        off, mode = m & 0xFF, (m >> 12) & 0xF
        return tuple(off if mode >> i & 1 else 0 for i in range(4))  # type: ignore[return-value]

    # --- running ------------------------------------------------------------------------

    def run(self) -> None:
        """Step until every wave has executed s_endpgm."""
        prog = self.program
        W = self.W
        big = np.iinfo(np.int64).max
        converged = False  # every wave runnable and at the same pc: no selection needed
        # The group the last step ran stays the lowest-pc group while it runs straight-line
        # code (no SOPP: only those branch, wait at a barrier or end) below `next_other`, the
        # lowest pc of every other runnable wave: then it needs no new selection either.
        held, next_pc, next_other = False, 0, big
        while True:
            if converged:
                pc, sel, n = int(self.pc[0]), slice(None), W
            elif held:
                pc = next_pc
            else:
                runnable = ~(self.done | self.at_barrier)
                if not runnable.any():
                    if self.done.all():
                        return
                    self._release_barriers()
                    if not (~(self.done | self.at_barrier)).any():
                        w = int(np.nonzero(~self.done)[0][0])
                        raise EmulatorError(
                            f"{prog.symbol}: deadlock: waves wait at s_barrier but wave "
                            f"{self.global_wave(w)}'s workgroup can never complete it"
                        )
                    continue
                pcs = np.where(runnable, self.pc, big)
                pc = int(pcs.min())
                group = pcs == pc
                n = int(group.sum())
                sel = slice(None) if n == W else np.nonzero(group)[0]
                if n < W:
                    pcs[group] = big
                    next_other = int(pcs.min())
            inst = prog.at(pc)
            if self.timing is not None:
                self._advance_timing(inst, sel)
            if self.observer is not None:
                self.observer(self, inst, sel)
            dropped = len(self.dropped)
            self._execute(inst, sel)
            # Only control flow can split or stop waves; an unconditional branch keeps them.
            converged = n == W and (inst.fmt != "SOPP" or inst.name == "s_branch")
            next_pc = pc + inst.size
            held = n < W and inst.fmt != "SOPP" and next_pc < next_other
            if len(self.dropped) != dropped:  # waves stopped: select afresh
                converged = held = False
            self.steps += 1
            self.dynamic_instructions += n
            self.icount[sel] += 1
            if (
                self.steps > self.max_instructions
                and self.icount[sel].max() > self.max_instructions
            ):
                raise self.error(
                    inst,
                    sel,
                    f"instruction budget of {self.max_instructions} per wave exhausted "
                    "(runaway loop?)",
                )

    def _advance_timing(self, inst: Instruction, sel: Sel) -> None:
        """Let the timing model see `inst` before it runs; under GPR indexing the registers a
        vector instruction touches depend on each wave's M0, so waves go one by one."""
        assert self.timing is not None
        if not (self.gpr_idx_active and inst.fmt.startswith("VOP")):
            self.timing.before(self, inst, sel)
            return
        try:
            self.timing.before(self, inst, sel, self.gpr_index(inst, sel) or (0, 0, 0, 0))
        except _SplitGroup:
            for w in np.arange(self.W)[sel]:
                one = np.array([w])
                offsets = self.gpr_index(inst, one) or (0, 0, 0, 0)
                self.timing.before(self, inst, one, offsets)

    def _execute(self, inst: Instruction, sel: Sel) -> None:
        fn = HANDLERS.get(inst.name)
        if fn is None:
            pos = inst.pc - self.program.text_addr
            raw = self.program.text[pos : pos + inst.size]
            words = " ".join(f"{w:08X}" for w in np.frombuffer(raw, dtype="<u4"))
            raise self.error(inst, sel, f"unsupported instruction {inst.name} [{words}]")
        if "unmodelled" in inst.extra:
            raise self.error(
                inst, sel, f"{inst.name} sets {inst.extra['unmodelled']}: not modelled"
            )
        tracing = self.trace_wave is not None and self._traced_in(sel)
        before = self._snapshot() if tracing else None
        try:
            branched = fn(self, inst, sel)
        except _SplitGroup:
            # GPR indexing differs between the waves of the group: run them one by one.
            for w in np.arange(self.W)[sel]:
                self._execute(inst, np.array([w]))
            return
        except LaunchesFault as fault:  # several launches in the batch: stop the faulting
            rest = self._drop_launches(fault.launches, sel)  # ones, the rest go on
            if rest.size:
                self._execute(inst, rest)
            return
        except EmulatorError as exc:
            if f"pc {inst.pc:#x} (" in str(exc):
                raise
            waves = np.arange(self.W)[sel]
            if len(waves) > 1:
                self._blame_one_wave(inst, waves)
            raise self.error(inst, sel, str(exc)) from exc
        if not branched:
            self.pc[sel] += inst.size
        if tracing:
            self._trace(inst, before)

    def _drop_launches(self, launches: frozenset[int], sel: Sel) -> np.ndarray:
        """Stop every wave of `launches` (as if done: they run alone later, see
        f4pipe.emu.colaunch); the waves of `sel` left. No other wave depends on them."""
        assert self.wg_owner is not None
        self.dropped |= launches
        stopped = np.isin(self.wg_owner[self.wg], list(launches))
        self.done |= stopped
        self.at_barrier &= ~stopped
        waves = np.arange(self.W)[sel]
        return waves[~stopped[waves]]

    def _blame_one_wave(self, inst: Instruction, waves: np.ndarray) -> None:
        """Re-run a failed instruction wave by wave on a copy of the state, so the error
        names the first wave that really faults (state is not committed: we are failing)."""
        for w in waves:
            saved = (self.sgpr[:, w].copy(), self.vgpr[:, w].copy(), self.scc[w], self.pc[w])
            lds = self.lds[self.wg[w]].copy()
            try:
                HANDLERS[inst.name](self, inst, np.array([w]))
            except EmulatorError as exc:
                raise self.error(inst, np.array([w]), str(exc)) from exc
            finally:
                self.sgpr[:, w], self.vgpr[:, w], self.scc[w], self.pc[w] = saved
                self.lds[self.wg[w]] = lds

    def _release_barriers(self) -> None:
        arrived = np.bincount(self.wg[self.at_barrier | self.done], minlength=self.num_wg)
        full = arrived == self.ids.waves_per_group
        self.at_barrier &= ~full[self.wg]

    # --- tracing ------------------------------------------------------------------------

    def _traced_local(self) -> int | None:
        assert self.trace_wave is not None
        hit = np.nonzero(self.global_waves == self.trace_wave)[0]
        return int(hit[0]) if hit.size else None

    def _traced_in(self, sel: Sel) -> bool:
        w = self._traced_local()
        if w is None:
            return False
        return bool(np.isin(w, np.arange(self.W)[sel]))

    def _snapshot(self) -> tuple[np.ndarray, np.ndarray, int]:
        w = self._traced_local()
        return self.sgpr[:, w].copy(), self.vgpr[:, w].copy(), int(self.scc[w])

    def _trace(self, inst: Instruction, before) -> None:
        from f4pipe.emu.trace import format_trace_line

        w = self._traced_local()
        assert self.trace_out is not None and w is not None
        after = (self.sgpr[:, w], self.vgpr[:, w], int(self.scc[w]))
        self.trace_out.write(format_trace_line(inst, self.program.labels, before, after) + "\n")


class _SplitGroup(Exception):
    """Waves of a group need different GPR-index offsets: execute them separately."""
