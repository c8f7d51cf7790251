"""Whole-kernel time on an MI355X, predicted from one workgroup's simulated cycles.

A launch is the grid dealt to 256 CUs in rounds, one workgroup per CU (every f4gemm kernel
fills a CU: 256 threads, 512 VGPRs, 160 KiB LDS), in the order the hardware dispatches them
(linear id = x + gdx * (y + gdy * z), x over N tiles; consecutive ids go to the 8 XCDs in
turn). Per shape:

- **compute**: per round, the workgroup's cycles at its K (cu.py on the emulator's path, traced
  at K = 256, 512, 1024, 2048 and linear in K beyond: the main loop is the same every
  iteration) / the clock that round sustains: MI355X's clock falls with the power its CUs draw,
  so a round runs faster when fewer CUs are busy or their MFMA pipes are less so (a kernel
  waiting on memory), slower when every CU's MFMA pipes are saturated (round_clocks). The CU's
  vector-memory path moves bytes the L2 serves at one rate and bytes HBM serves at another
  (a cold stream's requests queue in the fabric and at HBM): the workgroup is simulated at the
  rate of its shape's mix (effective_bytes_per_clk). The L2 writes half the bytes per clock
  it reads, and a round's workgroups store D together at their end: each workgroup's D bytes
  cost it the difference (store_clocks).
- **memory**: the bytes every workgroup's buffer accesses move (the trace's in-range bytes,
  times the workgroups) over the L2 bandwidth, and the bytes HBM serves over the HBM
  bandwidth: A, B, scales and D once when A and B fit in the Infinity Cache, else what it
  misses (per round, the distinct A row tiles and B column tiles its workgroups read, with
  their scales, less the share of the previous round's tiles it still holds; plus D).
- **the slowest CU**: CUs do not run a workgroup in the same time (their XCDs' clocks and
  their memory requests' queues differ), and a launch ends with its last CU. A CU takes its
  next workgroup as soon as it is free, so over R rounds a CU's lateness is a sum of R
  independent ones: the launch waits sqrt(R) x the spread x the expected maximum over the CUs
  that run the most workgroups (slowest_cu_us). aiter's rows show it: 256x256 at N = 16384,
  K = 26624 takes 163.7 us for one round and 155.3 us for each further one.
- **launch**: a fixed overhead per launch.

time = launch + (compute^p + memory^p)^(1/p): p-norm of the two, p calibrated (compute and
memory overlap, imperfectly). Everything uncalibrated comes from the kernel's own instructions;
the calibrated constants are global (costs.Calibration).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from f4pipe.host.gemm import tflops
from f4pipe.host.kernarg import LaunchGeometry
from f4pipe.perf.costs import COST, Calibration

#: K values (per workgroup) at which a kernel's path is traced; above the last, per-workgroup
#: cycles grow linearly with the slope between the last two.
TRACE_KS = (256, 512, 1024, 2048)
#: Bytes of MXFP4 data per K element per row (two FP4 values per byte), and of e8m0 scales
#: (one per 32 elements).
FP4_BYTES_PER_K = 0.5
SCALE_BYTES_PER_K = 1 / 32
D_BYTES = 2  # bf16 output
#: A CU's vector-memory bytes per clock at which workgroups are simulated: a shape's own rate
#: is interpolated between the two around it, linearly in clocks per byte.
SIM_BYTES_PER_CLK = (12.0, 16.0, 20.0, 24.0, 28.0, 32.0, 40.0, 48.0, 64.0, 96.0, 128.0)


@dataclass(frozen=True)
class Prediction:
    """Predicted time of one kernel at one shape, and what bounds it (named only when asked:
    predict.predict_profile's `explain`)."""

    kernel: str
    m: int
    n: int
    k: int
    log2_k_split: int
    us: float
    tflops: float
    bound: str | None  # MFMA | LDS | VMEM | L2 | HBM | launch; None: not asked for
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


def output_bytes(m, n, gdz):
    """The bytes of D a launch stores: each of its gdz splits of K writes (or adds) all of D
    (scalars or arrays)."""
    return m * n * D_BYTES * gdz


def workgroup_output_bytes(m: int, n: int, geometry: LaunchGeometry) -> float:
    """The bytes of D one workgroup of a launch stores, on average over its workgroups (edge
    tiles store fewer)."""
    workgroups, _rounds = workgroups_and_rounds(geometry)
    return output_bytes(m, n, geometry.gdz) / workgroups


def store_clocks(cal: Calibration, d_bytes_per_workgroup):
    """Clocks a workgroup's D stores take beyond what its simulation charges them. The
    simulation moves every byte through the CU's vector-memory path at the L2's read rate; the
    L2 writes COST["l2_write_share"] of the bytes per clock it reads, and a round's workgroups
    store D together at their end, after their main loops, with nothing left to overlap (a
    kernel whose D is small next to its K pays little)."""
    read = cal.cu_vmem_bytes_per_clk
    return d_bytes_per_workgroup * (1.0 / (read * COST["l2_write_share"]) - 1.0 / read)


def hbm_bytes(
    tile_m: int,
    tile_n: int,
    m: int,
    n: int,
    k_local: int,
    grid: tuple[int, int, int],
    warm: bool = False,
) -> float:
    """hbm_bytes_rows of one launch."""
    one = (np.array([x]) for x in (m, n, k_local, *grid))
    m_, n_, k_, *grid_ = one
    return float(hbm_bytes_rows(tile_m, tile_n, m_, n_, k_, tuple(grid_), warm)[0])


def operand_bytes(m, n, k_local, gdz):
    """The bytes of A, B and their scales a launch reads (each split of K its own share;
    scalars or arrays)."""
    return (m + n) * k_local * gdz * (FP4_BYTES_PER_K + SCALE_BYTES_PER_K)


def hbm_bytes_rows(
    tile_m: int,
    tile_n: int,
    m: np.ndarray,
    n: np.ndarray,
    k_local: np.ndarray,
    grid: tuple[np.ndarray, np.ndarray, np.ndarray],
    warm: bool = False,
) -> np.ndarray:
    """Bytes HBM serves over each launch of one kernel: first touch of A, B, scales and D when
    A and B fit in the Infinity Cache (only D when `warm`: launches repeated on the same
    buffers find A and B there). Else per round of workgroups, each distinct A row tile and B
    column tile once: the XCDs' L2s miss separately, but workgroups of one round stream a
    shared tile at about the same pace, so the Infinity Cache (one for all XCDs) serves every
    request after the first; of a tile the previous round read, it serves the share of that
    round's tiles it holds: all when they fit, else capacity / their bytes (a cache that sees a
    stream larger than itself again keeps about that share of it, not none). Plus D. The
    rounds of every launch are walked at once (round_tiles)."""
    gdx, gdy, gdz = grid
    d_bytes = output_bytes(m, n, gdz)
    footprint = operand_bytes(m, n, k_local, gdz)
    out = (d_bytes if warm else footprint + d_bytes).astype(float)
    big = np.flatnonzero(footprint > COST["mall_bytes"])
    if len(big) == 0:
        return out
    num_cu = int(COST["num_cu"])
    workgroups = (gdx * gdy * gdz)[big]
    rounds = -(-workgroups // num_cu)
    launch = np.repeat(np.arange(len(big)), rounds)
    first = np.cumsum(rounds) - rounds  # each launch's first position in the walk
    start = (np.arange(len(launch)) - first[launch]) * num_cu
    stop = np.minimum(workgroups[launch], start + num_cu)
    a, b, a_shared, b_shared = round_tiles(start, stop, gdx[big][launch], gdy[big][launch])
    row_bytes = k_local[big] * (FP4_BYTES_PER_K + SCALE_BYTES_PER_K)
    a_bytes = (np.minimum(tile_m, m[big]) * row_bytes)[launch]
    b_bytes = (tile_n * row_bytes)[launch]
    # the share of the previous round's tiles the Infinity Cache still holds (none before
    # a launch's first round, which shares no tile with a previous one)
    held = np.minimum(1.0, COST["mall_bytes"] / np.maximum(a * a_bytes + b * b_bytes, 1.0))
    held_before = np.where(start > 0, np.roll(held, 1), 0.0)
    fetched = (a - held_before * a_shared) * a_bytes + (b - held_before * b_shared) * b_bytes
    out[big] = np.bincount(launch, weights=fetched, minlength=len(big)) + d_bytes[big]
    return out


def round_tiles(start, stop, gdx, gdy):
    """(A row tiles, B column tiles, A tiles shared with the round before, B tiles shared)
    of the rounds of workgroups start..stop-1 (arrays, one element per round; the round
    before is start - num_cu .. start - 1). Workgroup id i (x fastest, then y, then the split
    z) reads A row tile z * gdy + y = i // gdx and B column tile z * gdx + x: a round's A
    tiles are one run of numbers, and its B tiles those of each split it spans, every column
    where a split's share of the round covers a row. Counted, never listed: the largest
    grids have 10^6 workgroups."""
    per_split = gdx * gdy
    a = (stop - 1) // gdx - start // gdx + 1
    a_shared = np.where((start > 0) & (start % gdx != 0), 1, 0)
    z_first, z_last = start // per_split, (stop - 1) // per_split
    head = np.minimum(stop, (z_first + 1) * per_split) - start
    tail = stop - z_last * per_split
    b = np.where(
        z_first == z_last,
        np.minimum(gdx, stop - start),
        np.minimum(gdx, head) + np.minimum(gdx, tail) + (z_last - z_first - 1) * gdx,
    )
    before = start - int(COST["num_cu"])
    z_prev = (start - 1) // per_split
    shared_split = (start > 0) & (z_prev == z_first)
    earlier = start - np.maximum(before, z_prev * per_split)  # the round before, in the split
    later = head  # this round, in the same split
    b_shared = np.where(
        shared_split,
        np.minimum(earlier, gdx) + np.minimum(later, gdx) - np.minimum(gdx, earlier + later),
        0,
    )
    return a, b, a_shared, b_shared


def hbm_share(l2_bytes, hbm_bytes):
    """The share of the bytes the workgroups move that HBM serves (scalars or arrays)."""
    return np.clip(np.divide(hbm_bytes, np.maximum(l2_bytes, 1.0)), 0.0, 1.0)


def effective_bytes_per_clk(cal: Calibration, share):
    """A CU's vector-memory rate when `share` of its bytes come from HBM and the rest from the
    L2: clocks per byte add up."""
    return 1.0 / ((1.0 - share) / cal.cu_vmem_bytes_per_clk + share / cal.cu_hbm_bytes_per_clk)


def bracket_bytes_per_clk(bpc) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices into SIM_BYTES_PER_CLK of the simulated rates around `bpc` (clamped to the
    grid) and the weight of the upper one, linear in clocks per byte."""
    grid = np.array(SIM_BYTES_PER_CLK)
    b = np.clip(np.asarray(bpc, dtype=float), grid[0], grid[-1])
    hi = np.clip(np.searchsorted(grid, b), 1, len(grid) - 1)
    lo = hi - 1
    weight = (1 / grid[lo] - 1 / b) / (1 / grid[lo] - 1 / grid[hi])
    return lo, hi, weight


def workgroups_and_rounds(geometry: LaunchGeometry) -> tuple[int, int]:
    """A launch's workgroups, and the rounds it takes with one workgroup per CU."""
    gdx, gdy, gdz = geometry.grid
    workgroups = gdx * gdy * gdz
    return workgroups, -(-workgroups // int(COST["num_cu"]))


def round_clocks(cal: Calibration, workgroups, activity=1.0):
    """(full rounds, workgroups of the last partial round, the full rounds' clock, the last
    round's clock), in GHz. MI355X's sustained clock falls with the power its CUs draw (AMD
    publishes no curve and the clocks cannot be locked): linear in the load, from
    cal.clock_light_ghz at none to cal.clock_ghz with every CU busy and its MFMA pipes
    saturated. A busy CU's load is cal.power_fixed_share (what it draws whatever its MFMA pipes
    do: memory traffic, LDS, issue) plus the rest in proportion to `activity`, the share of its
    cycles its busiest MFMA pipe works (the FP4 MFMA is the largest consumer); a round's load
    is that times its share of busy CUs. All three constants are calibrated; the line is
    assumed."""
    num_cu = COST["num_cu"]
    full = np.floor_divide(workgroups, num_cu)
    rest = workgroups - full * num_cu
    light = np.maximum(cal.clock_light_ghz, cal.clock_ghz)
    share = cal.power_fixed_share
    load = share + (1.0 - share) * np.clip(activity, 0.0, 1.0)
    full_clock = light - (light - cal.clock_ghz) * load
    last_clock = light - (light - cal.clock_ghz) * load * (rest / num_cu)
    return full, rest, full_clock, last_clock


#: The expected maximum of n independent standard normal values, n = 0 .. num_cu (Blom's
#: approximation, (n - 0.375) / (n + 0.25) quantile; 0 for one value or none).
EXPECTED_MAX = np.array(
    [0.0]
    + [NormalDist().inv_cdf((n - 0.375) / (n + 0.25)) for n in range(1, int(COST["num_cu"]) + 1)]
)


def slowest_cu_us(cal: Calibration, full, rest, cycles, full_clock, last_clock):
    """How much later than a typical CU the launch's slowest CU finishes (us): sqrt(rounds) x
    cal.workgroup_spread x one workgroup's time x the expected maximum of as many standard
    normal values as CUs run the most workgroups (those of a partial last round, else every
    CU). A launch of one workgroup waits for no other."""
    num_cu = COST["num_cu"]
    last = rest > 0
    racing = np.where(last, rest, num_cu).astype(int)
    clock = np.where(last, last_clock, full_clock)
    late = EXPECTED_MAX[racing] * np.sqrt(full + last)
    return cal.workgroup_spread * late * cycles / (clock * 1e3)


def combine(cal: Calibration, workgroups, cycles, l2_bytes, hbm_bytes, mfma_busy=None):
    """(time, compute, L2, HBM) in us from workgroups, workgroup cycles, the clocks its busiest
    MFMA pipe works (None: all of them) and bytes: the one formula, for scalars or numpy
    arrays alike (the fit evaluates it on every row at once)."""
    activity = 1.0 if mfma_busy is None else np.divide(mfma_busy, np.maximum(cycles, 1.0))
    full, rest, full_clock, last_clock = round_clocks(cal, workgroups, activity)
    compute_us = full * cycles / (full_clock * 1e3)
    compute_us = compute_us + np.where(rest > 0, cycles / (last_clock * 1e3), 0.0)
    compute_us = compute_us + slowest_cu_us(cal, full, rest, cycles, full_clock, last_clock)
    l2_us = l2_bytes / (cal.l2_tbps * 1e6)
    hbm_us = hbm_bytes / (cal.hbm_tbps * 1e6)
    memory_us = np.maximum(l2_us, hbm_us)
    p = cal.overlap_p
    us = cal.launch_us + (compute_us**p + memory_us**p) ** (1 / p)
    return us, compute_us, l2_us, hbm_us


def kernel_time(
    cal: Calibration,
    m,
    n,
    k,
    gdz,
    workgroups,
    wg: dict,
    hbm,
) -> dict:
    """Predicted time of launches of `workgroups` workgroups (gdz splits of K), given the
    workgroup's simulated cycles at its K (`wg`: cycles, mfma_busy and vmem_bytes, as in
    cu.WorkgroupCycles) and the bytes HBM serves; its D stores' clocks (store_clocks) are added
    to the workgroup's time. Scalars or arrays alike: Prediction's numeric fields, by name."""
    stores = store_clocks(cal, output_bytes(m, n, gdz) / workgroups)
    cycles = wg["cycles"] + stores
    us, compute_us, l2_us, hbm_us = combine(
        cal, workgroups, cycles, workgroups * wg["vmem_bytes"], hbm, wg["mfma_busy"]
    )
    return {
        "us": us,
        "tflops": tflops(m, n, k, us),
        "compute_us": compute_us,
        "memory_us": np.maximum(l2_us, hbm_us),
        "rounds": -(-workgroups // int(COST["num_cu"])),
        "workgroups": workgroups,
        "wg_cycles": cycles,
    }
