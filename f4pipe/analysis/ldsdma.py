"""The static counter check with LDS DMA in it: which outstanding `buffer_load_* ... lds` a DS
access or an `s_barrier` must see retired.

An LDS DMA writes LDS through the vector-memory path and counts in vmcnt; nothing in the wave
orders its bytes with a DS access but an `s_waitcnt vmcnt` that retires it. Two rules follow
(docs/user-guide.md, "Waits, computed"; docs/reference/timing.md D1, D5):

- **Own wave.** A DS read or write that may touch bytes an outstanding DMA of its wave writes
  needs that DMA retired first: LLVM's SIInsertWaitcnts rule (generateWaitcntInstBefore waits
  for every LDS DMA slot the access may alias, or for all of them when it cannot tell).
- **Across waves.** An `s_barrier` publishes a DMA's bytes to the other waves only if the DMA
  was retired before it. So a barrier needs retired every outstanding DMA whose bytes a DS
  access after it (before the next barrier, on some path) may touch in another wave: every
  wave runs that access after the barrier, and may read the bytes the DMA has not landed.

Which bytes is f4pipe.analysis.ldsranges: a DS access and a DMA it cannot prove disjoint may
alias. The rules are stated as registers so the in-order counter machinery of
f4pipe.analysis.timing needs nothing new: each DMA writes a pseudo-register of its own when it
lands, and a DS access (or barrier) reads the pseudo-registers of the DMAs it may alias.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from f4pipe.analysis.cfg import ByProgram, cached_cfg
from f4pipe.analysis.ldsranges import LdsRanges, is_dma_write, lds_ranges
from f4pipe.analysis.timing import VM, Hazard, TimingModel
from f4pipe.arch.effects import NO_OFFSETS, Effects

if TYPE_CHECKING:
    from f4pipe.codeobj.program import Program

#: The pseudo-register of the n-th LDS DMA of a kernel is DMA_REG_BASE + n (far above every
#: real register number, f4pipe.arch.effects).
DMA_REG_BASE = 1 << 20
#: The read role the pseudo-registers take in Effects.reads.
ROLE = "lds_dma"
#: The pc part of an op id (f4pipe.analysis.waits tags ids above these bits).
PC_BITS = 0xFFFFFFFF


@dataclass(frozen=True)
class DmaRules:
    """Per kernel: each DMA's pseudo-register, the DMAs each DS access may alias in its own
    wave, and for each barrier the DMAs a DS access after it may alias in another wave (with
    that access, for the message)."""

    reg: dict[int, int]  # DMA pc -> pseudo-register
    own: dict[int, frozenset[int]]  # DS pc -> DMA pcs
    published: dict[int, dict[int, int]]  # barrier pc -> DMA pc -> a DS pc after it


def _accesses_after(program: Program, succ: dict[int, tuple[int, ...]], pc: int) -> list[int]:
    """The DS accesses some path reaches from the barrier at `pc` before another barrier."""
    seen: set[int] = set()
    found: list[int] = []
    work = list(succ.get(pc, ()))
    while work:
        p = work.pop()
        if p in seen:
            continue
        seen.add(p)
        inst = program.at(p)
        if inst.name == "s_barrier":
            continue
        if inst.fmt == "DS":
            found.append(p)
        work.extend(succ.get(p, ()))
    return sorted(found)


def dma_rules(program: Program, succ: dict[int, tuple[int, ...]]) -> DmaRules:
    """The rules of one kernel (`succ`: its CFG, f4pipe.analysis.cfg.build_cfg)."""
    ranges: LdsRanges = lds_ranges(program, succ)
    reg = {pc: DMA_REG_BASE + n for n, pc in enumerate(sorted(ranges.dma))}
    own = {pc: ranges.own_overlaps(pc) for pc in ranges.ds}
    published: dict[int, dict[int, int]] = {}
    for pc in sorted(succ):
        if program.at(pc).name != "s_barrier":
            continue
        after: dict[int, int] = {}
        for ds in _accesses_after(program, succ, pc):
            for dma in ranges.cross_overlaps([ds]):
                after.setdefault(dma, ds)
        published[pc] = after
    return DmaRules(reg, own, published)


#: Rules by program content: analyse, repairs and every wait's probe of one kernel share them.
_RULES: ByProgram[DmaRules] = ByProgram()


def cached_rules(program: Program) -> DmaRules:
    """dma_rules(program, its graph), built once per program content."""
    return _RULES.get(program, lambda: dma_rules(program, cached_cfg(program).succ))


class LdsDmaModel(TimingModel):
    """The static timing model with LDS DMA named: each DMA lands a pseudo-register; a DS
    access reads those of the DMAs it may alias in its wave, an s_barrier those a DS access
    after it may alias in another wave."""

    def __init__(self, program: Program, flagged: frozenset[int]) -> None:
        super().__init__(program, flagged)
        self.rules = cached_rules(program)
        self._lds_effects: dict[int, Effects] = {}

    def effects(self, pc: int, offsets: tuple[int, int, int, int] = NO_OFFSETS) -> Effects:
        e = super().effects(pc, offsets)
        if offsets != NO_OFFSETS:
            return e
        out = self._lds_effects.get(pc)
        if out is None:
            out = self._lds_effects[pc] = self._with_dma(pc, e)
        return out

    def _with_dma(self, pc: int, e: Effects) -> Effects:
        rules = self.rules
        if pc in rules.reg and is_dma_write(self.program.at(pc)):
            return replace(e, load_dest=e.load_dest | {rules.reg[pc]})
        if e.unit == "ds":
            regs = frozenset(rules.reg[d] for d in rules.own.get(pc, ()))
        elif "barrier" in e.tags:
            regs = frozenset(rules.reg[d] for d in rules.published.get(pc, {}))
        else:
            return e
        return replace(e, reads={**e.reads, ROLE: regs}) if regs else e

    def _pending(self, counter: int, op_pc: int, pc: int, regs, younger: int, verb: str) -> Hazard:
        if counter != VM or not all(r >= DMA_REG_BASE for r in regs):
            return super()._pending(counter, op_pc, pc, regs, younger, verb)
        need = f"s_waitcnt vmcnt({younger}) or lower"
        dma = f"the LDS DMA at pc {op_pc:#x} `{self.text(op_pc)}`"
        if "barrier" in self.effects(pc).tags:
            reader = self.rules.published[pc][op_pc & PC_BITS]
            msg = (
                f"hazard [vmcnt]: pc {pc:#x} `{self.text(pc)}` publishes LDS bytes {dma} "
                f"writes before it has landed (pc {reader:#x} `{self.text(reader)}` after the "
                f"barrier may touch them in another wave); needs {need} before the barrier"
            )
        else:
            msg = (
                f"hazard [vmcnt]: pc {pc:#x} `{self.text(pc)}` may touch LDS bytes {dma} "
                f"writes before it has landed; needs {need} between them"
            )
        return Hazard("vmcnt", pc, op_pc, msg)
