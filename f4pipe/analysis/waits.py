"""Waits computed, not remembered: the loosest correct count at every `s_waitcnt` of a kernel.

A wait W exists to retire memory ops that some later instruction reads (or overwrites) before
any later wait would retire them. Counters retire in issue order (f4pipe.analysis.timing), so W
with limit L retires every outstanding op that has at least L younger ops on its counter.
The loosest correct L is therefore the smallest "younger count at W" over the ops W must
retire, taken over every state in which any path reaches W.

Which ops W must retire is found by running the static counter exploration
(f4pipe.analysis.hazards) once per wait with that wait disabled, and with every op outstanding at W
tagged by its younger count there: every hazard the exploration then finds names a tagged op
that W (and nothing after it) had to retire. Because a later `s_waitcnt vmcnt(N)` retires all
but the newest N ops whatever W left behind, ops W need not retire stay harmless at any
looser L; the answer is exact for the paths the exploration covers (every edge taken both
ways), with the kernel's other waits as they are. Loosening several waits at once is not the
same question: apply them one at a time (`loosen_all`), re-checking after each.

Scalar loads return out of order, so an SMEM op W must retire forces lgkmcnt(0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from f4pipe.analysis.cfg import Cfg, build_cfg
from f4pipe.analysis.hazards import counter_findings
from f4pipe.analysis.ldsdma import LdsDmaModel
from f4pipe.analysis.timing import Hazard, TimingModel
from f4pipe.arch.effects import NO_OFFSETS, Effects, effects_of
from f4pipe.arch.waitcnt import LGKM_MAX, VM_MAX, encode_waitcnt
from f4pipe.codeobj.program import Program

if TYPE_CHECKING:
    pass

#: A tagged op is pc | (younger count at W + 1) << TAG_SHIFT (pcs are below 2**32).
TAG_SHIFT = 32
PC_MASK = (1 << TAG_SHIFT) - 1
#: The limits of an s_waitcnt that waits for nothing on a counter.
NO_WAIT = (VM_MAX, LGKM_MAX)


class _Tagged(LdsDmaModel):
    """The static timing model (LDS DMA in it: f4pipe.analysis.ldsdma), reading tagged op ids
    (pc | tag << TAG_SHIFT) as their pc."""

    def effects(self, pc: int, offsets: tuple[int, int, int, int] = NO_OFFSETS) -> Effects:
        return super().effects(pc & PC_MASK, offsets)

    def text(self, pc: int) -> str:
        return super().text(pc & PC_MASK)


class LdsModel(_Tagged):
    """The static timing model with LDS DMA ops named: what `--explain` and the repairs read
    the outstanding ops from."""


class _WaitProbe(_Tagged):
    """The timing model with one wait disabled and the ops outstanding there tagged."""

    def __init__(self, program: Program, wait_pc: int) -> None:
        super().__init__(program, frozenset())
        self.wait_pc = wait_pc

    def effects(self, pc: int, offsets: tuple[int, int, int, int] = NO_OFFSETS) -> Effects:
        e = super().effects(pc, offsets)
        if pc == self.wait_pc and e.wait is not None:
            return replace(e, wait=NO_WAIT)
        return e

    def retag(self, pc: int, vm: tuple, lds: tuple, smem: tuple) -> tuple[tuple, tuple, tuple]:
        if pc != self.wait_pc:
            return vm, lds, smem
        return _tag(vm), _tag(lds), tuple(_tagged(op, 0) for op in smem)


def _tagged(op: int, younger: int) -> int:
    return op if op < 0 else (op & PC_MASK) | ((younger + 1) << TAG_SHIFT)


def _tag(queue: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_tagged(op, len(queue) - 1 - i) for i, op in enumerate(queue))


def _younger(op: int) -> int | None:
    tag = op >> TAG_SHIFT
    return tag - 1 if tag else None


@dataclass(frozen=True)
class Need:
    """One op a wait must retire: the load, who reads (or overwrites) its registers, and how
    many younger ops on its counter were outstanding at the wait."""

    counter: str  # vmcnt | lgkmcnt
    op_pc: int
    consumer_pc: int
    younger: int
    message: str


@dataclass(frozen=True)
class WaitAdvice:
    """An s_waitcnt: its counts, the loosest correct ones for registers, and the ops that bind
    them. `dma_released`: LDS DMA ops the loosened vmcnt would no longer retire here; other
    waves read what they write after a barrier, at addresses that are data, so only an
    emulated launch (`f4pipe waits --verify`) can clear them."""

    pc: int
    text: str
    actual: tuple[int, int]
    loosest: tuple[int, int]
    needs: tuple[Need, ...]
    dma_released: int = 0

    @property
    def stricter(self) -> bool:
        return self.loosest != self.actual and all(
            lo >= a for lo, a in zip(self.loosest, self.actual, strict=True)
        )

    def render(self) -> str:
        parts = []
        for name, a, lo, cap in zip(
            ("vmcnt", "lgkmcnt"), self.actual, self.loosest, NO_WAIT, strict=True
        ):
            if a >= cap:
                continue
            if lo == a:
                parts.append(f"{name}({a}) is needed")
            elif lo >= cap:
                parts.append(f"{name}({a}) waits for nothing any path needs: drop it")
            else:
                parts.append(f"{name}({a}) could be {name}({lo})")
        if self.dma_released:
            parts.append(
                f"loosening leaves {self.dma_released} LDS DMA load(s) in flight past here: "
                "confirm with --verify"
            )
        return f"pc {self.pc:#x} `{self.text}`: " + "; ".join(parts)


def _limit(needs: list[Need], counter: str, cap: int) -> int:
    younger = [n.younger for n in needs if n.counter == counter]
    return min(younger) if younger else cap


def states_by_pc(program: Program, cfg: Cfg) -> tuple[LdsModel, dict[int, set[int]]]:
    """Every abstract state (outstanding ops, LDS DMA named) in which some path reaches each
    pc, as ids of the returned model."""
    model = LdsModel(program, frozenset())
    at: dict[int, set[int]] = {}
    work = [(program.entry, 0)]
    while work:
        pc, sid = work.pop()
        seen = at.setdefault(pc, set())
        if sid in seen:
            continue
        seen.add(sid)
        t = model.transition(sid, pc)
        work.extend((s, t.next) for s in cfg.succ[pc])
    return model, at


def _dma_released(model: LdsModel, sids: set[int], actual: int, loosest: int) -> int:
    """LDS DMA ops a vmcnt of `loosest` instead of `actual` leaves outstanding (most over the
    states)."""
    most = 0
    for sid in sids:
        vm = model.states[sid].vm
        released = [
            op
            for i, op in enumerate(vm)
            if op >= 0
            and actual <= len(vm) - 1 - i < loosest
            and "lds_dma" in model.effects(op).tags
        ]
        most = max(most, len(released))
    return most


def advise_wait(
    program: Program, cfg: Cfg, wait_pc: int, states: tuple[LdsModel, dict[int, set[int]]]
) -> WaitAdvice:
    """The loosest (vmcnt, lgkmcnt) of the s_waitcnt at `wait_pc`, other waits as they are."""
    probe = _WaitProbe(program, wait_pc)
    needs = []
    for f in counter_findings(probe, cfg):
        h = f.hazard
        younger = _younger(h.producer_pc)
        if younger is None:
            continue  # an op issued after the wait: not this wait's business
        counter = "vmcnt" if h.rule == "vmcnt" else "lgkmcnt"
        needs.append(Need(counter, h.producer_pc & PC_MASK, h.consumer_pc, younger, h.message))
    base = TimingModel(program, frozenset())
    actual = base.effects(wait_pc).wait
    assert actual is not None
    loosest = (_limit(needs, "vmcnt", VM_MAX), _limit(needs, "lgkmcnt", LGKM_MAX))
    model, at = states
    dma = _dma_released(model, at.get(wait_pc, set()), actual[0], loosest[0])
    return WaitAdvice(wait_pc, base.text(wait_pc), actual, loosest, tuple(needs), dma)


def wait_pcs(program: Program, cfg: Cfg) -> list[int]:
    model = TimingModel(program, frozenset())
    return [pc for pc in cfg.order if model.effects(pc).wait is not None]


def advise(program: Program) -> list[WaitAdvice]:
    """Advice for every s_waitcnt reachable in the kernel."""
    cfg = build_cfg(program)
    states = states_by_pc(program, cfg)
    return [advise_wait(program, cfg, pc, states) for pc in wait_pcs(program, cfg)]


def patch_waits(co_path: Path, out: Path, limits: dict[int, tuple[int, int]]) -> None:
    """Write `co_path` to `out` with the s_waitcnt at each pc given new (vmcnt, lgkmcnt): the
    instruction keeps its size, so nothing else moves."""
    from f4pipe.codeobj.codeobject import CodeObject
    from f4pipe.core.fsio import write_bytes

    co = CodeObject.read(co_path)
    text = co.sections[".text"]
    data = bytearray(co.data)
    for pc, (vm, lgkm) in limits.items():
        at = text.offset + (pc - text.addr)
        word = int.from_bytes(data[at : at + 4], "little")
        if word >> 16 != SOPP_WAITCNT:
            raise ValueError(f"{co_path}: pc {pc:#x} is not an s_waitcnt")
        word = (word & 0xFFFF0000) | encode_waitcnt(word & 0xFFFF, vm, lgkm)
        data[at : at + 4] = word.to_bytes(4, "little")
    write_bytes(out, bytes(data))


#: The upper half of an s_waitcnt word (SOPP encoding 0b101111111, opcode 12).
SOPP_WAITCNT = 0xBF8C


@dataclass(frozen=True)
class Repair:
    """What to insert before one instruction so that no path breaks a rule there: a wait with
    the loosest counts that retire every op it reads or overwrites too early (63 / 15 = no
    wait on that counter), and the fewest extra wait states (an s_nop supplies N+1)."""

    before_pc: int
    wait: tuple[int, int] | None
    wait_states: int
    why: tuple[str, ...]  # the counter findings the wait fixes
    why_states: tuple[str, ...] = ()  # the wait-state findings the s_nop fix
    barrier: bool = False  # an s_barrier after the wait (LDS between waves: barrier_repairs)


def repairs(program: Program) -> list[Repair]:
    """The insertions that fix every counter and wait-state finding of the static check, one
    place each: immediately before the consumer (nothing else moves)."""
    from f4pipe.analysis.hazards import wait_state_findings

    cfg = build_cfg(program)
    waits = _unretired_reads(program, cfg)
    states: dict[int, int] = {}
    why_states: dict[int, list[str]] = {}
    for f in wait_state_findings(TimingModel(program, frozenset()), cfg):
        pc = f.hazard.consumer_pc
        states[pc] = max(states.get(pc, 0), (f.required or 0) - (f.actual or 0))
        why_states.setdefault(pc, []).append(f.hazard.message)
    return [
        Repair(
            pc,
            waits[pc][0] if pc in waits else None,
            states.get(pc, 0),
            tuple(waits[pc][1]) if pc in waits else (),
            tuple(why_states.get(pc, [])),
        )
        for pc in sorted(set(waits) | set(states))
    ]


#: Emulator rules a missing s_barrier breaks, between two waves of a workgroup: a read of LDS
#: words another wave wrote, a write over words another wave may still read or an LDS DMA of
#: another wave may still land on.
BARRIER_RULES = frozenset({"lds-visibility", "lds-war", "lds-waw"})


def barrier_repairs(
    program: Program, hazards: Iterable[Hazard], to_pc: Callable[[int], int] = int
) -> list[Repair]:
    """For each instruction the emulator found touching LDS words another wave's op left
    unordered (BARRIER_RULES across waves): an s_barrier right before it, after a wait that
    retires every op of that op's counter (vmcnt for an LDS DMA, lgkmcnt for a DS access).
    Where the barrier belongs can only be seen on a run: which words two waves share is data,
    not code. Every wave runs the same path in an f4gemm kernel, so each reaches the barrier.
    Strict counts (0): `--loosen` relaxes the wait afterwards if the emulator allows.
    `program` ran; `to_pc` maps its pcs to those of the text the repairs apply to."""
    effects = {inst.pc: effects_of(inst) for inst in program.instructions()}
    need: dict[int, tuple[int, int]] = {}
    why: dict[int, list[str]] = {}
    for h in hazards:
        if h.advisory or not h.across_waves or h.rule not in BARRIER_RULES:
            continue
        dma = effects[h.producer_pc].counter == "vm"
        pc = to_pc(h.consumer_pc)
        vm, lgkm = need.get(pc, (VM_MAX, LGKM_MAX))
        need[pc] = (0, lgkm) if dma else (vm, 0)
        why.setdefault(pc, []).append(h.message)
    return [Repair(pc, need[pc], 0, tuple(why[pc]), barrier=True) for pc in sorted(need)]


def dma_wait_repairs(
    program: Program, hazards: Iterable[Hazard], to_pc: Callable[[int], int] = int
) -> list[Repair]:
    """For each DS access the emulator found touching LDS bytes an LDS DMA of its own wave had
    not yet written (which bytes is data: M0 and the DS address come from registers the static
    analysis cannot bound), a wait right before it with the loosest vmcnt that retires that
    DMA op on every path: the fewest younger ops on vmcnt over every static state reaching the
    access (the newest outstanding issue of that op, LLVM's SIInsertWaitcnts rule for an LDS
    DMA the access may alias). `program` ran; `to_pc` maps its pcs to the repaired text's."""
    cfg = build_cfg(program)
    model, at = states_by_pc(program, cfg)
    need: dict[int, int] = {}
    why: dict[int, list[str]] = {}
    for h in hazards:
        if h.advisory or h.across_waves or h.rule not in BARRIER_RULES:
            continue
        if "lds_dma" not in model.effects(h.producer_pc).tags:
            continue
        pc = to_pc(h.consumer_pc)
        need[pc] = min(
            need.get(pc, VM_MAX), _loosest_retiring(model, at, h.producer_pc, h.consumer_pc)
        )
        why.setdefault(pc, []).append(h.message)
    return [Repair(pc, (need[pc], LGKM_MAX), 0, tuple(why[pc])) for pc in sorted(need)]


