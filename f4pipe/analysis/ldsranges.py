"""Which LDS bytes each LDS DMA and each DS access of a kernel may touch, so that the static
timing check (f4pipe.analysis.ldsdma) can tell an access that needs an outstanding DMA retired
from one that touches other bytes.

Why flow-sensitive: f4gemm kernels write M0 once per DMA (`s_add_u32 m0, <buffer>, s64`) and
reuse scratch SGPRs for unrelated values, so a join over the whole kernel (ldsreach) bounds
neither M0 nor the DS address registers. Here each register's value is tracked per program
point (basic blocks in a worklist, joined where paths meet, widened to "anything" in loops
whose values keep growing), with the work-item id bounded by the workgroup size and
`v_readfirstlane` copying its source's bounds: the wave id the kernels derive from the
work-item id (`v0 >> 6`) stays bounded, and with it the wave's LDS base (M0 = base + buffer).

Why a relational part: an address may also be an SGPR value nothing bounds (a kernel
argument, a scalar load) plus a known offset. Such a value is wave-uniform, so two addresses of
one wave built from the same definition of it differ by their offsets alone: a Value is
`base + [lo, hi]`, base naming that definition (an SGPR written outside every loop, so one
value per wave). Two ranges with the same base compare by offsets within one wave; across
waves the base differs, so only absolute ranges compare (`Span.cross`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from f4pipe.analysis.ldsreach import TOP, Interval, WritePlan, planned_writes, write_plan
from f4pipe.arch import gfx950, isa
from f4pipe.arch.decode import Instruction, Operand
from f4pipe.arch.effects import EXEC

if TYPE_CHECKING:
    from f4pipe.codeobj.program import Program

#: Visits of a block after which registers whose value still changes are taken as anything.
WIDEN_AFTER = 8
#: Offsets compared under one base stay below this, so M0's 18-bit truncation (the DMA's LDS
#: address is M0[17:2] * 4) cannot bring two different offsets together.
RELATIONAL_SPAN = 1 << 16
#: The LDS address bits an LDS DMA takes from M0.
M0_LDS_MASK = 0x3FFFC


#: Operations that compute what another does on the values tracked here (a 32-bit add wraps
#: the same signed or unsigned; without clamp neither saturates).
SAME_AS = {"v_add_i32": "v_add_u32"}


@dataclass(frozen=True)
class Value:
    """base + [lo, hi]: base None for an absolute interval, else the id of an SGPR
    definition whose value (one per wave) nothing bounds."""

    base: int | None
    lo: int
    hi: int


ANY = Value(None, *TOP)


@dataclass(frozen=True)
class Span:
    """The LDS bytes one instruction may touch, [lo, hi) from `base` (None: absolute), over
    every lane, every wave and every time it runs; `cross` the absolute bytes over every wave
    (None when unknown), the only thing two waves can compare."""

    base: int | None
    lo: int
    hi: int
    cross: tuple[int, int] | None

    def may_overlap(self, other: Span) -> bool:
        """Within one wave: disjoint only when provably so."""
        if self.base is not None and self.base == other.base:
            return self.lo < other.hi and other.lo < self.hi
        return Span.cross_overlap(self, other)

    def cross_overlap(self, other: Span) -> bool:
        """Across two waves of a workgroup."""
        if self.cross is None or other.cross is None:
            return True
        return self.cross[0] < other.cross[1] and other.cross[0] < self.cross[1]


UNKNOWN = Span(None, 0, 0, None)


def join(a: Value, b: Value) -> Value:
    if a == b:
        return a
    if a.base == b.base:
        return Value(a.base, min(a.lo, b.lo), max(a.hi, b.hi))
    return ANY


State = dict[tuple[str, int], Value]  # a register missing from the dict holds anything


class _Absolute(Mapping[tuple[str, int], Interval]):
    """The registers of a State that hold an absolute interval, as ldsreach reads them (a
    view: built once per step, it would cost more than the step)."""

    def __init__(self, state: State) -> None:
        self._state = state

    def __getitem__(self, key: tuple[str, int]) -> Interval:
        v = self._state[key]
        if v.base is not None:
            raise KeyError(key)
        return (v.lo, v.hi)

    def get(self, key, default=None):  # type: ignore[override]
        v = self._state.get(key)
        return default if v is None or v.base is not None else (v.lo, v.hi)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return (k for k, v in self._state.items() if v.base is None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _read(state: State, op: Operand) -> Value:
    if op.kind == "imm":
        v = op.value & 0xFFFFFFFF
        return Value(None, v, v)
    if op.count != 1:
        return ANY
    return state.get((op.kind, op.index), ANY)


def _relational(inst: Instruction, state: State) -> Value | None:
    """base + offset through moves and adds of a based value and an absolute one (None when
    the instruction is not such a step)."""
    name = inst.name
    srcs = [_read(state, op) for op in inst.srcs]
    if name in ("s_mov_b32", "v_mov_b32", "v_readfirstlane_b32") and srcs:
        return srcs[0] if srcs[0].base is not None else None
    if name in ("s_add_u32", "s_add_i32", "v_add_u32", "v_add_i32") and len(srcs) == 2:
        based = [v for v in srcs if v.base is not None]
        if len(based) != 1:
            return None
        other = srcs[1] if srcs[0].base is not None else srcs[0]
        if other.base is not None or other.hi >= RELATIONAL_SPAN:
            return ANY
        lo, hi = based[0].lo + other.lo, based[0].hi + other.hi
        return Value(based[0].base, lo, hi) if hi < RELATIONAL_SPAN else ANY
    return None


def _key(inst: Instruction) -> tuple[str, int] | None:
    dst = inst.dst
    if dst is None or dst.count != 1 or dst.kind not in ("s", "v"):
        return None
    return (dst.kind, dst.index)


@dataclass(frozen=True)
class StepPlan:
    """What `step` needs of one instruction, decided once per pc: the instruction (with
    SAME_AS applied), its single scalar or vector destination, and what it writes."""

    inst: Instruction
    key: tuple[str, int] | None
    writes: WritePlan


def step_plan(program: Program, pc: int) -> StepPlan:
    inst = program.at(pc)
    if inst.name in SAME_AS and not inst.clamp:
        inst = replace(inst, name=SAME_AS[inst.name])  # the same registers, so the same effects
    return StepPlan(inst, _key(inst), write_plan(inst, program.effects(pc)))


def step(plan: StepPlan, state: State, fresh: dict[int, int], weak: bool) -> None:
    """Apply one instruction to `state` in place. `fresh`: pc -> base id for the SGPR
    definitions outside every loop, where a result nothing bounds becomes a new base. `weak`:
    the kernel writes EXEC, so a VGPR write may leave some lanes' old values (joined)."""
    inst, key = plan.inst, plan.key
    old = dict(state) if weak else None
    rel = _relational(inst, state) if key is not None else None
    if inst.name == "v_readfirstlane_b32" and rel is None:
        src = _read(state, inst.srcs[0])
        rel = src if src.base is None else ANY
    written = planned_writes(plan.writes, _Absolute(state), TOP)
    for k, interval in written:
        state.pop(k, None)
        if interval != TOP:
            state[k] = Value(None, *interval)
    if key is None:
        return
    if rel is not None:
        state[key] = rel
    elif key[0] == "s" and key not in state and inst.pc in fresh:
        state[key] = Value(fresh[inst.pc], 0, 0)
    if old is not None and key[0] == "v":
        state[key] = join(old.get(key, ANY), state.get(key, ANY))
    if state.get(key) == ANY:
        del state[key]


