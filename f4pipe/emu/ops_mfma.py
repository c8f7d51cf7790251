"""v_mfma_scale_f32_16x16x128_f8f6f4 with FP4 (e2m1) operands and E8M0 block scales.

Register maps (docs/reference/gfx950.md, from the CDNA4 manual §7.1.4 and composable_kernel's
probes): lane l = 16g + r; src0 holds row r, k = 32g + t with item t in v[a + t//8]
bits [4*(t%8)+3 : 4*(t%8)]; src1 holds column r the same way; the scale of row r / k-block g
is byte (op_sel + 2*op_sel_hi) of the scale source in lane 16g + r; D[i][j] sits in register
d + i%4 of lane j + 16*(i//4).

Arithmetic: each 32-term FP4 block dot product is exact in float32 (multiples of 1/4 below
2^11), the four scaled partials and C are summed exactly and rounded once to f32 (RNE). The
hardware's combination order is not documented; the exact-sum model is what
docs/reference/gfx950.md asks for, and the end-to-end tests measure it against the float64
reference. MFMA ignores MODE (no denormal flush).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from f4pipe.arch.decode import Instruction, Operand
from f4pipe.arch.isa import AGPR_BASE
from f4pipe.core.numerics import e8m0_to_float, fp4_to_float
from f4pipe.emu.native import fp4_mfma_in_place

if TYPE_CHECKING:
    from f4pipe.emu.state import Sel, WaveState

FP4_FORMAT = 4  # cbsz / blgp value selecting FP4 e2m1
_BYTES = np.arange(256, dtype=np.uint8)
_HALFWORDS = np.arange(65536, dtype=np.uint32)
#: 16-bit halfword -> its four FP4 values, low nibble first, as float32 (exact). One gather per
#: four elements is what keeps the MFMA cheap (a byte table needs four times the lookups).
FP4_QUAD = np.stack(
    [fp4_to_float((_HALFWORDS >> (4 * i)) & 0xF) for i in range(4)], axis=-1
).astype(np.float32)
#: E8M0 byte -> 2^(e-127) (0xFF -> NaN) as float64, and as float32 for the fast path.
E8M0_VALUE = e8m0_to_float(_BYTES)
E8M0_VALUE32 = E8M0_VALUE.astype(np.float32)
#: Scale exponents (E8M0 bytes) for which a nonzero block partial P (a multiple of 2^-2 below
#: 2^11, so at most 13 significant bits) times 2^(ea-127) and then 2^(eb-127) stays a normal
#: float32 at both steps (within [2^-126, 2^128)), so both products are exact: each byte in
#: [F32_SCALE_MIN, F32_SCALE_MAX] and ea + eb in [F32_SCALE_SUM_MIN, F32_SCALE_SUM_MAX].
F32_SCALE_MIN, F32_SCALE_MAX = 127 - 126 + 2, 127 + 128 - 11
F32_SCALE_SUM_MIN, F32_SCALE_SUM_MAX = 254 - 126 + 2, 254 + 128 - 11


def _fp4_operand(regs: np.ndarray) -> np.ndarray:
    """[4, n, 64] uint32 -> [n, 4 (k-block g), 16 (row r), 32 (t)] float32 values."""
    n = regs.shape[1]
    halves = np.ascontiguousarray(regs.transpose(1, 2, 0)).view(np.uint16)  # [n, 64, 8]
    vals = np.take(FP4_QUAD, halves, axis=0).reshape(n, 64, 32)  # item t = 4*halfword + nibble
    return vals.reshape(n, 4, 16, 32)


#: Decoded operands an executor keeps (ops_mfma's entry in WaveState.memo), oldest dropped
#: first: a tile loop's A and B fragments (8 + 8 on the 256-wide tiles) fit.
DECODED_KEPT = 16


def _decoded_operand(ex: WaveState, op: Operand, sel: Sel, regs: np.ndarray) -> np.ndarray:
    """_fp4_operand(regs), reused while these registers of these waves hold what they held
    when last decoded: an MFMA tile loop multiplies each A fragment by every B fragment, so
    about 85 % of the decodes of the large tiles repeat one. Comparing the raw registers costs
    an eighth of decoding them (the values are 8 times the bytes)."""
    memo = ex.memo.setdefault("fp4-operands", {})
    waves = (sel.start, sel.stop, sel.step) if isinstance(sel, slice) else sel.tobytes()
    key = (op.kind, op.index, waves)
    kept = memo.get(key)
    if kept is not None and np.array_equal(kept[0], regs):
        return kept[1]
    decoded = _fp4_operand(regs)
    decoded.setflags(write=False)
    memo.pop(key, None)
    if len(memo) >= DECODED_KEPT:
        memo.pop(next(iter(memo)))
    memo[key] = (np.array(regs), decoded)
    return decoded


def round_sum_to_f32(terms: list[np.ndarray]) -> np.ndarray:
    """The exact sum of float64 terms rounded once to float32 (RNE), elementwise.

    An error-free TwoSum cascade gives hi + lo equal to the sum up to the (negligible)
    rounding of the error terms' own sum; rounding hi to f32 is then correct except when hi
    lies exactly halfway between two f32 values, where lo decides. So the result does not
    depend on how far apart the scaled block partials are (float64 alone would be exact only
    while they span fewer than ~53 bits)."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = terms[0]
        e = np.zeros_like(s)
        for t in terms[1:]:
            s2 = s + t
            bv = s2 - s
            e = e + ((s - (s2 - bv)) + (t - bv))
            s = s2
        hi = s + e
        lo = (s - hi) + e
        r = hi.astype(np.float32)
        d = hi - r.astype(np.float64)
        other = np.nextafter(r, np.where(d > 0, np.float32(np.inf), np.float32(-np.inf)))
        tie = (d != 0) & (hi == (r.astype(np.float64) + other.astype(np.float64)) / 2)
        away = tie & (lo != 0) & ((lo > 0) == (d > 0))
        r = np.where(away & np.isfinite(hi), other, r)
        return np.where(np.isfinite(s), r, s.astype(np.float32))


