"""Predicted time of any f4gemm kernel at any shape: traces (cached), cycles, whole kernel.

A KernelProfile owns one kernel's executed paths (trace.py, one emulated workgroup per traced
K, cached on disk by the executed program's digest, so original and rebuilt objects with the
same decoded program share them) and its simulated workgroup cycles (cu.py, cached in memory
per calibration). A Predictor holds the profiles of a manifest and answers shapes: one kernel,
or every kernel ranked with its shape-edge safety.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from f4pipe.aiter.manifest import KernelEntry, Manifest
from f4pipe.aiter.shaperules import is_safe
from f4pipe.codeobj.program import Program, executed_digest
from f4pipe.core.cache import cache_root
from f4pipe.core.fsio import sha256_file, write_text
from f4pipe.host.kernarg import launch_geometry
from f4pipe.perf import trace as tracing
from f4pipe.perf.costs import COST, Calibration, CalibrationFile, load_calibration
from f4pipe.perf.cu import (
    CU_MODEL_VERSION,
    CU_UNITS,
    SIMULATED_COSTS,
    UNIT_SPEEDUP,
    Op,
    WorkgroupCycles,
    decode_ops,
    simulate_workgroup,
    workgroup_vmem_bytes,
)
from f4pipe.perf.model import (
    SIM_BYTES_PER_CLK,
    TRACE_KS,
    Prediction,
    bracket_bytes_per_clk,
    effective_bytes_per_clk,
    hbm_bytes,
    hbm_share,
    interpolate_cycles,
    kernel_time,
    workgroups_and_rounds,
)

log = logging.getLogger(__name__)

MODEL_ID = "f4pipe-cu-8"  # bump when the model's structure changes


def trace_cache_dir() -> Path:
    return cache_root() / "perf" / "traces"


def program_digest(co_path: Path, symbol: str) -> str | None:
    """executed_digest of a code object, remembered on disk by the file's sha256 (decoding a
    kernel to digest it costs a third of a second; hashing its file, a millisecond)."""
    path = trace_cache_dir() / "digests.json"
    key = f"{sha256_file(co_path)}:{symbol}"
    try:
        known = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    digest = executed_digest(co_path, symbol)
    if digest is not None:
        known[key] = digest
        try:
            write_text(path, json.dumps(known))
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)
    return digest


class KernelProfile:
    """One kernel's paths and simulated cycles."""

    def __init__(self, entry: KernelEntry, co_path: Path) -> None:
        self.entry = entry
        self.co_path = Path(co_path)
        self.digest = program_digest(self.co_path, entry.symbol)
        self._ops: dict[int, Op] | None = None
        self._traces: dict[tuple[int, int], tracing.WorkgroupTrace] = {}
        self._cycles: dict[tuple, WorkgroupCycles] = {}
        self._disk: dict[str, dict] | None = None

    @property
    def ops(self) -> dict[int, Op]:
        if self._ops is None:
            self._ops = decode_ops(Program.load(self.co_path, self.entry.symbol))
        return self._ops

    def trace(self, k_local: int, log2_k_split: int = 0) -> tracing.WorkgroupTrace:
        key = (k_local, log2_k_split)
        if key not in self._traces:
            self._traces[key] = self._load_or_record(k_local, log2_k_split)
        return self._traces[key]

    def _load_or_record(self, k_local: int, log2_k_split: int) -> tracing.WorkgroupTrace:
        path = None
        if self.digest is not None:
            name = tracing.cache_key(self.digest, k_local, log2_k_split)
            path = trace_cache_dir() / f"{name}.npz"
            if path.is_file():
                try:
                    return tracing.load_trace(path)
                except (OSError, ValueError, KeyError):
                    log.warning("ignoring unreadable trace cache %s", path)
        tr = tracing.record_workgroup(self.entry, self.co_path, k_local, log2_k_split)
        if path is not None:
            tracing.save_trace(tr, path)
        return tr

    def simulated(
        self,
        k_local: int,
        log2_k_split: int,
        cal: Calibration,
        fracs: tuple[float, float],
        bytes_per_clk: float | None = None,
        faster: str | None = None,
    ) -> WorkgroupCycles:
        """Simulated cycles at a traced K, with the operands' row fractions `fracs`, the CU's
        vector-memory path at `bytes_per_clk` (default: the L2-served rate), and `faster`
        (cu.CU_UNITS) the unit run faster to find which one limits a prediction."""
        bpc = cal.cu_vmem_bytes_per_clk if bytes_per_clk is None else float(bytes_per_clk)
        key: tuple = (k_local, log2_k_split, cal.vmem_latency, bpc, fracs)
        if faster is not None:
            key = (*key, faster)
        if key not in self._cycles:
            stored = self._stored_cycles().get(repr(key))
            if stored is not None:
                self._cycles[key] = WorkgroupCycles(**stored)
            else:
                tr = self.trace(k_local, log2_k_split)
                self._cycles[key] = simulate_workgroup(
                    self.ops, tr, cal.vmem_latency, bpc, *fracs, faster=faster
                )
                self._store_cycles(repr(key), self._cycles[key])
        return self._cycles[key]

    def _cycles_path(self) -> Path | None:
        """Simulated cycles, cached on disk beside the traces: they depend only on the traced
        path, the timing table's rows the simulation reads, the CU model and the key's
        constants (all in the name)."""
        if self.digest is None:
            return None
        table = repr([(row, COST[row]) for row in SIMULATED_COSTS])
        name = hashlib.sha256(f"{self.digest}:{CU_MODEL_VERSION}:{table}".encode()).hexdigest()
        return trace_cache_dir() / f"cycles-{name[:32]}.json"

    def _stored_cycles(self) -> dict[str, dict]:
        if self._disk is None:
            self._disk = {}
            path = self._cycles_path()
            if path is not None and path.is_file():
                try:
                    self._disk = json.loads(path.read_text())
                except (OSError, ValueError):
                    log.warning("ignoring unreadable cycle cache %s", path)
        return self._disk

    def _store_cycles(self, key: str, wg: WorkgroupCycles) -> None:
        path = self._cycles_path()
        if path is None:
            return
        self._stored_cycles()[key] = asdict(wg)
        try:
            write_text(path, json.dumps(self._disk))
        except OSError as exc:  # a read-only cache only costs time
            log.warning("cannot write the cycle cache %s: %s", path, exc)

    def row_fractions(self, m: int, n: int) -> tuple[float, float]:
        """The share of the tile's A rows and B rows a launch of M x N really has when it is a
        single partial tile in that dimension (1 otherwise)."""
        e = self.entry
        return min(1.0, m / e.tile_m), min(1.0, n / e.tile_n)

    def cycles(
        self,
        k_local: int,
        log2_k_split: int,
        cal: Calibration,
        fracs: tuple[float, float] = (1.0, 1.0),
        bytes_per_clk: float | None = None,
        faster: str | None = None,
    ) -> WorkgroupCycles:
        """Workgroup cycles at any per-workgroup K: simulated at the traced Ks around it and
        interpolated (linear in K beyond the largest: the main loop repeats). With
        `bytes_per_clk`, simulated at the rates of SIM_BYTES_PER_CLK around it and interpolated
        in clocks per byte; a partial tile's row fractions, simulated at the multiples of
        1/FRACTION_STEPS around them and interpolated linearly (so a few simulations serve
        every shape, and no kernel is charged rows it does not have)."""
        parts = [
            (wm * wn, self._at_rate(k_local, log2_k_split, cal, (fm, fn), bytes_per_clk, faster))
            for fm, wm in fraction_points(fracs[0])
            for fn, wn in fraction_points(fracs[1])
        ]
        return weighted_cycles(parts)

    def _at_rate(
        self, k_local, log2_k_split, cal, fracs, bytes_per_clk, faster=None
    ) -> WorkgroupCycles:
        if bytes_per_clk is None:
            return self._at_k(k_local, log2_k_split, cal, fracs, None, faster)
        lo, hi, weight = bracket_bytes_per_clk(bytes_per_clk)
        a = self._at_k(k_local, log2_k_split, cal, fracs, SIM_BYTES_PER_CLK[int(lo)], faster)
        b = self._at_k(k_local, log2_k_split, cal, fracs, SIM_BYTES_PER_CLK[int(hi)], faster)
        return blend_cycles(a, b, float(weight))

    def _at_k(self, k_local, log2_k_split, cal, fracs, bpc, faster=None) -> WorkgroupCycles:
        points = {
            x: self.simulated(x, log2_k_split, cal, fracs, bpc, faster)
            for x in _traced_ks_around(k_local)
        }
        if k_local in points:
            return points[k_local]
        values = {}
        for f in fields(WorkgroupCycles):
            series = {x: float(getattr(p, f.name)) for x, p in points.items()}
            values[f.name] = interpolate_cycles(series, k_local)
        values["mfma_count"] = round(values["mfma_count"])
        return WorkgroupCycles(**values)

    def vmem_bytes(self, k_local: int, log2_k_split: int, fracs: tuple[float, float]) -> float:
        """Bytes one workgroup's buffer accesses move at per-workgroup K (from the traces:
        linear in K between and beyond the traced Ks)."""
        points = {
            x: workgroup_vmem_bytes(self.trace(x, log2_k_split), *fracs)
            for x in _traced_ks_around(k_local)
        }
        return interpolate_cycles(points, k_local) if k_local not in points else points[k_local]


