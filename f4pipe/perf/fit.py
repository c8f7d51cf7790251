"""Fit the cycle model's global constants on real MI355X timings, and measure its accuracy.

Calibration data, and only this (other public measurements are kept back to check the model
independently): the asm rows of aiter's tuned table in the fetched aiter
(`aiter/configs/a4w4_blockscale_tuned_gemm.csv`: cu_num 256, aiter's profiler kernel time with
rotated inputs) and the seed driver's 4 MI355X shapes (hipEvents, warm caches). Each row is
one (M, N, K, kernel, measured us).

A CU's vector-memory bytes per clock for L2-served bytes is chosen on a grid (the loaded VMEM
round trip is fixed at its measured ~1,000 clk, LATENCY_GRID); workgroups are simulated once
per latency and per rate of model.SIM_BYTES_PER_CLK, and a row's own rate (its mix of L2- and
HBM-served bytes) is interpolated between them. The other nine constants (clocks and the
fixed share of a busy CU's load, a CU's rate for HBM-served bytes, bandwidths, launch,
overlap, a workgroup's spread from CU to CU) are fitted by robust least squares on
log(predicted / measured) at each grid point. The seed's rows are warm (its launches repeat on
the same buffers), aiter's cold (rotated copies). Out-of-sample accuracy refits on the same
grid with the held-out rows removed: k-fold over (N, K) groups, and leave-one-kernel-out.

`python -m f4pipe.perf.fit [--f4gemm-dir DIR]` fits and rewrites calibration.json;
research/f4research/accuracy.py reports the committed calibration's accuracy.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from f4pipe.aiter.manifest import Manifest, read_manifest
from f4pipe.aiter.tuned import read_tuned
from f4pipe.host.kernarg import launch_geometry
from f4pipe.perf.costs import (
    CALIBRATION_PATH,
    DEFAULT_CALIBRATION,
    ERROR_BAND,
    HELD_BACK,
    M_RANGES,
    PER_KERNEL,
    UNTIMED_KERNEL_BAND,
    Calibration,
    CalibrationFile,
)
from f4pipe.perf.model import (
    SIM_BYTES_PER_CLK,
    bracket_bytes_per_clk,
    combine,
    effective_bytes_per_clk,
    hbm_bytes,
    hbm_share,
    store_clocks,
    workgroup_output_bytes,
    workgroups_and_rounds,
)
from f4pipe.perf.predict import MODEL_ID, Predictor

#: The seed driver's MI355X table (its README: 256 CU, hipEvents, --iters 50).
SEED_MEASURED = (
    (8192, 8192, 8192, "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256", 259.0),
    (2048, 8192, 8192, "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256", 64.4),
    (4096, 4096, 4096, "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256", 33.5),
    (128, 16384, 16384, "f4gemm_bf16_per1x32Fp4_BpreShuffle_96x640", 70.2),
)
MAIN_TABLE = "a4w4_blockscale_tuned_gemm.csv"
#: Real MI355X timings of the same code objects from aiter's later tuning sessions, never fitted
#: on: scripts/aiter_heldback_rows.py reads them from aiter's git history. The fit reports its
#: accuracy on them (calibration.json, "held_back"); research/f4research/heldback.py in full.
HELDBACK_PATH = Path(__file__).with_name("heldback_rows.csv")
#: The loaded VMEM round trip is not fitted: it is GT's measured ~1,000 clk (costs.py). Fitted
#: on a grid as well, it traded against the clock whenever a dominant kernel was held out.
LATENCY_GRID = (1000.0,)
#: The grid of a CU's vector-memory rate for L2-served bytes (it changes simulated cycles).
VMEM_BPC_GRID = (32.0, 40.0, 48.0, 64.0, 96.0)
FOLDS = 5


def main_table(f4gemm_dir: Path) -> Path:
    return f4gemm_dir.parent / "configs" / MAIN_TABLE


def measured_rows(f4gemm_dir: Path, manifest: Manifest) -> pd.DataFrame:
    """Columns m, n, k, kernel (.co name), us, source ('aiter' / 'seed'), warm."""
    table = read_tuned(main_table(f4gemm_dir))
    by_symbol = {e.symbol: e.name for e in manifest}
    asm = table[table["kernelName"].isin(by_symbol) & (table["cu_num"] == 256)]
    asm = asm[asm["splitK"] == 0]
    rows = pd.DataFrame(
        {
            "m": asm["M"].astype(int),
            "n": asm["N"].astype(int),
            "k": asm["K"].astype(int),
            "kernel": asm["kernelName"].map(by_symbol),
            "us": asm["us"].astype(float),
            "source": "aiter",
        }
    )
    rows["warm"] = False  # aiter's tuner rotates input copies: caches roughly cold
    seed = pd.DataFrame(SEED_MEASURED, columns=["m", "n", "k", "kernel", "us"])
    seed["source"] = "seed"
    seed["warm"] = True  # hipEvents around launches repeated on the same buffers
    return pd.concat([rows, seed], ignore_index=True)


def held_back_rows(path: Path = HELDBACK_PATH) -> pd.DataFrame:
    """The held-back rows without a split (aiter times a split launch together with zeroing D,
    which the model does not predict): columns m, n, k, kernel, us, table, commit, date,
    shape_in_calibration, every_kernel_raced."""
    rows = pd.read_csv(path)
    return rows[rows["splitK"] == 0].reset_index(drop=True)


def held_back_accuracy(predictor: Predictor, cal: Calibration) -> dict[str, dict[str, float]]:
    """`cal`'s error on the held-back rows at shapes the calibration has not seen, per M range:
    what to expect of a shape and a tuning session the fit never saw."""
    rows = held_back_rows()
    rows = rows[~rows["shape_in_calibration"]].reset_index(drop=True)
    rows["warm"] = False
    d = design(predictor, rows, list(rows["kernel"]), (cal.vmem_latency,))
    return by_range(predict_design(cal, d), rows)


def data_digest(rows: pd.DataFrame) -> str:
    text = rows[["m", "n", "k", "kernel", "us", "source"]].to_csv(index=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Design:
    """Per (row, kernel): the calibration-free parts of the launch time, and the workgroup
    cycles at each latency of the grid and each rate of model.SIM_BYTES_PER_CLK."""

    workgroups: np.ndarray
    l2: np.ndarray
    hbm: np.ndarray
    cycles: dict[float, np.ndarray]  # latency -> rows x SIM_BYTES_PER_CLK
    mfma_busy: np.ndarray  # clocks the busiest MFMA pipe works (the same at every rate)
    d_bytes: np.ndarray  # the bytes of D each workgroup stores (on average over the launch)

    @property
    def share(self) -> np.ndarray:
        return hbm_share(self.l2, self.hbm)


#: A model over a Design: (constants, design, row indices) -> predicted us per row.
PredictDesign = Callable[[Calibration, "Design", "np.ndarray | slice"], np.ndarray]


def design(
    predictor: Predictor,
    shapes: pd.DataFrame,
    kernels: Sequence[str],
    latencies: Sequence[float],
) -> Design:
    """The Design of `shapes` (m, n, k, and warm: True for launches repeated on the same
    buffers) with `kernels` (one .co name per row)."""
    n = len(shapes)
    hbm = np.zeros(n)
    moved = np.zeros(n)
    klocal = np.zeros(n, dtype=np.int64)
    workgroups = np.zeros(n)
    d_bytes = np.zeros(n)
    fracs = []
    entries = [predictor.manifest.get(name) for name in kernels]
    warm = shapes["warm"] if "warm" in shapes else [False] * n
    for i, (m, nn, k, e, w) in enumerate(
        zip(shapes["m"], shapes["n"], shapes["k"], entries, warm, strict=True)
    ):
        g = launch_geometry(e.tile_m, e.tile_n, int(m), int(nn), int(k))
        workgroups[i], _rounds = workgroups_and_rounds(g)
        d_bytes[i] = workgroup_output_bytes(int(m), int(nn), g)
        hbm[i] = hbm_bytes(e.tile_m, e.tile_n, int(m), int(nn), g.k_per_tg, g.grid, bool(w))
        klocal[i] = g.k_per_tg
        fracs.append(predictor.profile(e).row_fractions(int(m), int(nn)))
        moved[i] = predictor.profile(e).vmem_bytes(g.k_per_tg, 0, fracs[-1])
    cycles = {}
    mfma_busy = np.zeros(n)
    base = predictor.calibration
    for lat in latencies:
        cal = Calibration(**{**asdict(base), "vmem_latency": lat})
        grid = [
            [predictor.profile(e).cycles(int(kl), 0, cal, fr, bpc) for bpc in SIM_BYTES_PER_CLK]
            for e, kl, fr in zip(entries, klocal, fracs, strict=True)
        ]
        cycles[lat] = np.array([[wg.cycles for wg in row] for row in grid])
        mfma_busy = np.array([row[0].mfma_busy for row in grid])  # the same at every rate
    return Design(
        workgroups=workgroups,
        l2=workgroups * moved,
        hbm=hbm,
        cycles=cycles,
        mfma_busy=mfma_busy,
        d_bytes=d_bytes,
    )


#: The closed-form constants, in the order the optimizer sees them (log-transformed; the light
#: clock as its excess over the full-load clock, so it is never the lower one).
FREE = (
    "clock_ghz",
    "clock_light_ghz",
    "cu_hbm_bytes_per_clk",
    "hbm_tbps",
    "l2_tbps",
    "launch_us",
    "overlap_p",
    "power_fixed_share",
    "workgroup_spread",
)
#: Bounds of the closed-form constants: physical limits, so the fit cannot buy accuracy with
#: an impossible machine (WP: a clock above the 2.4 GHz peak, HBM above its 8 TB/s peak, the
#: L2s above 16 channels x 128 B/clk x 8 XCDs at 2.4 GHz = 39.3 TB/s); a CU's rate for HBM
#: bytes within the simulated rates; a share within 0 and 1; a workgroup's spread under 20 %.
LOWER = (0.5, 0.001, SIM_BYTES_PER_CLK[0], 1.0, 1.0, 0.1, 0.01, 0.001, 0.0001)
UPPER = (2.4, 1.9, SIM_BYTES_PER_CLK[-1], 8.0, 39.3, 20.0, 50.0, 1.0, 0.2)


def _calibration(x: np.ndarray, lat: float, bpc: float) -> Calibration:
    v = dict(zip(FREE, np.exp(x), strict=True))
    v["clock_light_ghz"] = min(2.4, v["clock_ghz"] + v["clock_light_ghz"])
    v["overlap_p"] = 1.0 + v["overlap_p"]  # p >= 1: a norm
    return Calibration(vmem_latency=lat, cu_vmem_bytes_per_clk=bpc, **v)


def _x0() -> np.ndarray:
    d = DEFAULT_CALIBRATION
    return np.log(
        [
            d.clock_ghz,
            d.clock_light_ghz - d.clock_ghz,
            d.cu_hbm_bytes_per_clk,
            d.hbm_tbps,
            d.l2_tbps,
            d.launch_us,
            d.overlap_p - 1.0,
            d.power_fixed_share,
            d.workgroup_spread,
        ]
    )


def predict_design(cal: Calibration, d: Design, idx: np.ndarray | slice = slice(None)):
    return design_time(cal, d, idx, design_cycles(cal, d, idx))


def design_cycles(
    cal: Calibration, d: Design, idx: np.ndarray | slice, bytes_per_clk: np.ndarray | None = None
) -> np.ndarray:
    """Each row's workgroup cycles: simulated_cycles and its D stores (model.store_clocks),
    as model.kernel_time adds them."""
    return simulated_cycles(cal, d, idx, bytes_per_clk) + store_clocks(cal, d.d_bytes[idx])


def simulated_cycles(
    cal: Calibration, d: Design, idx: np.ndarray | slice, bytes_per_clk: np.ndarray | None = None
) -> np.ndarray:
    """Each row's simulated workgroup cycles at its vector-memory rate (default: its mix of
    L2- and HBM-served bytes), interpolated between the simulated rates."""
    table = d.cycles[cal.vmem_latency][idx]
    if bytes_per_clk is None:
        bytes_per_clk = effective_bytes_per_clk(cal, d.share[idx])
    lo, hi, weight = bracket_bytes_per_clk(bytes_per_clk)
    rows = np.arange(len(table))
    return (1 - weight) * table[rows, lo] + weight * table[rows, hi]


def design_time(
    cal: Calibration,
    d: Design,
    idx: np.ndarray | slice,
    cycles: np.ndarray,
    mfma_busy: np.ndarray | None = None,
) -> np.ndarray:
    """Each row's launch time (us) from its workgroup cycles (model.combine); `mfma_busy`:
    the clocks that set its MFMA activity (default: the simulated ones)."""
    busy = d.mfma_busy[idx] if mfma_busy is None else mfma_busy
    us, *_ = combine(cal, d.workgroups[idx], cycles, d.l2[idx], d.hbm[idx], busy)
    return us


def fit_constants(
    d: Design,
    measured: np.ndarray,
    idx: np.ndarray,
    predict: PredictDesign | None = None,
    l2_rates: Sequence[float] = VMEM_BPC_GRID,
) -> tuple[Calibration, float]:
    """The best constants on rows `idx`: every grid point, closed-form constants by robust
    least squares on log error; the grid point with the lowest robust cost wins. `predict`
    and `l2_rates`: the model to fit and its grid of a CU's L2 rates (default predict_design
    on VMEM_BPC_GRID; research/f4research/variants.py passes others)."""
    predict = predict or predict_design
    from scipy.optimize import least_squares

    best: tuple[Calibration, float] | None = None
    y = np.log(measured[idx])
    for lat, bpc in grid_points(l2_rates):

        def resid(x, lat=lat, bpc=bpc):
            return np.log(predict(_calibration(x, lat, bpc), d, idx)) - y

        res = least_squares(
            resid,
            _x0(),
            bounds=(np.log(LOWER), np.log(UPPER)),
            loss="soft_l1",
            f_scale=0.05,
            max_nfev=400,
        )
        if best is None or res.cost < best[1]:
            best = (_calibration(res.x, lat, bpc), float(res.cost))
    assert best is not None
    return best


def error_summary(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    """Median, p90 and mean absolute percentage error."""
    ape = np.abs(pred / meas - 1.0) * 100
    return {
        "rows": len(ape),
        "median_pct": round(float(np.median(ape)), 2) if len(ape) else float("nan"),
        "p90_pct": round(float(np.percentile(ape, 90)), 2) if len(ape) else float("nan"),
        "mean_pct": round(float(np.mean(ape)), 2) if len(ape) else float("nan"),
    }


def by_range(pred: np.ndarray, rows: pd.DataFrame) -> dict[str, dict[str, float]]:
    meas = rows["us"].to_numpy()
    out = {"all": error_summary(pred, meas)}
    for name, lo, hi in M_RANGES:
        sel = ((rows["m"] >= lo) & (rows["m"] <= hi)).to_numpy()
        out[name] = error_summary(pred[sel], meas[sel])
    return out


def cross_validated(
    d: Design,
    rows: pd.DataFrame,
    groups: np.ndarray,
    predict: PredictDesign | None = None,
    l2_rates: Sequence[float] = VMEM_BPC_GRID,
) -> np.ndarray:
    """Each row predicted by constants fitted without its group."""
    predict = predict or predict_design
    meas = rows["us"].to_numpy()
    pred = np.zeros(len(rows))
    for g in np.unique(groups):
        held = groups == g
        cal, _ = fit_constants(d, meas, np.nonzero(~held)[0], predict, l2_rates)
        pred[held] = predict(cal, d, np.nonzero(held)[0])
    return pred


def recorded_rank(ranked: Sequence[tuple[str, float]], recorded: str) -> tuple[int | None, float]:
    """Where aiter's `recorded` kernel falls among `ranked`, the (kernel, predicted us) the model
    ranks at a shape, fastest first: its rank (1 = predicted fastest) and its predicted gap to
    the fastest. (None, inf) when it is not among them (unsafe there, or not raced then): such a
    row is a miss in every count, however few kernels were ranked."""
    names = [name for name, _us in ranked]
    if recorded not in names:
        return None, float("inf")
    rank = names.index(recorded) + 1
    return rank, ranked[rank - 1][1] / ranked[0][1] - 1


def noise_ceiling(
    ranked: Sequence[Sequence[tuple[str, float]]],
    recorded_ranked: Sequence[bool],
    sigma: float,
    draws: int = 400,
    seed: int = 0,
) -> float:
    """The share of rows (%) whose measured winner would fall in the predicted top 3 if every
    prediction were exact and the tuner's timings carried lognormal noise `sigma`: what the
    ranking could score at best, given how close the predictions put the kernels. Rows whose
    recorded kernel is not ranked (`recorded_ranked` False) count as misses, as in the score."""
    rng = np.random.default_rng(seed)
    hits = 0.0
    for row, ok in zip(ranked, recorded_ranked, strict=True):
        if not ok or not row:
            continue
        us = np.array([u for _name, u in row])
        measured = us[None, :] * np.exp(rng.normal(0.0, sigma, (draws, len(us))))
        hits += float(np.mean(np.argmin(measured, axis=1) < 3))
    return 100 * hits / len(ranked)


def nk_folds(rows: pd.DataFrame, folds: int = FOLDS) -> np.ndarray:
    """Fold number per row: (N, K) groups dealt to folds by a fixed hash (no RNG state)."""
    keys = [f"{n}x{k}" for n, k in zip(rows["n"], rows["k"], strict=True)]
    return np.array([int(hashlib.sha256(s.encode()).hexdigest(), 16) % folds for s in keys])


def grid_points(l2_rates: Sequence[float] = VMEM_BPC_GRID) -> list[tuple[float, float]]:
    return [(lat, bpc) for lat in LATENCY_GRID for bpc in l2_rates]


def run_fit(f4gemm_dir: Path, write: bool = True) -> CalibrationFile:
    manifest = read_manifest(f4gemm_dir)
    rows = measured_rows(f4gemm_dir, manifest)
    predictor = Predictor(manifest)
    d = design(predictor, rows, list(rows["kernel"]), LATENCY_GRID)
    meas = rows["us"].to_numpy()
    cal, _ = fit_constants(d, meas, np.arange(len(rows)))
    pred = predict_design(cal, d)
    kfold = cross_validated(d, rows, nk_folds(rows))
    accuracy = {
        "in_sample": by_range(pred, rows),
        ERROR_BAND: by_range(kfold, rows),
        UNTIMED_KERNEL_BAND: by_range(cross_validated(d, rows, rows["kernel"].to_numpy()), rows),
        PER_KERNEL: {
            kernel: error_summary(kfold[idx], meas[idx])
            for kernel, idx in sorted(rows.groupby("kernel").indices.items())
        },
        HELD_BACK: held_back_accuracy(predictor, cal),
        "seed": [
            {
                "m": int(r.m),
                "n": int(r.n),
                "k": int(r.k),
                "measured_us": float(r.us),
                "predicted_us": round(float(p), 2),
            }
            for r, p in zip(rows.itertuples(), pred, strict=True)
            if r.source == "seed"
        ],
    }
    rounded = Calibration(**{k: round(float(v), 4) for k, v in asdict(cal).items()})
    digest = data_digest(rows)
    out = CalibrationFile(
        calibration=rounded,
        calibration_id=f"{MODEL_ID}-{digest}",
        fitted_on={
            "rows": len(rows),
            "aiter_rows": int((rows["source"] == "aiter").sum()),
            "seed_rows": int((rows["source"] == "seed").sum()),
            "table": f"aiter/configs/{MAIN_TABLE} of "
            f"{f4gemm_dir.parent.name} (asm f4gemm rows, cu_num 256)",
            "seed": "the seed driver's README, MI355X table (4 shapes)",
            "data_sha256_16": digest,
            "grid": {
                "vmem_latency": LATENCY_GRID,
                "cu_vmem_bytes_per_clk": VMEM_BPC_GRID,
                "simulated_bytes_per_clk": SIM_BYTES_PER_CLK,
            },
        },
        command="python -m f4pipe.perf.fit",
        accuracy=accuracy,
    )
    if write:
        import json

        from f4pipe.core.fsio import write_text

        write_text(CALIBRATION_PATH, json.dumps(out.to_json(), indent=1) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m f4pipe.perf.fit",
        description="Fit the cycle model's constants on aiter's recorded MI355X timings "
        "(the pinned wheel's tuned table) and the seed's 4 shapes; rewrite calibration.json.",
    )
    parser.add_argument(
        "--f4gemm-dir",
        type=Path,
        default=None,
        help="a fetched f4gemm directory (default: the pinned wheel's)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print, do not write")
    args = parser.parse_args(argv)
    f4gemm_dir = args.f4gemm_dir or default_f4gemm_dir()
    out = run_fit(f4gemm_dir, write=not args.dry_run)
    import json

    print(json.dumps(out.to_json(), indent=1))
    return 0


def default_f4gemm_dir() -> Path:
    """The pinned wheel's f4gemm directory (fetched into f4pipe's cache on first use)."""
    from f4pipe.core.cache import cache_root
    from f4pipe.fetch import PypiSource, fetch_aiter

    return fetch_aiter(PypiSource(), cache_root() / "test-resources").f4gemm_dir


if __name__ == "__main__":
    sys.exit(main())
