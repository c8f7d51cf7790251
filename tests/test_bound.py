"""What bounds a prediction (the `bound` column of bench and `f4pipe predict`): the limit
whose being faster shortens the predicted time most (predict.unit_savings), never the time
itself. Pinned on two real kernels whose limits differ: 256x256 at 8192^3 keeps its MFMA
pipes busy and waits little on memory; 32x128 at one row of A waits on its loads."""

from __future__ import annotations

import pytest

from f4pipe.perf.costs import load_calibration
from f4pipe.perf.cu import CU_UNITS, UNIT_SPEEDUP, simulate_workgroup
from f4pipe.perf.predict import Predictor, unit_savings
from f4pipe.perf.profile import KernelProfile

BIG = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"
SMALL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
WIDE = "f4gemm_bf16_per1x32Fp4_BpreShuffle_128x512"
LIMITS = {"launch", "HBM", "L2", "VMEM", *CU_UNITS}


@pytest.fixture(scope="module")
def predictor(manifest) -> Predictor:
    return Predictor(manifest)


def savings(predictor: Predictor, kernel: str, m: int, n: int, k: int) -> dict[str, float]:
    entry = predictor.manifest.get(kernel)
    return unit_savings(predictor.profile(entry), m, n, k, 0, predictor.calibration)


def test_256x256_at_8192_cubed_is_bound_by_its_mfma_pipes(predictor):
    """Its MFMA pipes are busy 65,536 of its ~80,000 clocks and its vector-memory path about
    as long, but only the MFMA pipes hold it back: a quarter faster, they save several times
    what a faster memory path would."""
    got = savings(predictor, BIG, 8192, 8192, 8192)
    assert set(got) == LIMITS
    assert max(got, key=got.get) == "MFMA"
    assert got["MFMA"] > 3 * got["VMEM"] > 0
    assert got["HBM"] == pytest.approx(0.0, abs=1e-9)  # A and B fit in the Infinity Cache
    p = predictor.predict(predictor.manifest.get(BIG), 8192, 8192, 8192, explain=True)
    assert p.bound == "MFMA"


def test_a_single_row_of_a_is_bound_by_the_cus_memory_path(predictor):
    """32x128 at M=1 N=5120 K=8192: 40 workgroups, each waiting on its loads' round trips;
    its MFMA pipes are idle most of the time, so making them faster saves almost nothing."""
    got = savings(predictor, SMALL, 1, 5120, 8192)
    assert max(got, key=got.get) == "VMEM"
    assert got["VMEM"] > 10 * got["MFMA"]
    p = predictor.predict(predictor.manifest.get(SMALL), 1, 5120, 8192, explain=True)
    assert p.bound == "VMEM"


def test_kernels_at_one_shape_can_have_different_bounds(predictor):
    """128x512 reads 1.25 times the bytes per MFMA of 256x256: at 8192^3 its memory path,
    not its MFMA pipes, holds it back (a faster MFMA saves less than a faster path)."""
    got = savings(predictor, WIDE, 8192, 8192, 8192)
    assert max(got, key=got.get) == "VMEM"
    assert got["VMEM"] > got["MFMA"]


def test_naming_the_bound_never_changes_the_predicted_time(predictor):
    """The label is asked of extra simulations; the prediction is the frozen model's."""
    for kernel, shape in ((BIG, (8192, 8192, 8192)), (SMALL, (1, 5120, 8192))):
        entry = predictor.manifest.get(kernel)
        plain = predictor.predict(entry, *shape)
        named = predictor.predict(entry, *shape, explain=True)
        assert plain.bound is None
        assert named.us == plain.us and named.tflops == plain.tflops
        assert named.compute_us == plain.compute_us and named.memory_us == plain.memory_us


def test_a_faster_unit_is_faster_only_where_it_works(manifest):
    """simulate_workgroup's `faster`: None is the predicted workgroup; MFMA shortens exactly
    the MFMA pipes' busy clocks by UNIT_SPEEDUP and leaves the bytes alone; an unknown unit is
    refused rather than ignored."""
    entry = manifest.get(BIG)
    profile = KernelProfile(entry, manifest.co_path(entry))
    cal = load_calibration().calibration
    trace = profile.trace(2048)
    args = (profile.ops, trace, cal.vmem_latency, cal.cu_vmem_bytes_per_clk)
    plain = simulate_workgroup(*args)
    assert simulate_workgroup(*args, faster=None) == plain
    quick = simulate_workgroup(*args, faster="MFMA")
    assert quick.mfma_busy == pytest.approx(plain.mfma_busy / UNIT_SPEEDUP)
    assert quick.vmem_bytes == plain.vmem_bytes and quick.cycles < plain.cycles
    lds = simulate_workgroup(*args, faster="LDS")
    assert lds.lds_busy == pytest.approx(plain.lds_busy / UNIT_SPEEDUP)
    assert lds.mfma_busy == plain.mfma_busy
    with pytest.raises(ValueError, match="faster"):
        simulate_workgroup(*args, faster="VMEM")