def barrier_wait_repairs(
    program: Program, hazards: Iterable[Hazard], edited: Program, to_pc: Callable[[int], int] = int
) -> list[Repair]:
    """For each LDS access the emulator found unordered with another wave's op although a
    barrier lies between them: a wait before that barrier (each s_barrier reaching the access
    with no other barrier between, where the op is outstanding) with the loosest count
    retiring the op in every static state there: vmcnt for an LDS DMA, lgkmcnt for a DS
    access. The barrier is there; the wait before it is what is missing (the release LLVM's
    memory model puts before a workgroup barrier). When the user's `edited` kernel (the text
    `to_pc` maps into) already retires the op before the access in every state, the wait is
    there and the barrier after it is what is missing: barrier_repairs, not this. `program`
    ran (the edit with this session's repairs so far)."""
    cfg = build_cfg(program)
    model, at = states_by_pc(program, cfg)
    edited_model, edited_at = states_by_pc(edited, build_cfg(edited))
    need: dict[int, list[int]] = {}
    why: dict[int, list[str]] = {}
    for h in hazards:
        if h.advisory or not h.across_waves or h.rule not in BARRIER_RULES:
            continue
        queue = _QUEUES.get(model.effects(h.producer_pc).counter)
        op, access = to_pc(h.producer_pc), to_pc(h.consumer_pc)
        if queue is None or not _outstanding_at(edited_model, edited_at, queue, op, access):
            continue
        for barrier in _barriers_before(program, cfg, h.consumer_pc):
            if not _outstanding_at(model, at, queue, h.producer_pc, barrier):
                continue
            pc = to_pc(barrier)
            limits = need.setdefault(pc, [VM_MAX, LGKM_MAX])
            slot = 0 if queue == "vm" else 1
            limits[slot] = min(
                limits[slot], _loosest_retiring(model, at, h.producer_pc, barrier, queue)
            )
            why.setdefault(pc, []).append(h.message)
    return [Repair(pc, (need[pc][0], need[pc][1]), 0, tuple(why[pc])) for pc in sorted(need)]


