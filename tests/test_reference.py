"""The CPU reference against an independent naive computation, and the operand generator."""

from __future__ import annotations

import numpy as np
import pytest

from f4pipe.core.errors import InputError
from f4pipe.host.operands import OperandDistribution, generate_operand
from f4pipe.host.reference import reference_gemm


def naive_value(packed: np.ndarray, scales: np.ndarray, row: int, k: int) -> float:
    """Decode one element from bytes with the e2m1 / e8m0 formulas (no ml_dtypes)."""
    byte = int(packed[row, k // 2])
    code = (byte >> 4) if k % 2 else (byte & 0xF)
    sign = -1.0 if code & 0x8 else 1.0
    exp, man = (code >> 1) & 0x3, code & 0x1
    mag = man * 0.5 if exp == 0 else (1.0 + man * 0.5) * 2.0 ** (exp - 1)
    return sign * mag * 2.0 ** (int(scales[row, k // 32]) - 127)


@pytest.mark.parametrize(("m", "n", "k", "alpha"), [(3, 5, 64, 1.0), (7, 2, 128, 0.75)])
def test_reference_equals_naive_loops_bit_exactly(m, n, k, alpha):
    a = generate_operand(m, k, seed=11)
    b = generate_operand(n, k, seed=22)
    ref = reference_gemm(a, b, alpha)
    for i in range(m):
        for j in range(n):
            acc = 0.0
            for kk in range(k):
                acc += naive_value(a.packed, a.scales, i, kk) * naive_value(
                    b.packed, b.scales, j, kk
                )
            assert ref[i, j] == acc * alpha  # bit-exact: every partial sum is exact in float64


def test_alpha_is_the_kernels_f32():
    a, b = generate_operand(2, 32, seed=1), generate_operand(2, 32, seed=2)
    unit = reference_gemm(a, b, 1.0)
    assert np.array_equal(reference_gemm(a, b, 0.1), unit * float(np.float32(0.1)))


def test_operands_follow_the_default_distribution_and_seed():
    a = generate_operand(64, 1024, seed=1234)
    assert a.packed.shape == (64, 512) and a.scales.shape == (64, 32) and a.seed == 1234
    nibbles = np.concatenate([a.packed & 0xF, a.packed >> 4]).ravel()
    assert set(np.unique(nibbles).tolist()) == set(range(16))
    assert a.scales.min() == 124 and a.scales.max() == 130
    again = generate_operand(64, 1024, seed=1234)
    assert np.array_equal(a.packed, again.packed) and np.array_equal(a.scales, again.scales)


def test_configurable_distribution():
    dist = OperandDistribution(codes=(2, 10), scale_min=127, scale_max=127)
    a = generate_operand(4, 64, seed=5, distribution=dist)
    assert set(np.unique(a.dequantize()).tolist()) <= {1.0, -1.0}
    with pytest.raises(InputError, match="0xFF is NaN"):
        OperandDistribution(scale_max=255)