def _traced_ks_around(k_local: int) -> list[int]:
    if k_local in TRACE_KS:
        return [k_local]
    if k_local < TRACE_KS[-1]:
        return [max(x for x in TRACE_KS if x < k_local), min(x for x in TRACE_KS if x > k_local)]
    return list(TRACE_KS[-2:])


def blend_cycles(a: WorkgroupCycles, b: WorkgroupCycles, weight: float) -> WorkgroupCycles:
    """(1 - weight) a + weight b, field by field."""
    return weighted_cycles([(1 - weight, a), (weight, b)])


def weighted_cycles(parts: list[tuple[float, WorkgroupCycles]]) -> WorkgroupCycles:
    """The weighted sum of workgroup cycles (weights summing to 1), field by field."""
    if len(parts) == 1:
        return parts[0][1]
    values = {
        f.name: sum(w * float(getattr(c, f.name)) for w, c in parts)
        for f in fields(WorkgroupCycles)
    }
    values["mfma_count"] = round(values["mfma_count"])
    return WorkgroupCycles(**values)


def predict_profile(
    profile: KernelProfile,
    m: int,
    n: int,
    k: int,
    log2_k_split: int,
    cal: Calibration,
    warm: bool = False,
    explain: bool = False,
) -> Prediction:
    """One kernel's predicted time at a shape; `warm`: A and B already in the Infinity Cache
    (launches repeated on the same buffers), else cold as aiter's tuner times (rotated
    copies). `explain`: also name what limits it (Prediction.bound, from unit_savings: a
    few more simulations, so only where a label is shown)."""
    p = _predicted(profile, m, n, k, log2_k_split, cal, warm)
    if not explain:
        return p
    savings = unit_savings(profile, m, n, k, log2_k_split, cal, warm)
    return replace(p, bound=max(savings, key=lambda unit: savings[unit]))


