"""Trace lines for one wave: pc, instruction text, and the registers the instruction changed.

Display only. A line reads `pc  text  ; reg=value ...`: SGPRs/SCC as hex words, a changed VGPR
or AGPR as the lanes that changed (`v5[0..63]` when all did, with lane 0's value shown).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from f4pipe.arch import isa
from f4pipe.arch.decode import Instruction
from f4pipe.arch.disasm import format_instruction


def _sname(code: int) -> str:
    return isa.SPECIAL_SGPR_NAMES.get(code, f"s{code}")


def _vname(reg: int) -> str:
    return f"a{reg - isa.AGPR_BASE}" if reg >= isa.AGPR_BASE else f"v{reg}"


def format_trace_line(
    inst: Instruction,
    labels: Mapping[int, str],
    before: tuple[np.ndarray, np.ndarray, int],
    after: tuple[np.ndarray, np.ndarray, int],
) -> str:
    """`pc: text ; changes` for one wave (before/after = (sgpr[128], vgpr[512, 64], scc))."""
    s0, v0, c0 = before
    s1, v1, c1 = after
    changes = [f"{_sname(int(i))}={int(s1[i]):#010x}" for i in np.nonzero(s0 != s1)[0]]
    if c0 != c1:
        changes.append(f"scc={c1}")
    for reg in np.nonzero((v0 != v1).any(axis=1))[0]:
        lanes = np.nonzero(v0[reg] != v1[reg])[0]
        span = "all" if len(lanes) == 64 else f"{len(lanes)} lanes"
        first = int(lanes[0])
        changes.append(f"{_vname(int(reg))}[{span}] lane{first}={int(v1[reg, first]):#010x}")
    text = format_instruction(inst, labels)
    tail = f" ; {' '.join(changes)}" if changes else ""
    return f"{inst.pc:#010x}: {text}{tail}"