#: The state queue an op's counter puts it in (f4pipe.analysis.timing.State).
_QUEUES = {"vm": "vm", "lds": "lds"}


def _barriers_before(program: Program, cfg: Cfg, pc: int) -> set[int]:
    """The s_barrier instructions from which `pc` is reached with no other barrier between."""
    names = {inst.pc: inst.name for inst in program.instructions()}
    found: set[int] = set()
    seen: set[int] = set()
    work = list(cfg.pred.get(pc, ()))
    while work:
        p = work.pop()
        if p in seen:
            continue
        seen.add(p)
        if names.get(p) == "s_barrier":
            found.add(p)
        else:
            work.extend(cfg.pred.get(p, ()))
    return found


def _outstanding_at(model: LdsModel, at: dict[int, set[int]], queue: str, op: int, pc: int) -> bool:
    return any(op in getattr(model.states[sid], queue) for sid in at.get(pc, ()))


def _loosest_retiring(
    model: LdsModel, at: dict[int, set[int]], op_pc: int, pc: int, queue: str = "vm"
) -> int:
    """The loosest count at `pc` that retires every outstanding issue of `op_pc` (in the state
    queue `queue`) in every static state reaching `pc` (0 when no state has it outstanding:
    the run saw what the static states do not)."""
    younger = [
        len(q) - 1 - i
        for q in (getattr(model.states[sid], queue) for sid in at.get(pc, ()))
        for i, op in enumerate(q)
        if op == op_pc
    ]
    return min(younger, default=0)