def unit_savings(
    profile: KernelProfile,
    m: int,
    n: int,
    k: int,
    log2_k_split: int,
    cal: Calibration,
    warm: bool = False,
) -> dict[str, float]:
    """The microseconds a prediction loses when one limit at a time is cu.UNIT_SPEEDUP times
    faster: the launch overhead, HBM's and the L2's bandwidth (the whole part's), a CU's
    vector-memory path (its rates and its loaded latency), its MFMA pipes, its LDS. All in the
    one unit of the predicted time; the largest saving names what limits it (model card,
    "What bounds a prediction"). Units overlap, so the savings do not add up to the time."""
    s = UNIT_SPEEDUP
    base = _predicted(profile, m, n, k, log2_k_split, cal, warm).us
    calibrations = {
        "launch": replace(cal, launch_us=cal.launch_us / s),
        "HBM": replace(cal, hbm_tbps=cal.hbm_tbps * s),
        "L2": replace(cal, l2_tbps=cal.l2_tbps * s),
        "VMEM": replace(
            cal,
            cu_vmem_bytes_per_clk=cal.cu_vmem_bytes_per_clk * s,
            cu_hbm_bytes_per_clk=cal.cu_hbm_bytes_per_clk * s,
            vmem_latency=cal.vmem_latency / s,
        ),
    }
    savings = {
        unit: base - _predicted(profile, m, n, k, log2_k_split, c, warm).us
        for unit, c in calibrations.items()
    }
    for unit in CU_UNITS:
        savings[unit] = base - _predicted(profile, m, n, k, log2_k_split, cal, warm, unit).us
    return savings


