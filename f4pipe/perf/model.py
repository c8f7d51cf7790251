"""Whole-kernel time on an MI355X, predicted from one workgroup's simulated cycles.

A launch is the grid dealt to 256 CUs in rounds, one workgroup per CU (every f4gemm kernel
fills a CU: 256 threads, 512 VGPRs, 160 KiB LDS), in the order the hardware dispatches them
(linear id = x + gdx * (y + gdy * z), x over N tiles; consecutive ids go to the 8 XCDs in
turn). Per shape:

- **compute**: rounds x the workgroup's cycles at its K (cu.py on the emulator's path, traced
  at K = 256, 512, 1024, 2048 and linear in K beyond: the main loop is the same every
  iteration) / the sustained clock.
- **memory**: bytes into the XCDs' L2s (per round and XCD, the distinct A row tiles and B
  column tiles its workgroups read, with their scales, plus D) over the fabric bandwidth, and
  first-touch bytes (A, B, scales, D once; every round's L2 bytes again when A and B together
  exceed the Infinity Cache) over the HBM bandwidth.
- **launch**: a fixed overhead per launch.

time = launch + (compute^p + memory^p)^(1/p): p-norm of the two, p calibrated (compute and
memory overlap, imperfectly). Everything uncalibrated comes from the kernel's own instructions;
the calibrated constants are global (costs.Calibration).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from f4pipe.kernarg import launch_geometry
from f4pipe.perf.costs import COST, Calibration
from f4pipe.perf.cu import WorkgroupCycles

#: K values (per workgroup) at which a kernel's path is traced; above the last, per-workgroup
#: cycles grow linearly with the slope between the last two.
TRACE_KS = (256, 512, 1024, 2048)
#: Bytes of MXFP4 data per K element per row (two FP4 values per byte), and of e8m0 scales
#: (one per 32 elements).
FP4_BYTES_PER_K = 0.5
SCALE_BYTES_PER_K = 1 / 32
D_BYTES = 2  # bf16 output

BOUNDS = ("MFMA", "LDS", "VMEM", "HBM", "fabric", "launch")


@dataclass(frozen=True)
class Prediction:
    """Predicted time of one kernel at one shape, and what bounds it."""

    kernel: str
    m: int
    n: int
    k: int
    log2_k_split: int
    us: float
    tflops: float
    bound: str
    compute_us: float
    memory_us: float
    rounds: int
    workgroups: int
    wg_cycles: float


def interpolate_cycles(points: dict[int, float], k: int) -> float:
    """Workgroup cycles at per-workgroup K from the traced points (piecewise linear, linear
    extrapolation past the largest)."""
    ks = sorted(points)
    if k in points:
        return points[k]
    if k <= ks[0]:
        lo, hi = ks[0], ks[1]
    elif k >= ks[-1]:
        lo, hi = ks[-2], ks[-1]
    else:
        hi = next(x for x in ks if x > k)
        lo = ks[ks.index(hi) - 1]
    slope = (points[hi] - points[lo]) / (hi - lo)
    return points[lo] + slope * (k - lo)


def traffic_bytes(
    tile_m: int, tile_n: int, m: int, n: int, k_local: int, grid: tuple[int, int, int]
) -> tuple[float, float]:
    """(bytes into the L2s over the launch, first-touch bytes from HBM)."""
    gdx, gdy, gdz = grid
    num_cu = int(COST["num_cu"])
    num_xcd = int(COST["num_xcd"])
    row_bytes = k_local * (FP4_BYTES_PER_K + SCALE_BYTES_PER_K)
    ids = np.arange(gdx * gdy * gdz, dtype=np.int64)
    x = ids % gdx
    y = (ids // gdx) % gdy
    z = ids // (gdx * gdy)
    rnd = ids // num_cu
    xcd = ids % num_xcd
    # distinct (round, xcd, z, tile) pairs: each is one tile's K-slice fetched into that L2
    a_tiles = np.unique(((rnd * num_xcd + xcd) * gdz + z) * gdy + y).size
    b_tiles = np.unique(((rnd * num_xcd + xcd) * gdz + z) * gdx + x).size
    rows_m = min(tile_m, m)
    d_bytes = m * n * D_BYTES * gdz
    fabric = (a_tiles * rows_m + b_tiles * tile_n) * row_bytes + d_bytes
    k_total = k_local * gdz
    footprint = (m + n) * k_total * (FP4_BYTES_PER_K + SCALE_BYTES_PER_K)
    hbm = fabric if footprint > COST["mall_bytes"] else footprint + d_bytes
    return float(fabric), float(hbm)


def combine(cal: Calibration, rounds, cycles, fabric_bytes, hbm_bytes):
    """(time, compute, fabric, HBM) in us from rounds, workgroup cycles and bytes: the one
    formula, for scalars or numpy arrays alike (the fit evaluates it on every row at once)."""
    compute_us = rounds * cycles / (cal.clock_ghz * 1e3)
    fabric_us = fabric_bytes / (cal.fabric_tbps * 1e6)
    hbm_us = hbm_bytes / (cal.hbm_tbps * 1e6)
    memory_us = np.maximum(fabric_us, hbm_us)
    p = cal.overlap_p
    us = cal.launch_us + (compute_us**p + memory_us**p) ** (1 / p)
    return us, compute_us, fabric_us, hbm_us


def kernel_time(
    kernel: str,
    tile_m: int,
    tile_n: int,
    m: int,
    n: int,
    k: int,
    log2_k_split: int,
    wg: WorkgroupCycles,
    cal: Calibration,
) -> Prediction:
    """Predicted time of one launch, given the workgroup's simulated cycles at its K."""
    geometry = launch_geometry(tile_m, tile_n, m, n, k, log2_k_split)
    gdx, gdy, gdz = geometry.grid
    workgroups = gdx * gdy * gdz
    rounds = -(-workgroups // int(COST["num_cu"]))
    fabric, hbm = traffic_bytes(tile_m, tile_n, m, n, geometry.k_per_tg, geometry.grid)
    us, compute_us, fabric_us, hbm_us = combine(cal, rounds, wg.cycles, fabric, hbm)
    memory_us = max(fabric_us, hbm_us)
    body = us - cal.launch_us
    if cal.launch_us > body:
        bound = "launch"
    elif memory_us > compute_us:
        bound = "HBM" if hbm_us >= fabric_us else "fabric"
    else:
        busy = {"MFMA": wg.mfma_busy, "LDS": wg.lds_busy, "VMEM": wg.vmem_busy + wg.vm_wait}
        bound = max(busy, key=lambda u: busy[u])
    return Prediction(
        kernel=kernel,
        m=m,
        n=n,
        k=k,
        log2_k_split=log2_k_split,
        us=us,
        tflops=2.0 * m * n * k / (us * 1e-6) / 1e12,
        bound=bound,
        compute_us=compute_us,
        memory_us=memory_us,
        rounds=rounds,
        workgroups=workgroups,
        wg_cycles=wg.cycles,
    )
