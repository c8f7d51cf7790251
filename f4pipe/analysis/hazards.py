"""Static hazard check of a gfx950 kernel over its control-flow graph (`f4pipe hazards X.co`).

Conservative across branches: every edge is taken as possible (branch conditions are data), so
a finding names a path the code allows, which an emulated launch may or may not execute.

- Wait states: for each instruction that consumes under some rule, walk back over all
  predecessor paths until MAX_WAIT_STATES wait states lie between, and keep the shortest
  distance to each producer (LLVM's hazard recognizer takes the same minimum over
  predecessors).
- Counters: explore the abstract machine of timing.py (outstanding ops by issuing pc) over
  every path from the entry; a loop converges when its states repeat.

The pcs where some path breaks a wait-state rule are what the emulator's run-time check needs
to watch (TimingModel.flagged); a kernel with none pays nothing for wait-state checking.
"""

from __future__ import annotations

from dataclasses import dataclass

from f4pipe.analysis.cfg import ByProgram, Cfg, cached_cfg, program_key
from f4pipe.analysis.timing import Hazard, TimingModel
from f4pipe.arch.waitstates import (
    RULE_BY_ID,
    RULES,
    check_pair,
    consumer_rules,
    produced_by,
)
from f4pipe.codeobj.program import Program
from f4pipe.core.cache import kept
from f4pipe.core.errors import EmulatorError

#: Abstract (pc, state) pairs the counter exploration may visit before it gives up.
MAX_STATES = 200_000


@dataclass(frozen=True)
class StaticFinding:
    """A hazard some path allows, as Hazard plus the shortest distance seen (wait states)."""

    hazard: Hazard
    actual: int | None = None
    required: int | None = None


def wait_state_findings(model: TimingModel, cfg: Cfg) -> list[StaticFinding]:
    """Every (rule, producer, consumer) that some path brings closer than the rule allows."""
    out: list[StaticFinding] = []
    effects = {pc: model.effects(pc) for pc in cfg.order}
    produced = {pc: produced_by(e) for pc, e in effects.items()}
    # How far back each rule can matter in this program: its largest bound over its producers.
    reach: dict[str, int] = {}
    for pc, made in produced.items():
        for rule_id in made:
            bound = RULE_BY_ID[rule_id].bound(effects[pc])
            reach[rule_id] = max(reach.get(rule_id, 0), bound)
    wait_states = {pc: e.wait_states for pc, e in effects.items()}
    live = tuple(r for r in RULES if r.rule in reach)  # the rules some producer here has
    for pc in cfg.order:
        consumer = effects[pc]
        uses = consumer_rules(consumer, live)
        if not uses:
            continue
        horizon = max(reach[r.rule] for r, _ in uses)
        best: dict[tuple[str, int], tuple[int, int, frozenset[int]]] = {}
        for prod_pc, between in _producers_within(cfg.pred, wait_states, pc, horizon).items():
            made = produced[prod_pc]
            if not made:
                continue
            for rule, regs, need in check_pair(effects[prod_pc], made, uses, consumer, between):
                key = (rule.rule, prod_pc)
                if key not in best or between < best[key][0]:
                    best[key] = (between, need, regs)
        for (rule_id, prod_pc), (between, need, regs) in sorted(best.items()):
            out.append(_finding(model, rule_id, prod_pc, pc, between, need, regs))
    return out


def _producers_within(
    pred: dict[int, list[int]], wait_states: dict[int, int], pc: int, horizon: int
) -> dict[int, int]:
    """Producer pc -> shortest wait states (below `horizon`) between it and `pc` over all
    predecessor paths (straight-line code without a stack; branches push the other preds)."""
    dist: dict[int, int] = {}
    stack = [(p, 0) for p in pred.get(pc, ())]
    while stack:
        p, between = stack.pop()
        while between < horizon and dist.get(p, horizon) > between:
            dist[p] = between
            between += wait_states[p]
            ps = pred.get(p)
            if not ps:
                break
            stack.extend((q, between) for q in ps[1:])
            p = ps[0]
    return dist