def _predicted(
    profile: KernelProfile,
    m: int,
    n: int,
    k: int,
    log2_k_split: int,
    cal: Calibration,
    warm: bool,
    faster: str | None = None,
) -> Prediction:
    """predict_profile's time (bound left unnamed); `faster`: a CU unit run faster."""
    entry = profile.entry
    split = log2_k_split if entry.splitk else 0
    geometry = launch_geometry(entry.tile_m, entry.tile_n, m, n, k, split)
    if geometry.gdz == 1:
        split = 0  # a split that collapses runs the unsplit path
    fracs = profile.row_fractions(m, n)
    workgroups, _rounds = workgroups_and_rounds(geometry)
    hbm = hbm_bytes(entry.tile_m, entry.tile_n, m, n, geometry.k_per_tg, geometry.grid, warm)
    moved = workgroups * profile.vmem_bytes(geometry.k_per_tg, split, fracs)
    bpc = effective_bytes_per_clk(cal, hbm_share(moved, hbm))
    wg = profile.cycles(geometry.k_per_tg, split, cal, fracs, bpc, faster)
    return kernel_time(entry, m, n, k, split, geometry, wg, cal, hbm)


def reference_shape(entry: KernelEntry) -> tuple[int, int, int]:
    """The shape `try` reports an edit's predicted time at: one full round of 256 workgroups
    (16 x 16 tiles) at K = 8192, where the main loop dominates."""
    return 16 * entry.tile_m, 16 * entry.tile_n, 8192


@dataclass(frozen=True)
class PredictedChange:
    """An edit's predicted effect: cycles per 256 of K (one main-loop step of K; the slope
    between the traced K = 1024 and 2048), the launch's time at the reference shape, and the
    unit that bounds it; before and after."""

    shape: tuple[int, int, int]
    loop_cycles: tuple[float, float]
    us: tuple[float, float]
    bound: tuple[str, str]
    calibration_id: str

    def render(self) -> str:
        (c0, c1), (u0, u1) = self.loop_cycles, self.us
        m, n, k = self.shape
        pct = (u1 / u0 - 1) * 100
        return (
            f"PREDICTED (cycle model, calibration {self.calibration_id}; not measured): "
            f"main loop {c0:.0f} -> {c1:.0f} clk per 256 of K; "
            f"M={m} N={n} K={k}: {u0:.1f} -> {u1:.1f} us ({pct:+.1f} %), "
            f"bound {self.bound[0]} -> {self.bound[1]}"
        )


def predicted_change(
    entry: KernelEntry, original_co: Path, edited_co: Path, cal: CalibrationFile | None = None
) -> PredictedChange:
    """Predict the original and the edited object of one kernel at its reference shape."""
    calfile = cal or load_calibration()
    c = calfile.calibration
    shape = reference_shape(entry)
    loops, times, bounds = [], [], []
    for co in (original_co, edited_co):
        profile = KernelProfile(entry, co)
        lo, hi = TRACE_KS[-2], TRACE_KS[-1]
        slope = (
            profile.simulated(hi, 0, c, (1.0, 1.0)).cycles
            - profile.simulated(lo, 0, c, (1.0, 1.0)).cycles
        )
        loops.append(slope * 256 / (hi - lo))
        p = predict_profile(profile, *shape, 0, c, explain=True)
        times.append(p.us)
        bounds.append(p.bound)
    return PredictedChange(
        shape=shape,
        loop_cycles=(loops[0], loops[1]),
        us=(times[0], times[1]),
        bound=(bounds[0], bounds[1]),
        calibration_id=calfile.calibration_id,
    )


