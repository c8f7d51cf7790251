"""Vector ALU (VOP1/VOP2/VOPC/VOP3, accvgpr moves): whole waves x 64 lanes per numpy call.

f32 arithmetic follows the mode the kernel descriptor sets: FP32 denormals flushed on input and
output when FLOAT_DENORM_MODE_32 is 0 (the f4gemm descriptors), round to nearest even (numpy's
float32 arithmetic is IEEE RNE). GPR indexing (s_set_gpr_idx_on) offsets VGPR/AGPR sources and
destinations as M0[15:12] selects; SGPRs and constants are never indexed (manual §6.6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from f4pipe.arch import isa
from f4pipe.arch.decode import Instruction
from f4pipe.core.numerics import float_to_bf16_bits

if TYPE_CHECKING:
    from f4pipe.emu.state import Sel, WaveState

U32 = np.uint32
NO_INDEX = (0, 0, 0, 0)


def _idx(ex: WaveState, inst: Instruction, sel: Sel) -> tuple[int, int, int, int]:
    got = ex.gpr_index(inst, sel)
    return NO_INDEX if got is None else got


def _srcs(ex: WaveState, inst: Instruction, sel: Sel, idx) -> list[np.ndarray]:
    return [
        ex.v(op, sel, idx[i] if op.kind in ("v", "a") else 0) for i, op in enumerate(inst.srcs[:3])
    ]


def _write(ex: WaveState, inst: Instruction, sel: Sel, idx, value) -> None:
    ex.set_v(ex.reg_index(inst.dst, idx[3]), sel, value)


def _no_modifiers(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    if inst.fmt == "VOP3" and (inst.abs_ or inst.neg or inst.omod or inst.op_sel):
        raise ex.error(
            inst, sel, "VOP3 abs/neg/omod/op_sel modifiers on an integer op are not modelled"
        )


def ftz(ex: WaveState, bits: np.ndarray) -> np.ndarray:
    """f32 bit patterns -> float32 values, denormals flushed to signed zero if MODE says so."""
    bits = np.asarray(bits, dtype=np.uint32)
    if ex.flush_denorms:
        bits = np.where((bits & 0x7F800000) == 0, bits & 0x80000000, bits).astype(np.uint32)
    return bits.view(np.float32)


def f32_out(ex: WaveState, values: np.ndarray) -> np.ndarray:
    """float32 results -> bit patterns, flushing denormal results if MODE says so."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    if ex.flush_denorms:
        bits = np.where((bits & 0x7F800000) == 0, bits & 0x80000000, bits).astype(np.uint32)
    return bits


_INT_BINOPS = {
    "v_add_u32": lambda a, b: a + b,
    "v_sub_u32": lambda a, b: a - b,
    "v_subrev_u32": lambda a, b: b - a,
    "v_and_b32": lambda a, b: a & b,
    "v_or_b32": lambda a, b: a | b,
    "v_xor_b32": lambda a, b: a ^ b,
    "v_lshrrev_b32": lambda a, b: b >> (a & U32(31)),
    "v_lshlrev_b32": lambda a, b: b << (a & U32(31)),
}


