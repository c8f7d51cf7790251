"""MXFP4 numerics and the f4gemm operand layouts: fp4/e8m0/bf16 conversions, nibble packing,
the B pre-shuffle and the scale padding + shuffle.

Everything that turns logical matrices into the bytes a kernel reads lives here, once: the
launcher, the emulator's tests, the reference and the reports import it. The conversions every
launch needs (fp4, E8M0 and bf16 to float; float to bf16) are exact bit arithmetic on numpy
arrays, because importing ml_dtypes costs about half a CPU-second, as much as a whole `try` on a
small tile may take. Encoding floats to fp4 (rounding, saturation) goes through ml_dtypes'
float4_e2m1fn, imported on first use; tests/test_numerics.py holds every hand conversion to
ml_dtypes' over every input class (all 16 and 256 codes, all 65536 bf16 patterns, every f32
rounding case). The shuffles are the seed
README's index maps written as numpy reshape/transpose, so they are whole-array operations (the
element-wise maps are the tests' oracle).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from f4pipe.core.errors import ShapeError


@cache
def _fp4_dtype() -> np.dtype:
    """FP4 e2m1 as a numpy dtype (ml_dtypes, imported here once: only encoding needs it)."""
    import ml_dtypes

    return np.dtype(ml_dtypes.float4_e2m1fn)


#: Elements of K sharing one E8M0 scale (MX block size).
SCALE_BLOCK = 32
#: Scale buffers are padded to these multiples (rows, scale columns) before shuffling.
SCALE_ROW_ALIGN = 256
SCALE_COL_ALIGN = 8
#: The pad byte of the scale buffers: E8M0 0x7F = 2^0, so an edge tile never meets a NaN scale
#: (the seed driver's choice; see docs/reference/aiter.md for aiter's 127 / 0).
SCALE_PAD = 0x7F
#: The B pre-shuffle's tile: 16 rows x 16 bytes (32 fp4 elements) transposed per tile.
B_SHUFFLE_ROWS = 16
B_SHUFFLE_BYTES = 16


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that is >= value."""
    return -(-value // multiple) * multiple


# --- element conversions -------------------------------------------------------------------


#: FP4 e2m1 code (sign bit 3, exponent bits 2:1, mantissa bit 0) -> its value (OCP MX).
FP4_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
)
#: The bf16 pattern every f32 NaN converts to, by sign (what ml_dtypes gives: a quiet NaN
#: without payload).
BF16_NAN = 0x7FC0


def fp4_to_float(codes: np.ndarray) -> np.ndarray:
    """FP4 e2m1 codes (uint8, low 4 bits used) -> float64 values."""
    return FP4_VALUES[np.asarray(codes, dtype=np.uint8) & 0x0F]


def float_to_fp4(values: np.ndarray) -> np.ndarray:
    """float values -> FP4 e2m1 codes (uint8), rounding to nearest even, saturating at 6."""
    return np.asarray(values, dtype=np.float32).astype(_fp4_dtype()).view(np.uint8)


def e8m0_to_float(codes: np.ndarray) -> np.ndarray:
    """E8M0 scale bytes -> float64: 2^(e-127); 0x00 is 2^-127 and 0xFF is NaN."""
    e = np.asarray(codes, dtype=np.uint8).astype(np.int64)
    return np.where(e == 0xFF, np.nan, np.ldexp(1.0, e - 127))


def bf16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float64 values (exact: bf16 is the top half of an f32)."""
    wide = np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)
    with np.errstate(invalid="ignore"):  # a signalling NaN widens to a quiet one, as in C
        return wide.view(np.float32).astype(np.float64)


def float_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float values -> bf16 bit patterns (uint16), round to nearest even from float32 (the
    kernels convert f32 accumulators; float64 input is rounded to f32 first). Overflow rounds
    to infinity; NaN becomes the quiet NaN BF16_NAN with the input's sign."""
    with np.errstate(over="ignore", invalid="ignore"):  # a NaN's rounding may wrap: replaced
        f32 = np.asarray(values, dtype=np.float32)
        top = f32.view(np.uint32) >> np.uint32(16)
        rounded = (f32.view(np.uint32) + np.uint32(0x7FFF) + (top & np.uint32(1))) >> np.uint32(16)
        nan = (top & np.uint32(0x8000)) | np.uint32(BF16_NAN)
        return np.where(np.isnan(f32), nan, rounded).astype(np.uint16)