def launch_state(program: Program) -> State:
    """v0 is the work-item id (x alone when y and z are not enabled), below the workgroup
    size; every SGPR the hardware fills holds anything."""
    if program.workitem_id_dims:
        return {}
    return {("v", 0): Value(None, 0, program.max_workgroup_size - 1)}


@dataclass
class LdsRanges:
    """Per LDS DMA (a buffer load into LDS) and per DS access: the bytes it may touch."""

    dma: dict[int, Span]
    ds: dict[int, Span]

    def own_overlaps(self, ds_pc: int) -> frozenset[int]:
        """DMA pcs whose bytes the DS access at `ds_pc` may touch within one wave."""
        span = self.ds.get(ds_pc, UNKNOWN)
        return frozenset(p for p, d in self.dma.items() if span.may_overlap(d))

    def cross_overlaps(self, ds_pcs: Iterable[int]) -> frozenset[int]:
        """DMA pcs whose bytes any of the DS accesses may touch in another wave."""
        spans = [self.ds.get(pc, UNKNOWN) for pc in ds_pcs]
        return frozenset(p for p, d in self.dma.items() if any(s.cross_overlap(d) for s in spans))


def is_dma_write(inst: Instruction) -> bool:
    """A buffer load whose data goes to LDS (at M0) instead of VGPRs."""
    return inst.fmt == "MUBUF" and inst.lds and inst.name.startswith("buffer_load")


def _span(value: Value, offset: int, size: int, mask: int | None = None) -> Span:
    """The bytes [value + offset, value + offset + size) for every value the register holds."""
    if value == ANY:
        return UNKNOWN
    lo, hi = value.lo, value.hi
    if mask is not None and value.base is None:
        if hi > mask | 3:
            return UNKNOWN
        lo, hi = lo & mask, hi & mask
    span = (lo + offset, hi + offset + size)
    return Span(value.base, *span, span if value.base is None else None)


