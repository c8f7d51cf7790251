"""The cycle model's per-shape path as it stood before the batch path (f4pipe-cu-8): a row's
workgroup cycles interpolated point by point (KernelProfile.cycles and vmem_bytes: traced K,
row fractions, vector-memory rate, each a scalar walk) and the launch formulas of
f4pipe.perf.model on scalars. The batch path (f4pipe.perf.batch) must reproduce it: the
tests and benchmarks/predict_scale.py hold it to this oracle."""

from __future__ import annotations

from dataclasses import asdict

from f4pipe.host.kernarg import launch_geometry
from f4pipe.perf.costs import Calibration
from f4pipe.perf.model import (
    effective_bytes_per_clk,
    hbm_bytes,
    hbm_share,
    kernel_time,
    workgroups_and_rounds,
)
from f4pipe.perf.profile import KernelProfile


def scalar_us(
    profile: KernelProfile, m: int, n: int, k: int, log2_k_split: int, cal: Calibration,
    warm: bool = False,
) -> float:  # fmt: skip
    """One kernel's predicted time at one shape, the per-shape way."""
    entry = profile.entry
    split = log2_k_split if entry.splitk else 0
    geometry = launch_geometry(entry.tile_m, entry.tile_n, m, n, k, split)
    if geometry.gdz == 1:
        split = 0
    fracs = profile.row_fractions(m, n)
    workgroups, _rounds = workgroups_and_rounds(geometry)
    hbm = hbm_bytes(entry.tile_m, entry.tile_n, m, n, geometry.k_per_tg, geometry.grid, warm)
    moved = workgroups * profile.vmem_bytes(geometry.k_per_tg, split, fracs)
    bpc = effective_bytes_per_clk(cal, hbm_share(moved, hbm))
    wg = profile.cycles(geometry.k_per_tg, split, cal, fracs, bpc)
    return float(kernel_time(cal, m, n, k, geometry.gdz, workgroups, asdict(wg), hbm)["us"])