#: How a bf16 sum may be rounded (the bf16 atomic's assumption, f4pipe.emu.ops_memory): to
#: nearest even, or toward zero.
BF16_ROUNDINGS = ("rne", "rtz")
_BF16_MAX = float.fromhex("0x1.fep127")


def round_to_bf16(values: np.ndarray, mode: str) -> np.ndarray:
    """float64 values rounded once to bf16 values (float64), to nearest even ("rne") or toward
    zero ("rtz"): a bf16 + bf16 sum is exact in float64, so this is the sum correctly rounded
    in either mode. Subnormal bf16 keep their fixed quantum 2^-133; past the largest finite
    bf16, "rne" gives infinity and "rtz" the largest finite; infinities and NaN pass through."""
    if mode not in BF16_ROUNDINGS:
        raise ValueError(f"bf16 rounding {mode!r}: one of {', '.join(BF16_ROUNDINGS)}")
    x = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(x)
    _, exp = np.frexp(np.where(finite, x, 0.0))
    quantum = np.ldexp(1.0, np.maximum(exp, -125) - 8)  # 8 significant bits
    step = np.rint if mode == "rne" else np.trunc
    with np.errstate(over="ignore"):
        rounded = step(np.where(finite, x, 0.0) / quantum) * quantum
    if mode == "rtz":
        rounded = np.clip(rounded, -_BF16_MAX, _BF16_MAX)
    else:
        rounded = np.where(np.abs(rounded) > _BF16_MAX, np.copysign(np.inf, rounded), rounded)
    return np.where(finite, rounded, x)


# --- nibble packing ----------------------------------------------------------------------------


def pack_fp4(codes: np.ndarray) -> np.ndarray:
    """[rows, K] FP4 codes -> [rows, K/2] bytes; element 2i is the low nibble of byte i."""
    codes = np.asarray(codes, dtype=np.uint8)
    if codes.ndim != 2 or codes.shape[1] % 2:
        raise ShapeError(f"pack_fp4 needs a [rows, K] array with even K, got shape {codes.shape}")
    return ((codes[:, 0::2] & 0x0F) | ((codes[:, 1::2] & 0x0F) << 4)).astype(np.uint8)


def unpack_fp4(packed: np.ndarray) -> np.ndarray:
    """[rows, K/2] bytes -> [rows, K] FP4 codes (inverse of pack_fp4)."""
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.uint8)
    codes[:, 0::2] = packed & 0x0F
    codes[:, 1::2] = packed >> 4
    return codes


# --- B pre-shuffle (aiter shuffle_weight, layout (16, 16)) -------------------------------------


def _b_shuffle_dims(packed: np.ndarray) -> tuple[int, int]:
    if packed.ndim != 2:
        raise ShapeError(f"B must be a 2-D [N, K/2] byte array, got shape {packed.shape}")
    n, kp = packed.shape
    if n % B_SHUFFLE_ROWS or kp % (2 * B_SHUFFLE_BYTES):
        raise ShapeError(f"B pre-shuffle needs N % 16 == 0 and K % 64 == 0, got N={n}, K={2 * kp}")
    return n, kp


