"""Scalar ALU, scalar memory and program control (SOP1/SOP2/SOPK/SOPC/SOPP/SMEM).

Semantics per the CDNA4 ISA manual's opcode pseudocode (chapter 12): integer results wrap to
32 bits; SCC is carry/borrow for the unsigned add/sub, signed overflow for the signed ones,
"result != 0" for logic and shifts, unchanged for moves, multiplies and s_cselect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from f4pipe.arch import isa
from f4pipe.arch.decode import Instruction

if TYPE_CHECKING:
    from f4pipe.emu.state import Sel, WaveState

U32 = 0xFFFFFFFF


def _u(x) -> np.ndarray:
    return np.asarray(x, dtype=np.uint32).astype(np.int64)


def _i(x) -> np.ndarray:
    return np.asarray(x, dtype=np.uint32).view(np.int32).astype(np.int64)


def _scc(ex: WaveState, sel: Sel, cond) -> None:
    ex.scc[sel] = np.asarray(cond, dtype=np.uint32)


def _dst(ex: WaveState, inst: Instruction, sel: Sel, value: np.ndarray) -> None:
    n = ex.nsel(sel)
    ex.set_s(inst.dst.index, sel, np.broadcast_to(np.asarray(value, dtype=np.int64) & U32, (n,)))


def s_addsub_u32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    a, b = _u(ex.s(inst.srcs[0], sel)), _u(ex.s(inst.srcs[1], sel))
    c = _u(ex.scc[sel]) if inst.name in ("s_addc_u32", "s_subb_u32") else 0
    if inst.name in ("s_add_u32", "s_addc_u32"):
        r = a + b + c
        carry = r > U32
    else:
        r = a - b - c
        carry = r < 0
    _dst(ex, inst, sel, r)
    _scc(ex, sel, np.broadcast_to(carry, (ex.nsel(sel),)))


def s_addsub_i32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    a, b = _i(ex.s(inst.srcs[0], sel)), _i(ex.s(inst.srcs[1], sel))
    if inst.name == "s_sub_i32":
        b = -b
    r = a + b
    ov = (r > 0x7FFFFFFF) | (r < -0x80000000)
    _dst(ex, inst, sel, r)
    _scc(ex, sel, np.broadcast_to(ov, (ex.nsel(sel),)))


def s_addk_i32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    r = _i(ex.sgpr[inst.dst.index, sel]) + inst.imm  # imm: SIMM16 sign-extended (decode.py)
    _dst(ex, inst, sel, r)
    _scc(ex, sel, (r > 0x7FFFFFFF) | (r < -0x80000000))


def s_movk_i32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    _dst(ex, inst, sel, np.int64(inst.imm))


def s_mulk_i32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    _dst(ex, inst, sel, _i(ex.sgpr[inst.dst.index, sel]) * inst.imm)


def s_mul_i32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    a, b = _u(ex.s(inst.srcs[0], sel)), _u(ex.s(inst.srcs[1], sel))
    _dst(ex, inst, sel, (a * b) & U32)  # low 32 bits are sign-agnostic


def s_mul_hi_u32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    a = np.asarray(ex.s(inst.srcs[0], sel), dtype=np.uint64)
    b = np.asarray(ex.s(inst.srcs[1], sel), dtype=np.uint64)
    _dst(ex, inst, sel, ((a * b) >> np.uint64(32)).astype(np.int64))


_LOGIC = {
    "s_and_b32": np.bitwise_and,
    "s_or_b32": np.bitwise_or,
    "s_xor_b32": np.bitwise_xor,
}


def s_logic(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    r = _LOGIC[inst.name](_u(ex.s(inst.srcs[0], sel)), _u(ex.s(inst.srcs[1], sel)))
    r = np.broadcast_to(r, (ex.nsel(sel),))
    _dst(ex, inst, sel, r)
    _scc(ex, sel, r != 0)


def s_shift(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    sh = _u(ex.s(inst.srcs[1], sel)) & 31
    if inst.name == "s_lshl_b32":
        r = (_u(ex.s(inst.srcs[0], sel)) << sh) & U32
    elif inst.name == "s_lshr_b32":
        r = _u(ex.s(inst.srcs[0], sel)) >> sh
    else:
        r = (_i(ex.s(inst.srcs[0], sel)) >> sh) & U32
    r = np.broadcast_to(r, (ex.nsel(sel),))
    _dst(ex, inst, sel, r)
    _scc(ex, sel, r != 0)


def s_minmax(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    conv = _i if inst.name.endswith("i32") else _u
    a, b = conv(ex.s(inst.srcs[0], sel)), conv(ex.s(inst.srcs[1], sel))
    pick_a = a < b if "min" in inst.name else a > b
    _dst(ex, inst, sel, np.where(pick_a, a, b))
    _scc(ex, sel, np.broadcast_to(pick_a, (ex.nsel(sel),)))


def s_cselect_b32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    a, b = _u(ex.s(inst.srcs[0], sel)), _u(ex.s(inst.srcs[1], sel))
    _dst(ex, inst, sel, np.where(ex.scc[sel] != 0, a, b))


def s_mov_b32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    _dst(ex, inst, sel, _u(ex.s(inst.srcs[0], sel)))


def s_mov_b64(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    v = np.broadcast_to(ex.s64(inst.srcs[0], sel), (ex.nsel(sel),))
    d = inst.dst.index
    ex.set_s(d, sel, (v & np.uint64(U32)).astype(np.uint32))
    ex.set_s(d + 1, sel, (v >> np.uint64(32)).astype(np.uint32))


_CMP = {
    "eq": np.equal,
    "lg": np.not_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "lt": np.less,
    "le": np.less_equal,
}


def s_cmp(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    _, _, rel, typ = inst.name.split("_")
    conv = _i if typ == "i32" else _u
    r = _CMP[rel](conv(ex.s(inst.srcs[0], sel)), conv(ex.s(inst.srcs[1], sel)))
    _scc(ex, sel, np.broadcast_to(r, (ex.nsel(sel),)))


def s_set_gpr_idx_on(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    idx = _u(ex.s(inst.srcs[0], sel)) & 0xFF
    m0 = _u(ex.sgpr[isa.M0, sel])
    m0 = (m0 & ~0xF0FF) | idx | (inst.imm << 12)
    ex.set_s(isa.M0, sel, np.broadcast_to(m0, (ex.nsel(sel),)).astype(np.uint32))
    ex.gpr_idx_en[sel] = True
    ex.gpr_idx_active = True


def s_set_gpr_idx_off(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    ex.gpr_idx_en[sel] = False
    ex.gpr_idx_active = bool(ex.gpr_idx_en.any())


def s_nothing(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    """Values complete at issue; what waiting means is the timing model's (timing.py)."""