def access_span(inst: Instruction, state: State, lanes: int) -> Span:
    """What a DS access or an LDS DMA may touch, from the registers' values before it."""
    if inst.fmt == "DS":
        size = 4 * isa.DS_DWORDS[inst.name]
        return _span(_read(state, inst.srcs[0]), inst.offset, size)
    m0 = state.get(("s", isa.M0), ANY)
    return _span(m0, inst.offset, 4 * isa.MUBUF_DWORDS[inst.name] * lanes, M0_LDS_MASK)


def _blocks(program: Program, succ: dict[int, tuple[int, ...]]) -> dict[int, list[int]]:
    """Basic blocks (leader -> pcs in order) of the reachable code."""
    preds: dict[int, int] = {}
    for outs in succ.values():
        for s in outs:
            preds[s] = preds.get(s, 0) + 1
    leaders = {program.entry} | {s for outs in succ.values() if len(outs) != 1 for s in outs}
    leaders |= {s for s, n in preds.items() if n > 1}
    leaders |= {s for pc, outs in succ.items() for s in outs if s != pc + program.at(pc).size}
    blocks: dict[int, list[int]] = {}
    for lead in sorted(leaders):
        pcs, pc = [lead], lead
        while len(succ.get(pc, ())) == 1 and succ[pc][0] not in leaders:
            pc = succ[pc][0]
            pcs.append(pc)
        blocks[lead] = pcs
    return blocks


def _in_cycles(blocks: dict[int, list[int]], succ: dict[int, tuple[int, ...]]) -> set[int]:
    """Leaders of blocks on some cycle of the CFG (a block that can reach itself)."""
    out = {lead: {succ_pc for succ_pc in succ[pcs[-1]]} for lead, pcs in blocks.items()}
    cyclic = set()
    for lead in blocks:
        seen, work = set(), list(out[lead])
        while work:
            b = work.pop()
            if b == lead:
                cyclic.add(lead)
                break
            if b not in seen:
                seen.add(b)
                work.extend(out[b])
    return cyclic


def _join_states(old: State, new: State, widen: bool) -> State:
    out: State = {}
    for k, v in old.items():
        w = new.get(k)
        if w is None:
            continue
        j = join(v, w)
        if widen and j != v:
            continue
        if j != ANY:
            out[k] = j
    return out


def lds_ranges(program: Program, succ: dict[int, tuple[int, ...]]) -> LdsRanges:
    """The bytes every reachable LDS DMA and DS access may touch (`succ`: the CFG,
    f4pipe.analysis.cfg.build_cfg)."""
    blocks = _blocks(program, succ)
    cyclic = _in_cycles(blocks, succ)
    fresh = {pc: pc for lead, pcs in blocks.items() if lead not in cyclic for pc in pcs}
    lanes = min(program.max_workgroup_size, gfx950.WAVE_SIZE)
    weak = any(program.effects(pc).writes & EXEC for pc in succ)
    entry: dict[int, State] = {program.entry: launch_state(program)}
    visits: dict[int, int] = {}
    spans: dict[int, Span] = {}
    plans = {pc: step_plan(program, pc) for pcs in blocks.values() for pc in pcs}
    work = [program.entry]
    while work:
        lead = work.pop()
        state = dict(entry[lead])
        for pc in blocks[lead]:
            inst = program.at(pc)
            if inst.fmt == "DS" or is_dma_write(inst):
                spans[pc] = _join_spans(spans.get(pc), access_span(inst, state, lanes))
            step(plans[pc], state, fresh, weak)
        for nxt in succ[blocks[lead][-1]]:
            if nxt not in entry:
                entry[nxt] = state
                work.append(nxt)
                continue
            visits[nxt] = visits.get(nxt, 0) + 1
            merged = _join_states(entry[nxt], state, visits[nxt] > WIDEN_AFTER)
            if merged != entry[nxt]:
                entry[nxt] = merged
                work.append(nxt)
    dma = {pc: s for pc, s in spans.items() if is_dma_write(program.at(pc))}
    ds = {pc: s for pc, s in spans.items() if pc not in dma}
    return LdsRanges(dma, ds)


def _join_spans(a: Span | None, b: Span) -> Span:
    if a is None:
        return b
    if a.base != b.base:
        return UNKNOWN
    return Span(a.base, min(a.lo, b.lo), max(a.hi, b.hi), _hull(a.cross, b.cross))


def _hull(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    if a is None or b is None:
        return None
    return (min(a[0], b[0]), max(a[1], b[1]))