def shuffle_b(packed: np.ndarray) -> np.ndarray:
    """Pre-shuffle packed B [N, K/2] for the BpreShuffle kernels (same shape, new order).

    The README's map: src[n0*16+n1][k0*32+k1*16+k2] -> dst[(((n0*Kp/32+k0)*2+k1)*16+n1)*16+k2],
    i.e. view (N/16, 16, Kp/32, 2, 16) permuted (0, 2, 3, 1, 4).
    """
    n, kp = _b_shuffle_dims(packed)
    tiles = np.asarray(packed, dtype=np.uint8).reshape(n // 16, 16, kp // 32, 2, 16)
    return np.ascontiguousarray(tiles.transpose(0, 2, 3, 1, 4)).reshape(n, kp)


def unshuffle_b(shuffled: np.ndarray) -> np.ndarray:
    """Inverse of shuffle_b."""
    n, kp = _b_shuffle_dims(shuffled)
    tiles = np.asarray(shuffled, dtype=np.uint8).reshape(n // 16, kp // 32, 2, 16, 16)
    return np.ascontiguousarray(tiles.transpose(0, 3, 1, 2, 4)).reshape(n, kp)


# --- scales: pad then shuffle (aiter shuffle_scale, non-gu-interleave path) --------------------


def padded_scale_shape(rows: int, k: int) -> tuple[int, int]:
    """[round_up(rows, 256), round_up(K/32, 8)]: the scale buffer the kernels index."""
    return round_up(rows, SCALE_ROW_ALIGN), round_up(k // SCALE_BLOCK, SCALE_COL_ALIGN)


def pad_scales(scales: np.ndarray, fill: int = SCALE_PAD) -> np.ndarray:
    """[rows, K/32] E8M0 bytes -> the padded [round_up(rows,256), round_up(K/32,8)] buffer."""
    scales = np.asarray(scales, dtype=np.uint8)
    if scales.ndim != 2:
        raise ShapeError(f"scales must be a 2-D [rows, K/32] array, got shape {scales.shape}")
    rows, cols = scales.shape
    prow, pcol = round_up(rows, SCALE_ROW_ALIGN), round_up(cols, SCALE_COL_ALIGN)
    padded = np.full((prow, pcol), fill, dtype=np.uint8)
    padded[:rows, :cols] = scales
    return padded


def _scale_dims(padded: np.ndarray) -> tuple[int, int]:
    if padded.ndim != 2 or padded.shape[0] % 32 or padded.shape[1] % 8:
        raise ShapeError(
            f"scale shuffle needs a padded [rows % 32 == 0, cols % 8 == 0] array, "
            f"got shape {padded.shape}; pad with pad_scales first"
        )
    return padded.shape[0], padded.shape[1]


def shuffle_scales(padded: np.ndarray) -> np.ndarray:
    """Shuffle a padded scale buffer (same shape, new order).

    The README's map: padded[d0*32+d1*16+d2][d3*8+d4*4+d5]
    -> dst[((((d0*sn/8+d3)*4+d5)*16+d2)*2+d4)*2+d1],
    i.e. view (sm/32, 2, 16, sn/8, 2, 4) permuted (0, 3, 5, 2, 4, 1).
    """
    sm, sn = _scale_dims(padded)
    blocks = np.asarray(padded, dtype=np.uint8).reshape(sm // 32, 2, 16, sn // 8, 2, 4)
    return np.ascontiguousarray(blocks.transpose(0, 3, 5, 2, 4, 1)).reshape(sm, sn)


def unshuffle_scales(shuffled: np.ndarray) -> np.ndarray:
    """Inverse of shuffle_scales."""
    sm, sn = _scale_dims(shuffled)
    blocks = np.asarray(shuffled, dtype=np.uint8).reshape(sm // 32, sn // 8, 4, 16, 2, 2)
    # dst axes are (d0, d3, d5, d2, d4, d1); put them back as (d0, d1, d2, d3, d4, d5).
    return np.ascontiguousarray(blocks.transpose(0, 5, 3, 1, 4, 2)).reshape(sm, sn)


# --- dequantization ----------------------------------------------------------------------------


def dequantize(packed: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Packed MXFP4 [rows, K/2] with unpadded, unshuffled scales [rows, K/32] -> float64 [rows, K].

    Exact: an fp4 value times a power of two is representable in float64.
    """
    values = fp4_to_float(unpack_fp4(packed))
    rows, k = values.shape
    if scales.shape != (rows, k // SCALE_BLOCK) or k % SCALE_BLOCK:
        raise ShapeError(
            f"scales shape {scales.shape} does not match [rows, K/32] = [{rows}, {k / SCALE_BLOCK}]"
        )
    blocks = values.reshape(rows, k // SCALE_BLOCK, SCALE_BLOCK)
    return (blocks * e8m0_to_float(scales)[:, :, None]).reshape(rows, k)
