"""The control-flow graph of a kernel and the key its analyses are cached by: what the static
checks (f4pipe.analysis.hazards) and the LDS DMA rules (f4pipe.analysis.ldsdma) share, in a
module of its own so that neither imports the other."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

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


#: Graphs by program content (program_key): a kernel's static passes share one. Bounded like
#: the findings' caches; a caller reads a graph, never changes it.
_CFGS: dict[tuple, Cfg] = {}
_MAX_CACHED = 128


def cached_cfg(program: Program) -> Cfg:
    """build_cfg(program), built once per program content."""
    key = program_key(program)
    cfg = _CFGS.get(key)
    if cfg is None:
        cfg = build_cfg(program)
        if len(_CFGS) >= _MAX_CACHED:
            _CFGS.pop(next(iter(_CFGS)))
        _CFGS[key] = cfg
    return cfg


def program_key(program: Program) -> tuple:
    """What the findings depend on: the instructions (text, its address and the entry), the
    labels their messages print, and the workgroup bounds the LDS ranges take from the
    descriptor (f4pipe.analysis.ldsranges.launch_state)."""
    text = hashlib.sha256(program.text).digest()
    labels = tuple(sorted(program.labels.items()))
    bounds = (program.max_workgroup_size, program.workitem_id_dims)
    return (program.symbol, program.text_addr, program.entry, text, labels, bounds)
