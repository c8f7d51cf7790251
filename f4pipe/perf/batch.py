"""Predictions for many (kernel, shape, split) rows at once: the one path `predict`, `predict
--shapes`, `audit-tuned --predict` and `tune` share.

The cycle model is the one predict.py and model.py describe; only its bookkeeping is done in
arrays. A row's workgroup cycles are a weighted sum of simulated points (traced K, the row
fractions of a partial tile on the 1/FRACTION_STEPS grid, the CU's vector-memory rate on
SIM_BYTES_PER_CLK): every row's points and weights are laid out at once, each distinct point is
simulated (or read from the cycle cache) once per kernel, and the rows gather their sums. The
launch formulas of model.py take arrays as they take scalars. So a tuned table's 35 kernels x
10,000 shapes cost a few numpy passes per kernel, not a Python walk per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from f4pipe.aiter.manifest import KernelEntry
from f4pipe.host.kernarg import grid_dims
from f4pipe.perf.costs import Calibration
from f4pipe.perf.cu import CU_UNITS, UNIT_SPEEDUP
from f4pipe.perf.model import (
    SIM_BYTES_PER_CLK,
    TRACE_KS,
    Prediction,
    bracket_bytes_per_clk,
    effective_bytes_per_clk,
    hbm_bytes_rows,
    hbm_share,
    kernel_time,
)
from f4pipe.perf.profile import FRACTION_STEPS, KernelProfile

if TYPE_CHECKING:
    from f4pipe.perf.predict import Predictor

#: The simulated fields a launch's time reads (cu.WorkgroupCycles).
GATHERED = ("cycles", "mfma_busy", "vmem_bytes")


@dataclass(frozen=True)
class Predictions:
    """Predicted times of rows (arrays of one length, in the rows' order)."""

    us: np.ndarray
    tflops: np.ndarray
    compute_us: np.ndarray
    memory_us: np.ndarray
    rounds: np.ndarray
    workgroups: np.ndarray
    wg_cycles: np.ndarray

    bound: np.ndarray | None = None  # what limits each row (bound_rows), where asked for

    def __len__(self) -> int:
        return len(self.us)

    def prediction(
        self, i: int, entry: KernelEntry, shape: tuple[int, int, int, int]
    ) -> Prediction:
        """Row i as a Prediction of `entry` at shape (M, N, K, log2_k_split)."""
        bound = None if self.bound is None else str(self.bound[i])
        return as_prediction(entry, shape, {f: getattr(self, f) for f in NUMERIC}, i, bound)


#: Prediction's fields the model computes (the rest name the row).
NUMERIC = ("us", "tflops", "compute_us", "memory_us", "rounds", "workgroups", "wg_cycles")


def as_prediction(
    entry: KernelEntry,
    shape: tuple[int, int, int, int],
    row: dict[str, np.ndarray],
    i: int,
    bound: str | None = None,
) -> Prediction:
    """Element i of predict_kernel's arrays as one Prediction."""
    m, n, k, log2_k_split = shape
    values = {f: row[f][i].item() for f in NUMERIC}
    values["rounds"], values["workgroups"] = int(values["rounds"]), int(values["workgroups"])
    return Prediction(
        kernel=entry.name, m=m, n=n, k=k, log2_k_split=log2_k_split, bound=bound, **values
    )


def predict_rows(
    predictor: Predictor,
    entries: Sequence[KernelEntry],
    m: Sequence[int] | np.ndarray,
    n: Sequence[int] | np.ndarray,
    k: Sequence[int] | np.ndarray,
    log2_k_split: Sequence[int] | np.ndarray | int = 0,
    warm: bool = False,
    explain: bool = False,
) -> Predictions:
    """Row i: `entries[i]` at (m[i], n[i], k[i]) with split log2_k_split[i] (or one split for
    every row), cold (aiter's tuner rotates its inputs) or `warm`; `explain`: name what limits
    each row too (bound_rows: six more predictions a row). Every shape must have passed
    shaperules.check_shape."""
    rows = len(entries)
    ms, ns, ks = (np.asarray(x, dtype=np.int64).reshape(-1) for x in (m, n, k))
    splits = np.broadcast_to(np.asarray(log2_k_split, dtype=np.int64), (rows,))
    if not len(ms) == len(ns) == len(ks) == rows:
        raise ValueError("entries, m, n and k must have one length")
    out = {f: np.zeros(rows) for f in NUMERIC}
    bound = np.full(rows, "", dtype=object) if explain else None
    kernels = {id(e): e for e in entries}  # by identity: a manifest's entries are shared
    which = np.array([id(e) for e in entries], dtype=np.int64)
    for key, entry in kernels.items():
        idx = np.flatnonzero(which == key)
        profile = predictor.profile(entry)
        shape = (ms[idx], ns[idx], ks[idx], splits[idx])
        with profile.saving_once():
            got = predict_kernel(profile, *shape, predictor.calibration, warm)
            if bound is not None:
                savings = unit_savings_rows(profile, *shape, predictor.calibration, warm)
                bound[idx] = bound_rows(savings)
        for f, values in got.items():
            out[f][idx] = values
    return Predictions(
        **{
            f: values.astype(np.int64) if f in ("rounds", "workgroups") else values
            for f, values in out.items()
        },
        bound=bound,
    )


def predict_kernel(
    profile: KernelProfile,
    m: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    log2_k_split: np.ndarray,
    cal: Calibration,
    warm: bool = False,
    faster: str | None = None,
) -> dict[str, np.ndarray]:
    """One kernel's rows, as predict.predict_profile computes each: Predictions' fields.
    `faster`: a CU unit run faster (predict.unit_savings)."""
    entry = profile.entry
    split = log2_k_split if entry.splitk else np.zeros_like(log2_k_split)
    gdx, gdy, gdz, k_local = grid_dims(entry.tile_m, entry.tile_n, m, n, k, split)
    split = np.where(gdz == 1, 0, split)  # a split that collapses runs the unsplit path
    fm = np.minimum(1.0, m / entry.tile_m)
    fn = np.minimum(1.0, n / entry.tile_n)
    workgroups = gdx * gdy * gdz
    hbm = hbm_bytes_rows(entry.tile_m, entry.tile_n, m, n, k_local, (gdx, gdy, gdz), warm)
    moved = workgroups * vmem_bytes_rows(profile, k_local, split, fm, fn)
    bpc = effective_bytes_per_clk(cal, hbm_share(moved, hbm))
    wg = cycles_rows(profile, k_local, split, fm, fn, bpc, cal, faster)
    return kernel_time(cal, m, n, k, gdz, workgroups, wg, hbm)


def unit_savings_rows(
    profile: KernelProfile,
    m: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    log2_k_split: np.ndarray,
    cal: Calibration,
    warm: bool = False,
) -> dict[str, np.ndarray]:
    """The microseconds each row's prediction loses when one limit at a time is
    cu.UNIT_SPEEDUP times faster: the launch overhead, HBM's and the L2's bandwidth (the whole
    part's), a CU's vector-memory path (its rates and its loaded latency), its MFMA pipes, its
    LDS. All in the one unit of the predicted time; the largest saving names what limits it
    (model card, "What bounds a prediction"). Units overlap, so the savings do not add up to
    the time."""
    s = UNIT_SPEEDUP
    shape = (m, n, k, log2_k_split)
    base = predict_kernel(profile, *shape, cal, warm)["us"]
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
        unit: base - predict_kernel(profile, *shape, c, warm)["us"]
        for unit, c in calibrations.items()
    }
    for unit in CU_UNITS:
        savings[unit] = base - predict_kernel(profile, *shape, cal, warm, unit)["us"]
    return savings