#: The pc of a wait the repair inserts before `pc` is pc | VIRTUAL (no real pc has the bit).
VIRTUAL = 1 << 40


class _RepairModel(LdsDmaModel):
    """The static model with a wait inserted before some pcs (at pc | VIRTUAL)."""

    def __init__(self, program: Program, inserted: dict[int, tuple[int, int]]) -> None:
        super().__init__(program, frozenset())
        self.inserted = inserted

    def effects(self, pc: int, offsets: tuple[int, int, int, int] = NO_OFFSETS) -> Effects:
        if pc & VIRTUAL:
            return Effects("s_waitcnt", "sopp", wait=self.inserted[pc & ~VIRTUAL])
        return super().effects(pc, offsets)


def _unretired_reads(program: Program, cfg: Cfg) -> dict[int, tuple[tuple[int, int], list[str]]]:
    """Waits to insert: explored in path order, a consumer of an op no wait retires in time
    gets a wait right before it with the loosest counts that retire every such op in every
    state reaching it; the exploration then goes on past that wait, so later readers of the
    same load on that path need nothing more (one missing wait, one insertion). Restarted
    whenever an insertion changes, until none does."""
    inserted: dict[int, tuple[int, int]] = {}
    messages: dict[int, list[str]] = {}
    while True:
        changed = _explore_once(program, cfg, inserted, messages)
        if not changed:
            return {pc: (limits, messages[pc]) for pc, limits in inserted.items()}


