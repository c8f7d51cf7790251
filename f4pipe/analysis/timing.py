"""What hardware timing allows: memory counters, LDS visibility between waves, wait states.

The emulator computes values with memory completing at issue. This module checks that the
kernel never depends on that: every read of a result must come after the wait that retires it
on hardware, at the latest point the ISA allows (docs/reference/timing.md, section A):

- **Counters, per wave.** Buffer loads/stores/atomics and LDS DMA count in vmcnt and retire in
  issue order; DS ops count in lgkmcnt in order; SMEM counts in lgkmcnt but returns out of
  order, so its results are trusted only after lgkmcnt(0) (docs/reference/timing.md C9), and
  while one is outstanding lgkmcnt(N > 0) proves back only the DS ops beyond the newest N (the
  scalar load may be what returned). `s_waitcnt` retires the oldest ops down to its limits;
  `s_barrier` retires nothing; `s_endpgm` retires all.
  Reading a register a load has not yet provably written, or overwriting it (except with a
  younger load on the same in-order counter), is a hazard.
- **LDS between waves.** A word written by another wave (ds_write, or LDS DMA) is visible only
  if the writer retired the write before arriving at the last s_barrier the reader has passed;
  an LDS DMA is visible to its own wave only after its vmcnt wait. Writing a word that another
  wave's read may still be fetching (not retired before the writer's last barrier) is a hazard
  too, and so is writing a word an LDS DMA may still land on (its data comes through the
  vector-memory path, unordered with LDS writes until the DMA is retired). Addresses are data,
  so this part is checked as the launch runs.
- **Wait states** (waitstates.py) along the path each wave executes.

The counter and wait-state parts depend only on the path, not on data, so each wave carries an
interned abstract state (outstanding ops by pc, and the recent instruction window when the
static pass found a pc worth checking) and a transition table memoises (state, pc) -> next
state and hazards: in lockstep a step costs one dict lookup. What depends on data (LDS words,
sequence numbers, barrier generations) is kept as the launch runs, in timingrun.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from f4pipe.arch.effects import NO_OFFSETS, Effects, effects_of, reg_name
from f4pipe.arch.waitcnt import LGKM_MAX, VM_MAX
from f4pipe.arch.waitstates import MAX_WAIT_STATES, check_window
from f4pipe.codeobj.program import Program

#: Instructions kept in a wave's window: with at least one wait state each, a producer older
#: than this is more than MAX_WAIT_STATES away from any consumer.
WINDOW = MAX_WAIT_STATES + 2
#: Barrier generations remembered per wave (waves of a workgroup are at most one apart).
GENERATIONS = 4
#: Distinct hazards a report keeps in full (the count covers all).
MAX_HAZARDS = 32

VM, LDS, SMEM = 0, 1, 2
COUNTER_OF = {"vm": VM, "lds": LDS, "smem": SMEM}
#: Most ops a counter holds is its s_waitcnt field's maximum (arch.waitcnt VM_MAX, LGKM_MAX): a
#: wave does not issue past a full counter, so older ops have retired by then.


@dataclass(frozen=True)
class Hazard:
    """One timing fault: the rule, both instructions, and what was required vs what was there.

    advisory: the kernel relies on something the ISA does not promise but that holds by
    construction on the hardware (an LDS read issued before a barrier is served before any
    write issued after it reaches LDS); reported, never a failed verdict."""

    rule: str  # "vmcnt", "lgkmcnt", "lds-visibility", "lds-war(-in-flight)", "lds-waw", B1.x...
    consumer_pc: int
    producer_pc: int
    message: str
    advisory: bool = False
    #: LDS rules: the other instruction ran on another wave of the workgroup (an s_barrier, with
    #: the op retired before it, orders the two; f4pipe.analysis.waits.barrier_repairs).
    across_waves: bool = False

    def key(self) -> tuple[str, int, int]:
        return self.rule, self.producer_pc, self.consumer_pc


@dataclass
class HazardReport:
    """Distinct hazards of one launch (the first MAX_HAZARDS of each severity in full) and
    where each first hit. `count` counts the failing ones, `advisories` the others."""

    hazards: list[Hazard] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    advisory: list[Hazard] = field(default_factory=list)
    advisory_where: list[str] = field(default_factory=list)
    count: int = 0  # distinct failing (rule, producer, consumer) triples
    advisories: int = 0
    _seen: set[tuple[str, int, int]] = field(default_factory=set, repr=False)

    def add(self, hazard: Hazard, where: str) -> None:
        key = hazard.key()
        if key in self._seen:
            return
        self._seen.add(key)
        if hazard.advisory:
            self.advisories += 1
            kept, places = self.advisory, self.advisory_where
        else:
            self.count += 1
            kept, places = self.hazards, self.where
        if len(kept) < MAX_HAZARDS:
            kept.append(hazard)
            places.append(where)

    def summary(self) -> str:
        """One line: how many, and the first failing one in full."""
        if not self.count:
            return "no hazards" + (f" ({self.advisories} advisory)" if self.advisories else "")
        more = f" (+{self.count - 1} more)" if self.count > 1 else ""
        return f"{self.hazards[0].message} [{self.where[0]}]{more}"


def reg_list(regs) -> str:
    """Registers as LLVM ranges: v[8:11], a3, s[12:15], vcc, exec."""
    names = [reg_name(r) for r in sorted(regs)]
    for pair in ("vcc", "exec"):
        if f"{pair}_lo" in names and f"{pair}_hi" in names:
            names = [n for n in names if n != f"{pair}_hi"]
            names[names.index(f"{pair}_lo")] = pair
    out, i = [], 0
    while i < len(names):
        j = i
        prefix = names[i].rstrip("0123456789")
        while (
            j + 1 < len(names)
            and names[j + 1].rstrip("0123456789") == prefix
            and prefix in ("v", "a", "s")
            and int(names[j + 1][len(prefix) :]) == int(names[j][len(prefix) :]) + 1
        ):
            j += 1
        if j > i:
            lo, hi = names[i][len(prefix) :], names[j][len(prefix) :]
            out.append(f"{prefix}[{lo}:{hi}]")
        else:
            out.append(names[i])
        i = j + 1
    return ", ".join(out)


@dataclass(frozen=True, slots=True)
class State:
    """Outstanding memory ops of one wave (issuing pcs, oldest first) and its recent window."""

    vm: tuple[int, ...] = ()
    lds: tuple[int, ...] = ()
    smem: tuple[int, ...] = ()
    window: tuple[tuple[int, tuple[int, int, int, int]], ...] = ()
    #: Registers some outstanding load will still write (derived from the queues).
    pending: frozenset[int] = field(default=frozenset(), compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class Transition:
    """The effect of one instruction on a wave: its next state, the hazards it raises, the
    ops it retires, and what TimingRun must do at run time (counter: issue on VM/LDS, -1
    none; log: remember its pc by sequence number; barrier / endpgm)."""

    next: int
    hazards: tuple[Hazard, ...]
    retire_vm: int
    retire_lds: int
    counter: int = -1
    log: bool = False
    barrier: bool = False
    endpgm: bool = False


class TimingModel:
    """Per program: instruction effects, the interned states and the memoised transitions."""

    def __init__(self, program: Program, flagged: frozenset[int]) -> None:
        self.program = program
        #: pcs where some path breaks a wait-state rule (static pass): only these need the window.
        self.flagged = flagged
        self.track_window = bool(flagged)
        self._effects: dict[tuple[int, tuple[int, int, int, int]], Effects] = {}
        self.states: list[State] = [State()]
        self._ids: dict[State, int] = {State(): 0}
        self._memo: dict[tuple[int, int, tuple[int, int, int, int]], Transition] = {}

    def watch(self, flagged: frozenset[int]) -> None:
        """Check wait states at run time at these pcs (before any transition is memoised)."""
        assert not self._memo, "watch() must come before the first transition"
        self.flagged = flagged
        self.track_window = bool(flagged)

    def effects(self, pc: int, offsets: tuple[int, int, int, int] = NO_OFFSETS) -> Effects:
        key = (pc, offsets)
        e = self._effects.get(key)
        if e is None:
            e = (
                self.program.effects(pc)
                if offsets == NO_OFFSETS
                else effects_of(self.program.at(pc), offsets)
            )
            self._effects[key] = e
        return e

    def text(self, pc: int) -> str:
        from f4pipe.arch.disasm import format_instruction

        return format_instruction(self.program.at(pc), self.program.labels)

    def transition(self, sid: int, pc: int, offsets=NO_OFFSETS) -> Transition:
        key = (sid, pc, offsets)
        t = self._memo.get(key)
        if t is None:
            t = self._step(self.states[sid], pc, offsets)
            self._memo[key] = t
        return t

    def retag(self, pc: int, vm: tuple, lds: tuple, smem: tuple) -> tuple[tuple, tuple, tuple]:
        """The queues after `pc`'s retirements (f4pipe.analysis.waits marks ops here)."""
        return vm, lds, smem

    def _intern(self, state: State) -> int:
        sid = self._ids.get(state)
        if sid is None:
            sid = len(self.states)
            self.states.append(state)
            self._ids[state] = sid
        return sid

    # --- one step of the abstract machine ---------------------------------------------------

    def _step(self, s: State, pc: int, offsets) -> Transition:
        e = self.effects(pc, offsets)
        hazards = self._counter_hazards(s, pc, e)
        if self.track_window:
            window = (*s.window, (pc, offsets))[-WINDOW:]
            if pc in self.flagged:
                hazards += self._wait_state_hazards(window)
        else:
            window = ()
        vm, lds, smem = s.vm, s.lds, s.smem
        retire_vm = retire_lds = 0
        if e.wait is not None:
            vm_limit, lgkm_limit = e.wait
            retire_vm = max(0, len(vm) - vm_limit)
            if lgkm_limit == 0:
                retire_lds, smem = len(lds), ()
            else:
                # SMEM returns out of order with DS, so an outstanding scalar load may be what
                # brought the count down: only the DS ops beyond the limit are sure to be back
                # (LLVM's SIInsertWaitcnts forces lgkmcnt(0) in this case: counterOutOfOrder).
                retire_lds = max(0, len(lds) - lgkm_limit)
        elif "endpgm" in e.tags:
            retire_vm, retire_lds, smem = len(vm), len(lds), ()
        vm, lds = vm[retire_vm:], lds[retire_lds:]
        vm, lds, smem = self.retag(pc, vm, lds, smem)
        # Ops that write no register are kept anonymous (-1): only their count matters here
        # (LDS DMA is tracked by sequence number in TimingRun), so loops of stores converge.
        op = pc if e.load_dest else -1
        if e.counter == "vm":
            vm = (*vm, op)
            full = max(0, len(vm) - VM_MAX)  # issue waited for the oldest to retire
            vm, retire_vm = vm[full:], retire_vm + full
        elif e.counter == "lds":
            lds = (*lds, op)
            full = max(0, len(lds) - LGKM_MAX)  # as for a wait: SMEM may be what returned
            lds, retire_lds = lds[full:], retire_lds + full
        elif e.counter == "smem":
            smem = (*smem, op)
        if (vm, lds, smem) == (s.vm, s.lds, s.smem):
            pending = s.pending
        else:
            ops = (*vm, *lds, *smem)
            pending = frozenset().union(*(self.effects(o).load_dest for o in ops if o >= 0))
        nxt = self._intern(State(vm, lds, smem, window, pending))
        counter = COUNTER_OF.get(e.counter or "", -1)
        return Transition(
            nxt,
            tuple(hazards),
            retire_vm,
            retire_lds,
            counter=counter if counter in (VM, LDS) else -1,
            log="lds_dma" in e.tags or counter == LDS,
            barrier="barrier" in e.tags,
            endpgm="endpgm" in e.tags,
        )

    def _counter_hazards(self, s: State, pc: int, e: Effects) -> list[Hazard]:
        reads = e.read_regs()
        writes = e.writes | e.load_dest
        out: list[Hazard] = []
        if not (s.pending & (reads | writes)):
            return out
        queues = ((VM, s.vm), (LDS, s.lds), (SMEM, s.smem))
        for counter, queue in queues:
            for i, op_pc in enumerate(queue):
                if op_pc < 0:
                    continue
                dest = self.effects(op_pc).load_dest
                younger = len(queue) - 1 - i
                raw = dest & reads
                if raw:
                    out.append(self._pending(counter, op_pc, pc, raw, younger, "reads"))
                waw = dest & writes
                # A younger load on the same in-order counter lands after this one: no hazard.
                in_order = counter != SMEM and COUNTER_OF.get(e.counter or "") == counter
                if waw and not (in_order and waw <= e.load_dest):
                    out.append(self._pending(counter, op_pc, pc, waw, younger, "overwrites"))
        return out

    def _pending(self, counter: int, op_pc: int, pc: int, regs, younger: int, verb: str) -> Hazard:
        if counter == VM:
            rule, need = "vmcnt", f"s_waitcnt vmcnt({younger}) or lower"
        elif counter == LDS:
            rule, need = "lgkmcnt", f"s_waitcnt lgkmcnt({younger}) or lower"
        else:
            rule, need = "lgkmcnt", "s_waitcnt lgkmcnt(0) (scalar loads return out of order)"
        msg = (
            f"hazard [{rule}]: pc {pc:#x} `{self.text(pc)}` {verb} {reg_list(regs)} before the "
            f"load at pc {op_pc:#x} `{self.text(op_pc)}` has landed; needs {need} between them"
        )
        return Hazard(rule, pc, op_pc, msg)

    def _wait_state_hazards(self, window) -> list[Hazard]:
        items = [(pc, self.effects(pc, offs)) for pc, offs in window]
        out = []
        for v in check_window(items):
            msg = (
                f"hazard [{v.rule.rule}]: pc {v.consumer_pc:#x} `{self.text(v.consumer_pc)}` "
                f"uses {reg_list(v.registers)} {v.actual} wait state(s) after pc "
                f"{v.producer_pc:#x} `{self.text(v.producer_pc)}`; {v.rule.what} needs "
                f"{v.required} ({v.rule.source})"
            )
            out.append(Hazard(v.rule.rule, v.consumer_pc, v.producer_pc, msg))
        return out
