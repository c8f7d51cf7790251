"""Prediction at tuned-table scale: 10,000 shapes x the 35 kernels through the batch path
(f4pipe.perf.batch.predict_rows, what `predict --shapes`, `audit-tuned --predict` and `tune`
share), and its agreement with the per-shape path.

The shapes: every (N, K) of the model shape lists in config/shapes/ and of the pinned aiter's
tuned a4w4 table, each at M values spread evenly in log2 from 1 to 32,768 (partial tiles
included), 10,000 in all. Three figures, CPU seconds of this process (user + sys):

1. first: a fresh Predictor on whatever the cache holds (the first run on a machine traces and
   simulates every point the shapes need; they are kept in ~/.cache/f4pipe/perf);
2. repeated: a fresh Predictor again, every trace and simulated point read from the cache (what
   a second `tune` or `predict --shapes` pays): the target is at most 10 CPU-s on a
   2-core machine, stated with the machine reference of benchmarks/main_job.py;
3. the per-shape path as it was before the batch path (tests/perf_oracle.py) on a sample of the
   rows: CPU per row and the largest relative difference from the batch path (target at most
   0.1 %).

Run: `nox -s bench`, or `python benchmarks/predict_scale.py [--shapes 10000] [--sample 3000]`.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

from f4pipe.aiter.manifest import read_manifest
from f4pipe.aiter.shaperules import check_shape
from f4pipe.aiter.tuned import read_tuned
from f4pipe.core.cache import cache_root
from f4pipe.fetch import PypiSource, fetch_aiter
from f4pipe.perf.batch import predict_rows
from f4pipe.perf.predict import Predictor

REPO = Path(__file__).resolve().parent.parent
TUNED_TABLE = "a4w4_blockscale_tuned_gemm.csv"


def machine_reference() -> tuple[float, float]:
    from main_job import machine_reference as reference  # benchmarks/ is on sys.path

    return reference()


def n_k_pairs(configs: Path) -> list[tuple[int, int]]:
    """Every (N, K) of the model shape lists and of aiter's tuned table, sorted."""
    pairs = set()
    for path in sorted((REPO / "config" / "shapes").glob("*.csv")):
        with path.open() as f:
            pairs |= {(int(r["N"]), int(r["K"])) for r in csv.DictReader(f)}
    table = read_tuned(configs / TUNED_TABLE)
    pairs |= set(zip(table["N"].astype(int), table["K"].astype(int), strict=True))
    return sorted(pairs)


def bench_shapes(pairs: list[tuple[int, int]], count: int) -> np.ndarray:
    """`count` shapes (M, N, K): each pair at M values spread evenly in log2 over 1..32768."""
    per_pair = -(-count // len(pairs))
    ms = np.unique(np.round(np.logspace(0, 15, per_pair, base=2)).astype(np.int64))
    grid = [(m, n, k) for n, k in pairs for m in ms]
    step = len(grid) / count
    chosen = np.array([grid[int(i * step)] for i in range(count)], dtype=np.int64)
    for m, n, k in chosen:
        check_shape(int(m), int(n), int(k))
    return chosen


def batch(f4gemm_dir: Path, shapes: np.ndarray) -> tuple[float, np.ndarray, list]:
    """CPU seconds of predict_rows on every kernel x shape with a fresh Predictor."""
    start = time.process_time()
    predictor = Predictor(read_manifest(f4gemm_dir))
    entries = list(predictor.manifest)
    rows = [e for e in entries for _ in range(len(shapes))]
    tiled = np.tile(shapes, (len(entries), 1))
    us = predict_rows(predictor, rows, tiled[:, 0], tiled[:, 1], tiled[:, 2]).us
    return time.process_time() - start, us, list(zip(rows, tiled.tolist(), strict=True))


def per_shape(f4gemm_dir: Path, rows: list, sample: np.ndarray) -> tuple[float, np.ndarray]:
    """CPU seconds and times of the per-shape path (tests/perf_oracle.py: the interpolation
    point by point, as before the batch path) on the sampled rows."""
    sys.path.insert(0, str(REPO / "tests"))
    from perf_oracle import scalar_us

    predictor = Predictor(read_manifest(f4gemm_dir))
    cal = predictor.calibration
    start = time.process_time()
    us = [scalar_us(predictor.profile(rows[i][0]), *rows[i][1], 0, cal) for i in sample]
    return time.process_time() - start, np.array(us)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=int, default=10_000)
    parser.add_argument("--sample", type=int, default=3_000, help="rows for the per-shape path")
    args = parser.parse_args()
    python_s, numpy_s = machine_reference()
    print(
        f"machine reference (fixed workload): {python_s:.2f} CPU-s pure Python + "
        f"{numpy_s:.2f} CPU-s numpy = {python_s + numpy_s:.2f} CPU-s"
    )
    aiter = fetch_aiter(PypiSource(), cache_root() / "test-resources")
    shapes = bench_shapes(n_k_pairs(aiter.f4gemm_dir.parent / "configs"), args.shapes)
    first_s, _, _ = batch(aiter.f4gemm_dir, shapes)
    repeated_s, us, rows = batch(aiter.f4gemm_dir, shapes)
    print(
        f"{len(shapes)} shapes x {len(rows) // len(shapes)} kernels = {len(rows)} predictions: "
        f"first {first_s:.1f} CPU-s, repeated {repeated_s:.1f} CPU-s "
        f"({repeated_s / len(rows) * 1e6:.1f} us a prediction; target <= 10 CPU-s)"
    )
    sample = np.random.default_rng(0).choice(len(rows), size=min(args.sample, len(rows)))
    single_s, single_us = per_shape(aiter.f4gemm_dir, rows, sample)
    worst = float(np.max(np.abs(us[sample] / single_us - 1.0)))
    print(
        f"per-shape path on {len(sample)} rows: {single_s / len(sample) * 1e3:.2f} ms a "
        f"prediction; largest relative difference from the batch path {worst:.2e} "
        f"(target <= 1e-3)"
    )


if __name__ == "__main__":
    main()
