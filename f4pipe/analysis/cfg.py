"""The control-flow graph of a kernel and the key its analyses are cached by: what the static
checks (f4pipe.analysis.hazards) and the LDS DMA rules (f4pipe.analysis.ldsdma) share, in a
module of its own so that neither imports the other."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from f4pipe.codeobj.program import Program
from f4pipe.core.errors import EmulatorError

BRANCHES = ("s_branch", "s_cbranch_scc0", "s_cbranch_scc1")


@dataclass
class Cfg:
    """Reachable instructions from the entry, with successors and predecessors by pc."""

    order: list[int]
    succ: dict[int, tuple[int, ...]]
    pred: dict[int, list[int]] = field(default_factory=dict)


def build_cfg(program: Program) -> Cfg:
    """Follow fall-through and branch edges from the entry; an undecodable or unknown
    instruction on a reachable path raises (nothing is checked past what is not understood)."""
    succ: dict[int, tuple[int, ...]] = {}
    work = [program.entry]
    while work:
        pc = work.pop()
        if pc in succ:
            continue
        inst = program.at(pc)
        if not inst.known:
            raise EmulatorError(
                f"{program.symbol}: pc {pc:#x} holds an instruction f4pipe does not know "
                f"({inst.name}); its hazards cannot be checked"
            )
        nxt: list[int] = []
        if inst.name != "s_endpgm" and inst.name != "s_branch":
            nxt.append(pc + inst.size)
        if inst.name in BRANCHES and inst.target is not None:
            nxt.append(inst.target)
        succ[pc] = tuple(nxt)
        work.extend(nxt)
    cfg = Cfg(sorted(succ), succ)
    for pc, outs in succ.items():
        for s in outs:
            cfg.pred.setdefault(s, []).append(pc)
    return cfg


T = TypeVar("T")


class ByProgram(Generic[T]):
    """Values computed once per program content (program_key) and kept in this process: a
    kernel's static passes (its graph, its LDS DMA rules, its wait-state findings) are each
    asked for several times by one command. Bounded, the oldest dropped first: a command meets
    a few dozen programs. A caller reads a value, never changes it."""

    def __init__(self, bound: int = 128) -> None:
        self._values: dict[tuple, T] = {}
        self._bound = bound

    def get(self, program: Program, build: Callable[[], T]) -> T:
        """The value kept for this program's content, built (and kept) if there is none."""
        key = program_key(program)
        value = self._values.get(key)
        if value is None:
            value = build()
            if len(self._values) >= self._bound:
                self._values.pop(next(iter(self._values)))
            self._values[key] = value
        return value


_CFGS: ByProgram[Cfg] = ByProgram()


def cached_cfg(program: Program) -> Cfg:
    """build_cfg(program), built once per program content."""
    return _CFGS.get(program, lambda: build_cfg(program))


def program_key(program: Program) -> tuple:
    """What the findings depend on: the instructions (text, its address and the entry), the
    labels their messages print, and the workgroup bounds the LDS ranges take from the
    descriptor (f4pipe.analysis.ldsranges.launch_state)."""
    text = hashlib.sha256(program.text).digest()
    labels = tuple(sorted(program.labels.items()))
    bounds = (program.max_workgroup_size, program.workitem_id_dims)
    return (program.symbol, program.text_addr, program.entry, text, labels, bounds)