def acc_to_matrix(regs: np.ndarray) -> np.ndarray:
    """[4, n, 64] accumulators -> [n, 16 (i), 16 (j)]: D[i][j] in reg i%4, lane j + 16*(i//4)."""
    n = regs.shape[1]
    return regs.reshape(4, n, 4, 16).transpose(1, 2, 0, 3).reshape(n, 16, 16)


def matrix_to_acc(mat: np.ndarray) -> np.ndarray:
    """Inverse of acc_to_matrix."""
    n = mat.shape[0]
    return mat.reshape(n, 4, 4, 16).transpose(2, 0, 1, 3).reshape(4, n, 64)


def _scale_bytes(ex: WaveState, op: Operand, sel: Sel, byte: int) -> np.ndarray:
    """[n, 4 (g), 16 (r)] E8M0 bytes: byte `byte` of each lane's scale source."""
    raw = ex.v(op, sel)
    if raw.shape[-1:] == (64,):  # a VGPR: pick the byte through a little-endian byte view
        raw = np.ascontiguousarray(raw, dtype="<u4")
        return raw.view(np.uint8)[:, byte::4].reshape(-1, 4, 16)
    raw = np.broadcast_to(raw, (ex.nsel(sel), 64))
    return ((raw >> np.uint32(8 * byte)) & np.uint32(0xFF)).astype(np.uint8).reshape(-1, 4, 16)


def _accumulator(ex: WaveState, op: Operand, sel: Sel) -> np.ndarray | float:
    """C as float64: [n, 16 (i), 16 (j)] from registers, or one value from a scalar source."""
    if op.kind in ("v", "a"):
        return acc_to_matrix(ex.vregs(op, sel)).view(np.float32).astype(np.float64)
    return float(np.asarray(ex.s(op, sel), dtype=np.uint32).view(np.float32))


def live_blocks(regs: np.ndarray) -> np.ndarray:
    """[4, n, 64] FP4 registers -> [n, 4 (g), 16 (r)]: True where the 32-value block holds a
    nonzero value (a zero block's products are exact zeros whatever its scale)."""
    magnitude = np.bitwise_or.reduce(regs, axis=0) & np.uint32(0x77777777)
    return (magnitude != 0).reshape(-1, 4, 16)