def wait_change_cycles(
    profile: KernelProfile,
    limits: dict[int, tuple[int, int]],
    cal: Calibration | None = None,
    k_local: int = TRACE_KS[-1],
) -> tuple[float, float]:
    """A full-tile workgroup's predicted cycles at `k_local` before and after the s_waitcnt at
    each pc takes new (vmcnt, lgkmcnt) limits: same path (a wait changes no branch), same
    timing table; only when each wait releases the wave changes."""
    c = cal or load_calibration().calibration
    before = profile.simulated(k_local, 0, c, (1.0, 1.0)).cycles
    ops = dict(profile.ops)
    for pc, (vm, lgkm) in limits.items():
        ops[pc] = replace(ops[pc], wait_vm=vm, wait_lgkm=lgkm)
    trace = profile.trace(k_local)
    after = simulate_workgroup(ops, trace, c.vmem_latency, c.cu_vmem_bytes_per_clk).cycles
    return before, after


#: A partial tile's row fractions are simulated at multiples of 1 / FRACTION_STEPS.
FRACTION_STEPS = 32


def fraction_points(frac: float) -> list[tuple[float, float]]:
    """The simulated row fractions around `frac` with their linear interpolation weights."""
    scaled = frac * FRACTION_STEPS
    lo = int(scaled)
    if scaled == lo:
        return [(frac, 1.0)]
    weight = scaled - lo
    return [(lo / FRACTION_STEPS, 1.0 - weight), ((lo + 1) / FRACTION_STEPS, weight)]


@dataclass(frozen=True)
class Ranked:
    prediction: Prediction
    safe: bool
    rank: int  # 1 = predicted fastest among safe kernels (0 = unsafe, not ranked)


class Predictor:
    """Predictions for the kernels of one manifest under one calibration."""

    def __init__(self, manifest: Manifest, calibration: CalibrationFile | None = None) -> None:
        self.manifest = manifest
        self.calibration_file = calibration or load_calibration()
        self.calibration = self.calibration_file.calibration
        self.profiles: dict[str, KernelProfile] = {}

    model_id = MODEL_ID

    @property
    def calibration_id(self) -> str:
        return self.calibration_file.calibration_id

    def profile(self, entry: KernelEntry) -> KernelProfile:
        if entry.name not in self.profiles:
            self.profiles[entry.name] = KernelProfile(entry, self.manifest.co_path(entry))
        return self.profiles[entry.name]

    def predict(
        self,
        entry: KernelEntry,
        m: int,
        n: int,
        k: int,
        log2_k_split: int = 0,
        warm: bool = False,
        explain: bool = False,
    ) -> Prediction:
        """`explain`: name what limits the time too (predict_profile)."""
        return predict_profile(
            self.profile(entry), m, n, k, log2_k_split, self.calibration, warm, explain
        )

    def rank(
        self,
        m: int,
        n: int,
        k: int,
        log2_k_split: int = 0,
        kernels: list[KernelEntry] | None = None,
        warm: bool = False,
        explain: bool = False,
    ) -> list[Ranked]:
        """Every kernel (or `kernels`) at the shape, safe ones ranked fastest first, then the
        unsafe ones (rank 0)."""
        entries = list(self.manifest) if kernels is None else kernels
        preds = [
            (self.predict(e, m, n, k, log2_k_split, warm, explain), is_safe(e, m, n, k))
            for e in entries
        ]
        safe = sorted((p for p in preds if p[1]), key=lambda p: p[0].us)
        unsafe = sorted((p for p in preds if not p[1]), key=lambda p: p[0].us)
        ranked = [Ranked(p, True, i + 1) for i, (p, _) in enumerate(safe)]
        return ranked + [Ranked(p, False, 0) for p, _ in unsafe]