def v_int_binop(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    _no_modifiers(ex, inst, sel)
    if inst.clamp:
        raise ex.error(inst, sel, "clamp on an unsigned integer op is not modelled")
    idx = _idx(ex, inst, sel)
    a, b = _srcs(ex, inst, sel, idx)
    with np.errstate(over="ignore"):
        r = _INT_BINOPS[inst.name](np.asarray(a, dtype=U32), np.asarray(b, dtype=U32))
    _write(ex, inst, sel, idx, r)


def v_add_i32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    """Signed add, no carry out; with clamp the result saturates to int32."""
    _no_modifiers(ex, inst, sel)
    idx = _idx(ex, inst, sel)
    a, b = _srcs(ex, inst, sel, idx)
    r = np.asarray(a, U32).view(np.int32).astype(np.int64) + np.asarray(b, U32).view(np.int32)
    if inst.clamp:
        r = np.clip(r, -(2**31), 2**31 - 1)
    _write(ex, inst, sel, idx, (r & 0xFFFFFFFF).astype(U32))


def v_mul_i32_i24(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    """Low 32 bits of the product of the sign-extended low 24 bits of both sources."""
    _no_modifiers(ex, inst, sel)
    idx = _idx(ex, inst, sel)
    a, b = _srcs(ex, inst, sel, idx)

    def s24(x):
        x = np.asarray(x, U32).astype(np.int64) & 0xFFFFFF
        return np.where(x & 0x800000, x - 0x1000000, x)

    _write(ex, inst, sel, idx, ((s24(a) * s24(b)) & 0xFFFFFFFF).astype(U32))


def v_mul_u32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    _no_modifiers(ex, inst, sel)
    idx = _idx(ex, inst, sel)
    a, b = _srcs(ex, inst, sel, idx)
    p = np.asarray(a, U32).astype(np.uint64) * np.asarray(b, U32).astype(np.uint64)
    r = p >> np.uint64(32) if inst.name == "v_mul_hi_u32" else p & np.uint64(0xFFFFFFFF)
    _write(ex, inst, sel, idx, r.astype(U32))


def v_cndmask_b32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    _no_modifiers(ex, inst, sel)
    idx = _idx(ex, inst, sel)
    a, b = _srcs(ex, inst, sel, idx)[:2]
    cond_reg = inst.srcs[2].index if len(inst.srcs) > 2 else isa.VCC_LO
    m = ex.vcc_mask(cond_reg, sel)
    _write(ex, inst, sel, idx, np.where(m, b, a).astype(U32))


_VCMP = {
    "lt": np.less,
    "eq": np.equal,
    "le": np.less_equal,
    "gt": np.greater,
    "ne": np.not_equal,
    "ge": np.greater_equal,
}


def v_cmp(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    _no_modifiers(ex, inst, sel)
    idx = _idx(ex, inst, sel)
    a, b = _srcs(ex, inst, sel, idx)
    _, _, rel, typ = inst.name.split("_")
    dt = np.int32 if typ == "i32" else U32
    a = np.asarray(a, U32).view(dt)
    b = np.asarray(b, U32).view(dt)
    r = np.broadcast_to(_VCMP[rel](a, b), (ex.nsel(sel), 64))
    ex.set_mask(inst.sdst.index, sel, r)


def v_mul_f32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    if inst.fmt == "VOP3" and (inst.abs_ or inst.neg or inst.omod or inst.clamp):
        raise ex.error(inst, sel, "VOP3 modifiers on v_mul_f32 are not modelled")
    idx = _idx(ex, inst, sel)
    a, b = _srcs(ex, inst, sel, idx)
    with np.errstate(all="ignore"):
        r = ftz(ex, a) * ftz(ex, b)
    _write(ex, inst, sel, idx, f32_out(ex, r))


def v_mov_b32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    _no_modifiers(ex, inst, sel)
    idx = _idx(ex, inst, sel)
    (a,) = _srcs(ex, inst, sel, idx)
    _write(ex, inst, sel, idx, a)


def v_accvgpr_move(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    idx = _idx(ex, inst, sel)
    (a,) = _srcs(ex, inst, sel, idx)
    _write(ex, inst, sel, idx, a)


def v_readfirstlane_b32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    idx = _idx(ex, inst, sel)
    op = inst.srcs[0]
    a = np.broadcast_to(ex.v(op, sel, idx[0] if op.kind in ("v", "a") else 0), (ex.nsel(sel), 64))
    mask = ex.lane_mask(sel)
    first = np.where(mask.any(axis=1), mask.argmax(axis=1), 0)  # EXEC==0 reads lane 0
    ex.set_s(inst.dst.index, sel, a[np.arange(a.shape[0]), first])


def v_cvt_f32_u32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    _no_modifiers(ex, inst, sel)
    idx = _idx(ex, inst, sel)
    (a,) = _srcs(ex, inst, sel, idx)
    # uint32 -> float64 is exact, float64 -> float32 rounds once (RNE).
    _write(
        ex, inst, sel, idx, f32_out(ex, np.asarray(a, U32).astype(np.float64).astype(np.float32))
    )


def v_cvt_u32_f32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    """Truncate toward zero, saturate to [0, 2^32-1], NaN -> 0."""
    _no_modifiers(ex, inst, sel)
    idx = _idx(ex, inst, sel)
    (a,) = _srcs(ex, inst, sel, idx)
    x = ftz(ex, a).astype(np.float64)
    x = np.where(np.isnan(x), 0.0, np.clip(np.trunc(x), 0.0, 4294967295.0))
    _write(ex, inst, sel, idx, x.astype(np.uint64).astype(U32))


def v_rcp_iflag_f32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    """1/x in f32. Hardware is accurate to 1 ulp; the kernels use it only inside an integer
    division sequence that corrects the estimate, so the correctly rounded value is used."""
    _no_modifiers(ex, inst, sel)
    idx = _idx(ex, inst, sel)
    (a,) = _srcs(ex, inst, sel, idx)
    with np.errstate(divide="ignore"):
        r = np.float32(1.0) / ftz(ex, a)
    _write(ex, inst, sel, idx, f32_out(ex, r))


def v_cvt_pk_bf16_f32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    """d.lo = bf16(s0), d.hi = bf16(s1), round to nearest even."""
    _no_modifiers(ex, inst, sel)
    if inst.clamp:
        raise ex.error(inst, sel, "clamp on v_cvt_pk_bf16_f32 is not modelled")
    idx = _idx(ex, inst, sel)
    a, b = _srcs(ex, inst, sel, idx)
    lo = float_to_bf16_bits(ftz(ex, a)).astype(U32)
    hi = float_to_bf16_bits(ftz(ex, b)).astype(U32)
    _write(ex, inst, sel, idx, lo | (hi << U32(16)))


def v_permlane16_swap_b32(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    """Per 32-lane half: swap vsrc lanes 0..15 with vdst lanes 16..31 (docs/reference/gfx950.md)."""
    if ex.gpr_index(inst, sel) is not None:
        raise ex.error(inst, sel, "v_permlane16_swap_b32 under GPR indexing is not modelled")
    if not ex.exec_full:
        raise ex.error(inst, sel, "v_permlane16_swap_b32 with a partial EXEC is not modelled")
    d = ex.reg_index(inst.dst)
    s = ex.reg_index(inst.srcs[0])
    vd = ex.vgpr[d, sel].reshape(-1, 2, 2, 16).copy()
    vs = ex.vgpr[s, sel].reshape(-1, 2, 2, 16).copy()
    new_d, new_s = vd.copy(), vs.copy()
    new_d[:, :, 1] = vs[:, :, 0]
    new_s[:, :, 0] = vd[:, :, 1]
    ex.vgpr[d, sel] = new_d.reshape(-1, 64)
    ex.vgpr[s, sel] = new_s.reshape(-1, 64)
