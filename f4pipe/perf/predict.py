"""Predicted time of any f4gemm kernel at any shape, ranked with its shape-edge safety.

A Predictor holds the KernelProfiles (profile.py: traces and simulated cycles) of a manifest
and answers shapes: one kernel, or every kernel ranked with its safety. Every prediction goes
through batch.predict_kernel, one row or many; this module adds what a single shape asks for:
the unit that bounds it, an edit's predicted change, a wait's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from f4pipe.aiter.manifest import KernelEntry, Manifest
from f4pipe.aiter.shaperules import check_shape, is_safe
from f4pipe.perf.batch import (
    as_prediction,
    bound_rows,
    predict_kernel,
    predict_rows,
    unit_savings_rows,
)
from f4pipe.perf.costs import Calibration, CalibrationFile, load_calibration
from f4pipe.perf.cu import simulate_workgroup
from f4pipe.perf.model import TRACE_KS, Prediction
from f4pipe.perf.profile import KernelProfile

MODEL_ID = "f4pipe-cu-8"  # bump when the model's structure changes


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
    few more simulations, so only where a label is shown). The batch path's one row."""
    check_shape(m, n, k, log2_k_split if profile.entry.splitk else 0)
    shape = [np.array([x]) for x in (m, n, k, log2_k_split)]
    row = predict_kernel(profile, *shape, cal, warm)
    bound = bound_rows(unit_savings_rows(profile, *shape, cal, warm))[0] if explain else None
    return as_prediction(profile.entry, (m, n, k, log2_k_split), row, 0, bound)


def unit_savings(
    profile: KernelProfile,
    m: int,
    n: int,
    k: int,
    log2_k_split: int,
    cal: Calibration,
    warm: bool = False,
) -> dict[str, float]:
    """batch.unit_savings_rows of one shape."""
    shape = [np.array([x]) for x in (m, n, k, log2_k_split)]
    return {u: float(v[0]) for u, v in unit_savings_rows(profile, *shape, cal, warm).items()}


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
        return self.rank_shapes([(m, n, k, kernels)], log2_k_split, warm, explain)[0]

    def rank_shapes(
        self,
        shapes: Sequence[tuple[int, int, int, list[KernelEntry] | None]],
        log2_k_split: int = 0,
        warm: bool = False,
        explain: bool = False,
    ) -> list[list[Ranked]]:
        """rank of every (M, N, K, kernels or None for all) in one pass of the batch path (a
        shape list of thousands costs a few numpy passes per kernel, not thousands)."""
        entries, rows, shape_of = [], [], []
        for i, (m, n, k, kernels) in enumerate(shapes):
            chosen = list(self.manifest) if kernels is None else kernels
            check_shape(m, n, k, log2_k_split if any(e.splitk for e in chosen) else 0)
            entries += chosen
            rows += [(m, n, k)] * len(chosen)
            shape_of += [i] * len(chosen)
        m, n, k = (np.array([r[j] for r in rows], dtype=np.int64) for j in range(3))
        got = predict_rows(self, entries, m, n, k, log2_k_split, warm, explain)
        preds: list[list[tuple[Prediction, bool]]] = [[] for _ in shapes]
        for row, (e, (a, b, c), i) in enumerate(zip(entries, rows, shape_of, strict=True)):
            p = got.prediction(row, e, (a, b, c, log2_k_split))
            preds[i].append((p, is_safe(e, a, b, c)))
        return [ranked(p) for p in preds]


def ranked(preds: list[tuple[Prediction, bool]]) -> list[Ranked]:
    """(prediction, safe) pairs as Ranked: the safe ones fastest first, then the unsafe ones
    (rank 0)."""
    safe = sorted((p for p in preds if p[1]), key=lambda p: p[0].us)
    unsafe = sorted((p for p in preds if not p[1]), key=lambda p: p[0].us)
    return [Ranked(p, True, i + 1) for i, (p, _) in enumerate(safe)] + [
        Ranked(p, False, 0) for p, _ in unsafe
    ]
