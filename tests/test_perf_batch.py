"""The batch path (f4pipe.perf.batch) reproduces the per-shape path (tests/perf_oracle.py: the
model before it, point by point) on aiter's calibration rows and on shapes that reach every
branch of the bookkeeping: partial tiles in M and N, a K between and past the traced ones,
splits that hold and splits that collapse, warm launches, launches too large for the Infinity
Cache. Only the order of additions differs, so the two agree far inside the 0.1 % the tuning
allows; a relative 1e-9 catches any change of formula."""

from __future__ import annotations

import numpy as np
import pytest
from perf_oracle import scalar_us

from f4pipe.aiter.manifest import read_manifest
from f4pipe.perf.batch import predict_rows
from f4pipe.perf.fit import measured_rows
from f4pipe.perf.predict import Predictor, predict_profile

SAME = 1e-9


@pytest.fixture(scope="module")
def predictor(f4gemm_dir):
    return Predictor(read_manifest(f4gemm_dir))


def oracle(predictor, entries, m, n, k, split, warm=False) -> np.ndarray:
    cal = predictor.calibration
    return np.array(
        [
            scalar_us(predictor.profile(e), int(a), int(b), int(c), int(s), cal, warm)
            for e, a, b, c, s in zip(entries, m, n, k, split, strict=True)
        ]
    )


def test_the_calibration_rows_are_predicted_as_before(predictor, f4gemm_dir):
    rows = measured_rows(f4gemm_dir, predictor.manifest)
    assert len(rows) >= 796
    for warm in (False, True):
        part = rows[rows["warm"] == warm]
        entries = [predictor.manifest.get(name) for name in part["kernel"]]
        shape = (part["m"].to_numpy(), part["n"].to_numpy(), part["k"].to_numpy())
        got = predict_rows(predictor, entries, *shape, 0, warm).us
        want = oracle(predictor, entries, *shape, [0] * len(entries), warm)
        assert np.max(np.abs(got / want - 1)) <= SAME


#: Shapes that reach every branch: M and N below a tile (fractions on and off the grid), K at,
#: between and past the traced Ks, splits of 1..4 (some collapse: K / split < 256), a launch
#: of 10^6 workgroups too large for the Infinity Cache.
SHAPES = [
    (1, 7168, 2048, 0), (5, 112, 512, 0), (37, 2112, 7168, 2), (96, 4096, 768, 1),
    (200, 640, 1280, 3), (300, 2048, 1024, 4), (4096, 4112, 8192, 1), (16384, 16384, 16384, 2),
    (65536, 512, 8192, 0), (131072, 28672, 4096, 0), (8192, 8192, 65536, 4), (257, 144, 256, 2),
]  # fmt: skip


@pytest.mark.parametrize("warm", [False, True])
def test_every_kernel_at_edge_shapes_is_predicted_as_before(predictor, warm):
    entries = [e for e in predictor.manifest for _ in SHAPES]
    m, n, k, split = (
        np.array([s[i] for _ in predictor.manifest for s in SHAPES]) for i in range(4)
    )
    got = predict_rows(predictor, entries, m, n, k, split, warm).us
    want = oracle(predictor, entries, m, n, k, split, warm)
    worst = np.argmax(np.abs(got / want - 1))
    assert abs(got[worst] / want[worst] - 1) <= SAME, (entries[worst].name, m[worst], n[worst])


def test_one_row_and_many_rows_give_one_answer_with_its_bound(predictor):
    """predict_profile (one shape, what `predict -m -n -k` shows) is the batch path's row, the
    bound included."""
    entries = list(predictor.manifest)[:6]
    shape = (300, 2048, 1024, 1)
    rows = predict_rows(predictor, entries, *([x] * len(entries) for x in shape[:3]), 1,
                        explain=True)  # fmt: skip
    for i, e in enumerate(entries):
        one = predict_profile(predictor.profile(e), *shape, predictor.calibration, explain=True)
        assert one == rows.prediction(i, e, shape)
        assert one.wg_cycles == rows.wg_cycles[i] > 0  # a workgroup's clocks, its D stores in
        assert one.bound in ("launch", "HBM", "L2", "VMEM", "MFMA", "LDS")
