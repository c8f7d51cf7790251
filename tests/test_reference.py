"""The CPU reference against an independent naive computation, and the operand generator."""

from __future__ import annotations

import numpy as np
import pytest

from f4pipe.core.errors import InputError
from f4pipe.host import reference
from f4pipe.host.operands import OperandDistribution, generate_operand
from f4pipe.host.reference import reference_gemm, shared_reference


def counted_references(monkeypatch) -> list[float]:
    """The alphas of the reference GEMMs computed from now on (each computed as before)."""
    computed: list[float] = []
    real = reference.reference_gemm

    def counting(a, b, alpha=1.0):
        computed.append(alpha)
        return real(a, b, alpha)

    monkeypatch.setattr(reference, "reference_gemm", counting)
    return computed


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
    300x2048x1024); another draw or alpha gets its own, and none is writable."""
    monkeypatch.setattr(reference, "_REFERENCES", {})
    computed = counted_references(monkeypatch)
    a, b, other = (generate_operand(r, 64, seed) for r, seed in ((4, 1), (8, 2), (4, 3)))

    first = shared_reference(a, b, 1.0, ("a",))
    assert shared_reference(a, b, 1.0, ("a",)) is first and len(computed) == 1
    assert not first.flags.writeable
    assert shared_reference(a, b, 1.0 + 2**-30, ("a",)) is first, "alpha as the kernel's f32"
    halved = shared_reference(a, b, 0.5, ("a",))
    assert np.array_equal(halved, first * 0.5)  # exact: a power of two
    assert np.array_equal(shared_reference(other, b, 1.0, ("b",)), reference_gemm(other, b))
    assert len(computed) == 3


def test_the_reference_cache_keeps_few_bytes(monkeypatch):
    monkeypatch.setattr(reference, "_REFERENCES", {})
    monkeypatch.setattr(reference, "REFERENCES_MAX_BYTES", 2 * 4 * 8 * 8)  # two 4x8 float64
    a, b = generate_operand(4, 64, 1), generate_operand(8, 64, 2)
    for draw in range(5):
        shared_reference(a, b, 1.0, (draw,))
    assert [key[0] for key in reference._REFERENCES] == [3, 4]  # the newest two
    wide = generate_operand(16, 64, 3)  # 16x8 float64: more than the bound
    too_large = shared_reference(wide, b, 1.0, (5,))
    assert too_large.shape == (16, 8)
    assert [key[0] for key in reference._REFERENCES] == [3, 4], "not kept, nor room made for it"


def test_verified_runs_at_one_shape_compare_with_their_own_draws_reference(f4gemm_dir, monkeypatch):
    """run_gemm names the draw by everything that sets the operands: a run with B's seed,
    the distribution or alpha changed is verified against its own reference, and passes."""
    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.emu import EmulatorDevice
    from f4pipe.host.gemm import GemmRequest, run_gemm

    monkeypatch.setattr(reference, "_REFERENCES", {})
    computed = counted_references(monkeypatch)
    # one of the kernels that multiply by alpha (docs/user-guide.md, `--alpha`)
    entry = next(e for e in read_manifest(f4gemm_dir) if e.name.endswith("_BpreShuffle_256x256"))
    requests = [
        GemmRequest(256, 256, 256),
        GemmRequest(256, 256, 256),
        GemmRequest(256, 256, 256, seed_b=7),
        GemmRequest(256, 256, 256, distribution=OperandDistribution(codes=(2, 3, 9))),
        GemmRequest(256, 256, 256, alpha=0.75),
    ]
    device = EmulatorDevice()
    try:
        results = [run_gemm(device, entry, f4gemm_dir / entry.co_name, r) for r in requests]
    finally:
        device.close()
    assert all(r.verification.passed for r in results)
    assert len(computed) == 4, "the second run reused the first's reference, no other did"