def _explore_once(program, cfg, inserted, messages) -> bool:
    model = _RepairModel(program, inserted)
    seen: set[tuple[int, int]] = set()
    work = [(program.entry, 0)]
    while work:
        pc, sid = work.pop()
        if (pc, sid) in seen:
            continue
        seen.add((pc, sid))
        if pc in inserted:
            sid = model.transition(sid, pc | VIRTUAL).next
        t = model.transition(sid, pc)
        if t.hazards:
            need = _limits_needed(model, sid, pc)
            old = inserted.get(pc, NO_WAIT)
            inserted[pc] = (min(old[0], need[0]), min(old[1], need[1]))
            found = messages.setdefault(pc, [])
            found += [h.message for h in t.hazards if h.message not in found]
            return True
        work.extend((nxt, t.next) for nxt in cfg.succ[pc])
    return False


def _limits_needed(model: TimingModel, sid: int, pc: int) -> tuple[int, int]:
    """The loosest (vmcnt, lgkmcnt) that retires every op the instruction at `pc` reads or
    overwrites too early in state `sid`."""
    limits = [VM_MAX, LGKM_MAX]
    s, e = model.states[sid], model.effects(pc)
    reads, writes = e.read_regs(), e.writes | e.load_dest
    for counter, queue, name in ((0, s.vm, "vm"), (1, s.lds, "lds"), (1, s.smem, "")):
        # a younger load on the same in-order counter may overwrite (timing.py)
        in_order = bool(name) and e.counter == name
        for i, op in enumerate(queue):
            dest = model.effects(op).load_dest if op >= 0 else frozenset()
            waw = dest & writes
            if not (dest & reads) and (not waw or (in_order and waw <= e.load_dest)):
                continue
            younger = len(queue) - 1 - i if name else 0
            limits[counter] = min(limits[counter], younger)
    return limits[0], limits[1]