def s_endpgm(ex: WaveState, inst: Instruction, sel: Sel) -> bool:
    ex.done[sel] = True
    return True


def s_barrier(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    ex.at_barrier[sel] = True


def s_branch(ex: WaveState, inst: Instruction, sel: Sel) -> bool:
    ex.pc[sel] = inst.target
    return True


def s_cbranch(ex: WaveState, inst: Instruction, sel: Sel) -> bool:
    want = 1 if inst.name == "s_cbranch_scc1" else 0
    taken = ex.scc[sel] == want
    ex.pc[sel] = np.where(taken, inst.target, ex.pc[sel] + inst.size)
    return True


def s_load(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    """s_load_dword*: address = s[base:base+1] + offset, low two bits ignored."""
    base = ex.s64(inst.srcs[0], sel).astype(np.int64)
    n = inst.dst.count
    addr = ((base + inst.offset) & ~3)[:, None] + 4 * np.arange(n, dtype=np.int64)
    words = ex.memory.read_dwords(addr, "s_load", owners=ex.access_owners(sel, addr.shape))
    d = inst.dst.index
    if d + n > isa.VCC_LO:
        raise ex.error(inst, sel, f"s_load destination s[{d}:{d + n - 1}] overruns the SGPRs")
    for i in range(n):
        ex.set_s(d + i, sel, words[:, i])
