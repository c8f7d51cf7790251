"""Random MXFP4 operands for verification, reproducible from a recorded seed.

The seed driver drew, per row, K/2 random bytes (all 16 fp4 codes equally likely) and K/32 E8M0
scales with exponents 124..130 (2^-3 .. 2^3) from mt19937; that stream cannot be reproduced from
numpy, so f4pipe uses numpy's Generator and records the seed with every result instead. With
the default ranges every partial product is exact in f32 and the whole GEMM is exact in float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from f4pipe.core.errors import InputError, ShapeError
from f4pipe.core.numerics import SCALE_BLOCK, dequantize, pack_fp4


@dataclass(frozen=True)
class OperandDistribution:
    """What random operands are drawn from: fp4 codes uniformly from `codes`, scale bytes
    uniformly from [scale_min, scale_max] (E8M0: 2^(e-127))."""

    codes: tuple[int, ...] = tuple(range(16))
    scale_min: int = 124
    scale_max: int = 130

    def __post_init__(self) -> None:
        if not self.codes or any(not 0 <= c <= 15 for c in self.codes):
            raise InputError(f"fp4 codes must be a non-empty subset of 0..15, got {self.codes}")
        if not 0 <= self.scale_min <= self.scale_max <= 254:
            raise InputError(
                f"scale exponent range [{self.scale_min}, {self.scale_max}] must lie in 0..254 "
                "(0xFF is NaN)"
            )


DEFAULT_DISTRIBUTION = OperandDistribution()


@dataclass(frozen=True)
class MxOperand:
    """A logical MXFP4 matrix [rows, K]: packed fp4 bytes and unpadded, unshuffled scales."""

    packed: np.ndarray = field(repr=False)  # [rows, K/2] uint8, low nibble = even element
    scales: np.ndarray = field(repr=False)  # [rows, K/32] uint8 E8M0
    seed: int

    @property
    def rows(self) -> int:
        return int(self.packed.shape[0])

    @property
    def k(self) -> int:
        return int(self.packed.shape[1]) * 2

    def dequantize(self) -> np.ndarray:
        """float64 [rows, K] values (exact)."""
        return dequantize(self.packed, self.scales)


def generate_operand(
    rows: int, k: int, seed: int, distribution: OperandDistribution = DEFAULT_DISTRIBUTION
) -> MxOperand:
    """Draw a [rows, K] MXFP4 operand from `distribution` with numpy's default Generator.

    The same draw is asked for again and again (the shape-edge sweep runs every shape in two
    workgroup orders, a matrix repeats shapes across kernels), so the last few are kept; their
    arrays are read-only, so no caller can change what another is given."""
    if rows <= 0 or k <= 0 or k % SCALE_BLOCK:
        raise ShapeError(f"operand shape rows={rows}, K={k}: need rows > 0 and K % 32 == 0")
    return _drawn(rows, k, seed, distribution)


@lru_cache(maxsize=32)
def _drawn(rows: int, k: int, seed: int, distribution: OperandDistribution) -> MxOperand:
    rng = np.random.default_rng(seed)
    table = np.asarray(distribution.codes, dtype=np.uint8)
    codes = table[rng.integers(0, len(table), size=(rows, k), dtype=np.uint8)]
    scales = rng.integers(
        distribution.scale_min,
        distribution.scale_max + 1,
        size=(rows, k // SCALE_BLOCK),
        dtype=np.uint16,
    ).astype(np.uint8)
    packed = pack_fp4(codes)
    packed.setflags(write=False)
    scales.setflags(write=False)
    return MxOperand(packed=packed, scales=scales, seed=seed)