def _finding(model, rule_id, prod_pc, pc, between, need, regs) -> StaticFinding:
    from f4pipe.analysis.timing import reg_list

    rule = RULE_BY_ID[rule_id]
    msg = (
        f"hazard [{rule_id}]: pc {pc:#x} `{model.text(pc)}` uses {reg_list(regs)} "
        f"{between} wait state(s) after pc {prod_pc:#x} `{model.text(prod_pc)}` on some path; "
        f"{rule.what} needs {need} ({rule.source})"
    )
    return StaticFinding(Hazard(rule_id, pc, prod_pc, msg), between, need)


def counter_findings(model: TimingModel, cfg: Cfg) -> list[StaticFinding]:
    """Counter hazards on any path: explore (pc, abstract state) from the entry."""
    if model.track_window:
        raise ValueError("explore counters with a model that does not track windows")
    seen: set[tuple[int, int]] = set()
    found: dict[tuple[str, int, int], Hazard] = {}
    work = [(model.program.entry, 0)]
    while work:
        pc, sid = work.pop()
        if (pc, sid) in seen:
            continue
        seen.add((pc, sid))
        if len(seen) > MAX_STATES:
            raise EmulatorError(
                f"{model.program.symbol}: more than {MAX_STATES} (pc, outstanding-ops) states; "
                "the counter check cannot prove this kernel safe"
            )
        t = model.transition(sid, pc)
        for h in t.hazards:
            found.setdefault(h.key(), h)
        work.extend((s, t.next) for s in cfg.succ[pc])
    return [StaticFinding(h) for _, h in sorted(found.items())]


@dataclass
class StaticReport:
    """`f4pipe hazards` for one kernel: findings by kind, and what was covered."""

    symbol: str
    instructions: int
    wait_states: list[StaticFinding]
    counters: list[StaticFinding]

    @property
    def count(self) -> int:
        return len(self.wait_states) + len(self.counters)

    def messages(self) -> list[str]:
        """Every finding, wait states first: the one list `hazards`, `waits` and `try` show."""
        return [f.hazard.message for f in (*self.wait_states, *self.counters)]


#: Programs' wait-state findings by content: `try` checks the edit and its original statically
#: and then launches both, and each launch's timing model needs the same pass, which is the
#: costliest part of the static check. Between commands they are kept in f4pipe's cache
#: (f4pipe.core.cache.kept): every stage of a main job launches every kernel.
_WAIT_STATE_FINDINGS: ByProgram[tuple[StaticFinding, ...]] = ByProgram()


def cached_wait_state_findings(model: TimingModel, cfg: Cfg) -> list[StaticFinding]:
    """wait_state_findings(model, cfg), computed once per program content."""
    program = model.program
    found = _WAIT_STATE_FINDINGS.get(
        program,
        lambda: kept(
            "wait-state-findings",
            program_key(program),
            lambda: tuple(wait_state_findings(model, cfg)),
        ),
    )
    return list(found)


def analyse(program: Program) -> StaticReport:
    """Both static checks of one kernel; the counters with LDS DMA in them
    (f4pipe.analysis.ldsdma: a DS access or barrier that needs an outstanding DMA retired)."""
    from f4pipe.analysis.ldsdma import LdsDmaModel

    cfg = cached_cfg(program)
    model = TimingModel(program, frozenset())
    counters = kept(
        "counter-findings",
        program_key(program),
        lambda: tuple(counter_findings(LdsDmaModel(program, frozenset()), cfg)),
    )
    return StaticReport(
        program.symbol,
        len(cfg.order),
        cached_wait_state_findings(model, cfg),
        list(counters),
    )


def timing_model(program: Program) -> TimingModel:
    """The run-time model of `program`, watching the pcs the static wait-state pass flags."""
    model = TimingModel(program, frozenset())
    findings = cached_wait_state_findings(model, cached_cfg(program))
    model.watch(frozenset(f.hazard.consumer_pc for f in findings))
    return model