def exact_in_float64(
    ea: np.ndarray,
    eb: np.ndarray,
    a_live: np.ndarray | None,
    b_live: np.ndarray | None,
    c: np.ndarray | float,
) -> bool:
    """True when every partial sum of the products and C is exact in float64, in any order.

    Every nonzero product a*b*sa*sb (a and b from live blocks) is a multiple of 2^L, L = the
    least exponent of sa*sb - 2 (fp4 values are multiples of 1/2), and at most 36 * 2^Emax in
    size; 128 of them plus C stay below 4608 * 2^Emax + max|C|. If C is a multiple of 2^L too
    and that bound is below 2^(L+53), every sum of any subset is a float64 (53-bit
    significand) exactly, so summing in float64 gives the exact sum and one conversion rounds
    it to f32 as round_sum_to_f32 does. A NaN scale (0xFF, which poisons even a zero block)
    or a non-finite C never qualify: their propagation stays the exact path's.

    a_live / b_live None: take every block as live. The bounds then span more scales, so a
    True still holds for the live blocks alone (L no larger, Emax no smaller) and the caller
    skips finding the zero blocks; a False is decided again with them."""
    ea_max, eb_max = int(ea.max()), int(eb.max())
    if ea_max == 0xFF or eb_max == 0xFF:
        return False
    # max |C| from min and max (no |C| array); both propagate a NaN, which is not finite
    c_max = max(-float(c.min()), float(c.max())) if isinstance(c, np.ndarray) else abs(c)
    if not math.isfinite(c_max):
        return False
    if a_live is None or b_live is None or (a_live.all() and b_live.all()):
        low = int(ea.min()) + int(eb.min()) - 254 - 2  # L
        high = ea_max + eb_max - 254  # Emax
    elif not a_live.any() or not b_live.any():
        return True  # every product is zero: the sum is C
    else:
        live_a, live_b = ea[a_live], eb[b_live]
        low = int(live_a.min()) + int(live_b.min()) - 254 - 2
        high = int(live_a.max()) + int(live_b.max()) - 254
    if 4608.0 * math.ldexp(1.0, high) + c_max >= math.ldexp(1.0, low + 53):
        return False
    if not isinstance(c, np.ndarray):
        on_grid = math.ldexp(c, -low)
        return on_grid == math.floor(on_grid)
    on_grid = c * math.ldexp(1.0, -low)  # times a power of two: exact (no overflow: bound)
    return bool((on_grid == np.trunc(on_grid)).all())


def scaled_in_float32(ea: np.ndarray, eb: np.ndarray) -> bool:
    """True when every nonzero block partial times its two scales, one after the other, is a
    normal float32 (see F32_SCALE_MIN): scaling in float32 is then exact. `ea` / `eb`: the
    scale bytes of the live blocks (a zero partial stays zero under any finite scale)."""
    if not ea.size or not eb.size:
        return True
    a_low, a_high, b_low, b_high = int(ea.min()), int(ea.max()), int(eb.min()), int(eb.max())
    return (
        min(a_low, b_low) >= F32_SCALE_MIN
        and max(a_high, b_high) <= F32_SCALE_MAX
        and a_low + b_low >= F32_SCALE_SUM_MIN
        and a_high + b_high <= F32_SCALE_SUM_MAX
    )


