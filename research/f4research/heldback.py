"""The cycle model against real MI355X timings it was not fitted on (`nox -s bench`;
`f4research heldback [--json]`).

The calibration uses only the pinned wheel's tuned table and the seed's 4 shapes. aiter kept
tuning the same code objects afterwards (byte-identical `.co` files): its later tuned tables
hold 957 more asm rows, 658 of them at shapes the calibration never saw
(f4pipe/perf/heldback_rows.csv, written by scripts/aiter_heldback_rows.py from aiter's git
history). Here the committed calibration predicts them, unchanged:

- error: median, p90 and mean absolute % per M range, at new shapes and at re-timed ones;
- ranking, at new shapes where the tuner had every kernel: where the recorded kernel falls among
  the kernels safe there that read B as it does, counted by research/f4research/accuracy.py's
  own ranking;
- the main loop read off pairs of rows of one session (predict_accuracy.incremental_k).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pandas as pd

from f4pipe.aiter.manifest import read_manifest
from f4pipe.perf import fit
from f4pipe.perf.costs import load_calibration
from f4pipe.perf.predict import Predictor
from f4research.accuracy import incremental_k, print_incremental_k, ranking

M_BINS = [0, 64, 512, 1 << 31]
M_LABELS = ["<=64", " 65-512", ">512"]


def session_drift(rows: pd.DataFrame, calibration: pd.DataFrame) -> dict:
    """aiter's later timing of the same kernel at the same shape over the pinned table's: the
    median ratio per M range and tuning date, and its spread. A model fitted on the pinned
    table can be no closer to a later session than the sessions are to each other."""
    pinned = calibration[calibration["source"] == "aiter"]
    pairs = rows.merge(pinned, on=["m", "n", "k", "kernel"], suffixes=("", "_pinned"))
    pairs["ratio"] = pairs["us"] / pairs["us_pinned"]
    out = {}
    for (date, name), grp in pairs.groupby(["date", pd.cut(pairs["m"], M_BINS, labels=M_LABELS)]):
        if len(grp):
            out[f"{date} M{name}"] = {
                "pairs": len(grp),
                "median_ratio": round(float(grp["ratio"].median()), 3),
                "min_ratio": round(float(grp["ratio"].min()), 3),
                "max_ratio": round(float(grp["ratio"].max()), 3),
            }
    return out


def measure() -> dict:
    t0 = time.process_time()
    f4gemm_dir = fit.default_f4gemm_dir()
    manifest = read_manifest(f4gemm_dir)
    cal = load_calibration()
    predictor = Predictor(manifest, cal)
    rows = fit.held_back_rows()
    pred = np.array(
        [predictor.predict(manifest.get(r.kernel), r.m, r.n, r.k).us for r in rows.itertuples()]
    )
    new = (~rows["shape_in_calibration"]).to_numpy()
    raced_new = rows[new & rows["every_kernel_raced"].to_numpy()]
    report = {
        "calibration_id": cal.calibration_id,
        "rows": len(rows),
        "new_shapes": fit.by_range(pred[new], rows[new]),
        "re_timed_shapes": fit.by_range(pred[~new], rows[~new]),
        "per_table_new_shapes": {
            table: fit.error_summary(pred[new][idx], rows[new]["us"].to_numpy()[idx])
            for table, idx in rows[new].groupby("table").indices.items()
        },
        # scored as the calibration rows are; no history knows these rows, so every kernel
        # the tuner had (all of them at these commits) competes
        "ranking_new_shapes_every_kernel_raced": ranking(
            predictor, raced_new.assign(source="aiter"), raced_only=False
        ),
        "session_drift": session_drift(rows, fit.measured_rows(f4gemm_dir, manifest)),
        # pairs within one session only: a session-wide shift would not cancel across two
        "main_loop_by_session": {
            date: found
            for date, grp in rows.groupby("date")
            if (found := incremental_k(pred, grp.assign(source="aiter"), manifest))
        },
    }
    report["cost_cpu_s"] = round(time.process_time() - t0, 1)
    return report


def print_report(r: dict) -> None:
    print(f"held back from the fit: {r['rows']} rows of aiter's later tuned tables")
    print(
        f"{'':18}{'all':>16}{'M<=64':>16}{'65-512':>16}{'>512':>16}   (median / p90 / mean %, rows)"
    )
    for name in ("new_shapes", "re_timed_shapes"):
        cells = "".join(
            f"{r[name][g]['median_pct']:>5.1f}/{r[name][g]['p90_pct']:>4.1f}/"
            f"{r[name][g]['mean_pct']:>4.1f} ({r[name][g]['rows']})"
            for g in ("all", "M<=64", "65-512", ">512")
        )
        print(f"{name:<18}{cells}")
    for table, s in r["per_table_new_shapes"].items():
        print(f"  {table}: {s['median_pct']} / {s['p90_pct']} % ({s['rows']} rows)")
    print("ranking at new shapes:", r["ranking_new_shapes_every_kernel_raced"])
    print("aiter's later timing over the pinned one, same kernel and shape (median, min, max):")
    for key, d in r["session_drift"].items():
        print(
            f"  {key:>22}: {d['median_ratio']:.3f} ({d['min_ratio']:.3f} - {d['max_ratio']:.3f}),"
            f" {d['pairs']} pairs"
        )
    for date, result in r["main_loop_by_session"].items():
        print_incremental_k(result, f"main loop, session {date}")
    print("cost (CPU s):", r["cost_cpu_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    report = measure()
    if args.json:
        print(json.dumps(report, default=float))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