def bound_rows(savings: dict[str, np.ndarray]) -> np.ndarray:
    """Per row, the unit whose speed-up saves the most (the first of equals, in
    unit_savings_rows' order)."""
    units = list(savings)
    return np.array(units, dtype=object)[np.argmax(np.stack([savings[u] for u in units]), 0)]


def k_weights(k_local: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The traced Ks around each per-workgroup K and the upper one's weight (piecewise linear
    between them, linear past the largest, as model.interpolate_cycles): the weight is 0 at a
    traced K, whose point then stands alone."""
    traced = np.array(TRACE_KS)
    hi_at = np.clip(np.searchsorted(traced, k_local, side="right"), 1, len(traced) - 1)
    lo, hi = traced[hi_at - 1], traced[hi_at]
    t = (k_local - lo) / (hi - lo)
    exact = np.isin(k_local, traced)
    return np.where(exact, k_local, lo), hi, np.where(exact, 0.0, t)


def fraction_weights(frac: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """predict.fraction_points for arrays: the grid fractions around each and the upper one's
    weight (0 where the fraction is on the grid)."""
    scaled = frac * FRACTION_STEPS
    lo = np.floor(scaled)
    return lo / FRACTION_STEPS, (lo + 1) / FRACTION_STEPS, scaled - lo


def vmem_bytes_rows(
    profile: KernelProfile, k_local: np.ndarray, split: np.ndarray, fm: np.ndarray, fn: np.ndarray
) -> np.ndarray:
    """KernelProfile.vmem_bytes of every row: a trace's in-range bytes are its bytes of no
    operand plus fm x its bytes of A's side plus fn x its bytes of B's side."""
    lo, hi, t = k_weights(k_local)

    def at(x: np.ndarray) -> np.ndarray:
        sides = np.zeros((len(x), 3))
        for key in set(zip(x.tolist(), split.tolist(), strict=True)):
            rows = (x == key[0]) & (split == key[1])
            sides[rows] = profile.vmem_side_bytes(*key)
        return sides[:, 0] + fm * sides[:, 1] + fn * sides[:, 2]

    below = at(lo)
    return below + np.where(t != 0.0, (at(np.where(t != 0.0, hi, lo)) - below) * t, 0.0)


def cycles_rows(
    profile: KernelProfile,
    k_local: np.ndarray,
    split: np.ndarray,
    fm: np.ndarray,
    fn: np.ndarray,
    bpc: np.ndarray,
    cal: Calibration,
    faster: str | None = None,
) -> dict[str, np.ndarray]:
    """KernelProfile.cycles at each row's vector-memory rate: the GATHERED fields, each the
    weighted sum over the row's simulated points (traced K x fraction of A's rows x of B's
    rows x rate), every distinct point simulated once. A point is numbered (Point) so the
    distinct ones are found by one integer sort."""
    k_lo, k_hi, k_t = k_weights(k_local)
    m_lo, m_hi, m_t = fraction_weights(fm)
    n_lo, n_hi, n_t = fraction_weights(fn)
    r_lo, r_hi, r_t = bracket_bytes_per_clk(bpc)
    traced = np.array(TRACE_KS)
    axes = (
        ((np.searchsorted(traced, k_lo), 1.0 - k_t), (np.searchsorted(traced, k_hi), k_t)),
        ((m_lo, 1.0 - m_t), (m_hi, m_t)),
        ((n_lo, 1.0 - n_t), (n_hi, n_t)),
        ((r_lo, 1.0 - r_t), (r_hi, r_t)),
    )
    codes, weights, owners = [], [], []
    for (x, wx), (a, wa), (b, wb), (r, wr) in _corners(axes):
        w = wx * wa * wb * wr
        live = np.flatnonzero((wx != 0.0) & (wa != 0.0) & (wb != 0.0) & (wr != 0.0))
        codes.append(Point.number(x[live], split[live], a[live], b[live], r[live]))
        weights.append(w[live])
        owners.append(live)
    points, inverse = np.unique(np.concatenate(codes), return_inverse=True)
    values = np.array([_simulated(profile, Point.of(code), cal, faster) for code in points])
    weight = np.concatenate(weights)
    owner = np.concatenate(owners)
    return {
        field: np.bincount(owner, weights=weight * values[inverse, j], minlength=len(k_local))
        for j, field in enumerate(GATHERED)
    }


def _corners(axes):
    """Every combination of one end of each axis (2^4 corners)."""
    combos = [()]
    for ends in axes:
        combos = [(*c, end) for c in combos for end in ends]
    return combos


class Point:
    """A simulated point as one integer: the traced K's index, the split, A's and B's row
    fractions in steps of 1/FRACTION_STEPS, the rate's index in SIM_BYTES_PER_CLK."""

    SIZES = (len(TRACE_KS), 64, FRACTION_STEPS + 2, FRACTION_STEPS + 2, len(SIM_BYTES_PER_CLK))

    @classmethod
    def number(cls, k_at, split, fm, fn, rate_at) -> np.ndarray:
        code = np.zeros(len(k_at), dtype=np.int64)
        parts = (k_at, split, np.rint(fm * FRACTION_STEPS), np.rint(fn * FRACTION_STEPS), rate_at)
        for size, part in zip(cls.SIZES, parts, strict=True):
            code = code * size + part.astype(np.int64)
        return code

    @classmethod
    def of(cls, code: int) -> tuple[int, int, float, float, float]:
        """(traced K, split, A's fraction, B's fraction, rate) of a numbered point."""
        parts = []
        for size in reversed(cls.SIZES):
            code, part = divmod(int(code), size)
            parts.append(part)
        k_at, split, fm, fn, rate_at = reversed(parts)
        return (
            TRACE_KS[k_at],
            split,
            fm / FRACTION_STEPS,
            fn / FRACTION_STEPS,
            SIM_BYTES_PER_CLK[rate_at],
        )


def _simulated(
    profile: KernelProfile,
    point: tuple[int, int, float, float, float],
    cal: Calibration,
    faster: str | None,
) -> tuple[float, ...]:
    k_at, split, fm, fn, rate = point
    wg = profile.simulated(k_at, split, cal, (fm, fn), rate, faster)
    return tuple(float(getattr(wg, f)) for f in GATHERED)
