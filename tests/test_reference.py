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


def test_a_reference_is_reused_only_for_the_same_draw_and_alpha(monkeypatch):
    """Runs at one shape share the reference (the seed matrix runs every kernel at
    300x2048x1024); another seed, distribution or alpha gets its own, and none is writable."""
    from f4pipe.host import gemm

    monkeypatch.setattr(gemm, "_REFERENCES", {})
    computed: list[float] = []

    def counting(a, b, alpha=1.0):
        computed.append(alpha)
        return reference_gemm(a, b, alpha)

    monkeypatch.setattr(gemm, "reference_gemm", counting)

    def ref(**changes):
        request = gemm.GemmRequest(m=4, n=8, k=64, **changes)
        a = generate_operand(request.m, request.k, request.seed_a, request.distribution)
        b = generate_operand(request.n, request.k, request.seed_b, request.distribution)
        return gemm.reference_of(request, a, b)

    first = ref()
    assert ref() is first and len(computed) == 1
    assert not first.flags.writeable
    others = [ref(seed_a=5), ref(alpha=0.5), ref(distribution=OperandDistribution(codes=(1, 2)))]
    assert len(computed) == 4
    assert all(not np.array_equal(o, first) for o in others)
    assert np.array_equal(ref(alpha=0.5), first * 0.5)  # exact: a power of two


def test_the_reference_cache_keeps_few_bytes(monkeypatch):
    from f4pipe.host import gemm

    monkeypatch.setattr(gemm, "_REFERENCES", {})
    monkeypatch.setattr(gemm, "REFERENCES_MAX_BYTES", 4 * 8 * 8 * 2)  # two 4x8 float64 refs
    for seed in range(5):
        request = gemm.GemmRequest(m=4, n=8, k=64, seed_a=seed)
        a = generate_operand(4, 64, seed)
        b = generate_operand(8, 64, request.seed_b)
        gemm.reference_of(request, a, b)
    assert [key[3] for key in gemm._REFERENCES] == [3, 4]  # the newest two, by seed_a