def block_terms(a: np.ndarray, b: np.ndarray, sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """[n, g, i, j] float64: each k-block's 32-term dot product (exact in float32: multiples
    of 1/4 below 2^11) times its two scales (powers of two: exact)."""
    partial = np.matmul(a, b.transpose(0, 1, 3, 2))
    return partial * (sa[:, :, :, None] * sb[:, :, None, :])


def float64_sum(terms: np.ndarray, c: np.ndarray | float) -> np.ndarray:
    """The fast path when exact_in_float64 holds: the four block terms and C summed in
    float64 (every partial sum exact, so order does not matter), rounded once to f32."""
    with np.errstate(over="ignore"):  # beyond f32 range: inf, as round_sum_to_f32 gives
        return (terms.sum(axis=1, dtype=np.float64) + c).astype(np.float32)


def exact_sum(terms: np.ndarray, c: np.ndarray | float) -> np.ndarray:
    """The general path (any scale range, NaN scales, non-finite C): the four block terms and
    C summed exactly and rounded once by round_sum_to_f32."""
    parts = list(terms.transpose(1, 0, 2, 3))
    parts.append(c if isinstance(c, np.ndarray) else np.full_like(parts[0], c))
    return round_sum_to_f32(parts)


def scaled_block_terms32(a: np.ndarray, b: np.ndarray, ea: np.ndarray, eb: np.ndarray):
    """block_terms in float32, when scaled_in_float32 holds: each partial times its scales
    in place (two broadcasts of float32 powers of two, each exact), half block_terms' bytes."""
    partial = np.matmul(a, b.transpose(0, 1, 3, 2))
    partial *= E8M0_VALUE32[ea][:, :, :, None]
    partial *= E8M0_VALUE32[eb][:, :, None, :]
    return partial


def fp4_mfma(
    a_regs: np.ndarray,
    b_regs: np.ndarray,
    ea,
    eb,
    c,
    a: np.ndarray | None = None,
    b: np.ndarray | None = None,
) -> np.ndarray:
    """D = A x B with block scales, plus C, as float32 [n, 16 (i), 16 (j)]. The fast path when
    exact_in_float64 holds, with every block taken as live first (the zero blocks are found
    only when that fails); its scaling in float32 when scaled_in_float32 holds for the live
    blocks; else the exact sum. `a` / `b`: the registers already decoded (_fp4_operand)."""
    a = _fp4_operand(a_regs) if a is None else a  # rows i (src0)
    b = _fp4_operand(b_regs) if b is None else b  # columns j (src1)
    live_ea, live_eb = ea, eb
    fast = exact_in_float64(ea, eb, None, None, c)
    if not fast:
        a_live, b_live = live_blocks(a_regs), live_blocks(b_regs)
        fast = exact_in_float64(ea, eb, a_live, b_live, c)
        live_ea, live_eb = ea[a_live], eb[b_live]
    if fast and scaled_in_float32(live_ea, live_eb):
        return float64_sum(scaled_block_terms32(a, b, ea, eb), c)
    terms = block_terms(a, b, E8M0_VALUE[ea], E8M0_VALUE[eb])
    return (float64_sum if fast else exact_sum)(terms, c)


def _register_file_indices(inst: Instruction) -> tuple[int, int, int, int, int, int] | None:
    """The register file indices of A, B, C, D and the two scale registers when every
    operand is a vector register (range) within the file, the form native.fp4_mfma_in_place
    takes; else None (the numpy path, which also reports a bad range)."""
    indices = []
    for op, count in zip((*inst.srcs, inst.dst), (4, 4, 4, 1, 1, 4), strict=True):
        if op.kind not in ("v", "a") or op.count != count or op.index + count > 256:
            return None
        indices.append(op.index + (AGPR_BASE if op.kind == "a" else 0))
    a, b, c, scale_a, scale_b, d = indices
    return a, b, c, d, scale_a, scale_b


def _wave_indices(ex: WaveState, sel: Sel) -> np.ndarray:
    """The selected waves' indices, int64 (kept for the whole-batch slice)."""
    if not isinstance(sel, slice):
        return np.ascontiguousarray(sel, dtype=np.int64)
    memo = ex.memo.setdefault("wave-indices", {})
    key = (sel.start, sel.stop, sel.step)
    if key not in memo:
        memo[key] = np.arange(ex.W, dtype=np.int64)[sel]
    return memo[key]


def v_mfma_scale_16x16x128(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    if inst.cbsz != FP4_FORMAT or inst.blgp != FP4_FORMAT:
        raise ex.error(
            inst,
            sel,
            f"scaled MFMA with cbsz {inst.cbsz} / blgp {inst.blgp}: only FP4 (4/4) is modelled",
        )
    if ex.gpr_index(inst, sel) is not None:
        raise ex.error(inst, sel, "MFMA under GPR indexing is not modelled")
    if not ex.exec_full:
        raise ex.error(inst, sel, "MFMA with a partial EXEC is not modelled")
    a_op, b_op, c_op, s0_op, s1_op = inst.srcs
    byte_a = (inst.op_sel & 1) + 2 * (inst.op_sel_hi & 1)
    byte_b = (inst.op_sel >> 1 & 1) + 2 * (inst.op_sel_hi >> 1 & 1)
    registers = _register_file_indices(inst)
    if registers is not None and fp4_mfma_in_place(
        ex.vgpr, _wave_indices(ex, sel), registers, (byte_a, byte_b)
    ):
        return
    ea = _scale_bytes(ex, s0_op, sel, byte_a)
    eb = _scale_bytes(ex, s1_op, sel, byte_b)
    c = _accumulator(ex, c_op, sel)
    a_regs, b_regs = ex.vregs(a_op, sel), ex.vregs(b_op, sel)
    a = _decoded_operand(ex, a_op, sel, a_regs)
    b = _decoded_operand(ex, b_op, sel, b_regs)
    d = fp4_mfma(a_regs, b_regs, ea, eb, c, a, b)
    base = ex.reg_index(inst.dst)
    ex.vgpr[base : base + 4, sel] = matrix_to_acc(d.view(np.uint32))
