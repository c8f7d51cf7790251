"""`f4pipe predict`: predicted MI355X time of the f4gemm kernels at a shape (f4pipe.perf).

Every number printed is a prediction of the cycle model, labelled so, with the model's error
measured out-of-sample on aiter's recorded MI355X timings for the shape's M range. Nothing here
is measured; `f4pipe bench` on an MI355X measures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from f4pipe.cli import EXIT_OK, command_help
from f4pipe.cli.args import add_co_dir
from f4pipe.core.errors import InputError
from f4pipe.perf.costs import HELD_BACK, RETIMING_MEDIAN_PCT

if TYPE_CHECKING:
    from f4pipe.perf.predict import Predictor, Ranked

#: The shapes file is a small CSV.
MAX_SHAPES_BYTES = 16 << 20


def _shapes(args: argparse.Namespace) -> list[tuple[int, int, int, str | None]]:
    if args.shapes is None:
        if None in (args.m, args.n, args.k):
            raise InputError("give -m, -n and -k (or --shapes FILE.csv with columns M, N, K)")
        return [(args.m, args.n, args.k, None)]
    return read_shapes(args.shapes)


def read_shapes(path: Path) -> list[tuple[int, int, int, str | None]]:
    """(M, N, K, kernel or None) per row of a CSV with columns M, N, K and optionally kernel."""
    import csv
    import io

    from f4pipe.core.fsio import read_input_text

    text = read_input_text(path, "shapes CSV", MAX_SHAPES_BYTES)
    reader = csv.DictReader(io.StringIO(text))
    cols = {c.strip().lower(): c for c in reader.fieldnames or []}
    missing = [c for c in ("m", "n", "k") if c not in cols]
    if missing:
        raise InputError(f"{path}: columns {', '.join(c.upper() for c in missing)} missing")
    out = []
    for line, row in enumerate(reader, start=2):
        try:
            m, n, k = (int(str(row[cols[c]]).strip()) for c in ("m", "n", "k"))
        except (TypeError, ValueError):
            raise InputError(f"{path}:{line}: M, N, K must be integers") from None
        kernel = (row.get(cols["kernel"]) or "").strip() if "kernel" in cols else ""
        out.append((m, n, k, kernel or None))
    if not out:
        raise InputError(f"{path}: no shapes")
    return out


#: Kernels predicted closer than aiter's re-timings differ are not told apart by a measurement
#: either.
RESOLUTION_PCT = RETIMING_MEDIAN_PCT


def record(
    predictor: Predictor, r: Ranked, warm: bool = False, best_us: float | None = None
) -> dict[str, Any]:
    """One kernel's prediction as a JSON-able row; `gap_pct`: how much slower than the
    predicted best safe kernel at the shape (None for an unsafe kernel)."""
    p = r.prediction
    med, p90 = predictor.calibration_file.error_band(p.m)
    held_med, held_p90 = predictor.calibration_file.error_band(p.m, HELD_BACK)
    own = predictor.calibration_file.kernel_error(p.kernel)
    return {
        "m": p.m,
        "n": p.n,
        "k": p.k,
        "log2_k_split": p.log2_k_split,
        "kernel": predictor.manifest.get(p.kernel).co_name,
        "us_pred": round(p.us, 3),
        "tflops_pred": round(p.tflops, 1),
        "bound": p.bound,
        "safe": r.safe,
        "rank": r.rank,
        "gap_pct": round((p.us / best_us - 1) * 100, 2) if r.safe and best_us else None,
        "warm": warm,
        "predicted": True,
        "model": predictor.model_id,
        "calibration_id": predictor.calibration_id,
        "error_median_pct": med,
        "error_p90_pct": p90,
        "error_held_back_median_pct": held_med,
        "error_held_back_p90_pct": held_p90,
        "error_kernel_median_pct": own.get("median_pct"),
        "error_kernel_p90_pct": own.get("p90_pct"),
        "error_kernel_rows": own.get("rows"),
        "error_kernel_measure": own.get("measure"),
    }


def run_predict(args: argparse.Namespace) -> int:
    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.aiter.shaperules import check_shape
    from f4pipe.cli.args import co_dir_from
    from f4pipe.core.fsio import json_text
    from f4pipe.perf.predict import Predictor
    from f4pipe.pipeline.stages import gfx950_only

    shapes = _shapes(args)
    for m, n, k, _ in shapes:
        check_shape(m, n, k, args.splitk)  # every shape before the first prediction
    manifest = read_manifest(co_dir_from(args))
    other_arch = gfx950_only("predict", manifest)
    if other_arch is not None:
        print(other_arch)
        return EXIT_OK
    predictor = Predictor(manifest)
    wanted = [manifest.get(k) for k in args.kernel or []]
    asked = [(m, n, k, [manifest.get(kernel)] if kernel else (wanted or None))
             for m, n, k, kernel in shapes]  # fmt: skip
    rankings = predictor.rank_shapes(asked, args.splitk, warm=args.warm, explain=True)
    for (m, n, k, _), ranked in zip(shapes, rankings, strict=True):
        best = min((r.prediction.us for r in ranked if r.safe), default=None)
        rows = [record(predictor, r, args.warm, best) for r in ranked]
        if args.json:
            for row in rows:
                print(json_text(row))
            continue
        print_table(predictor, m, n, k, rows)
    return EXIT_OK


def print_table(predictor: Predictor, m: int, n: int, k: int, rows: list[dict[str, Any]]) -> None:
    med, p90 = predictor.calibration_file.error_band(m)
    held_med, held_p90 = predictor.calibration_file.error_band(m, HELD_BACK)
    band = (
        f"measured error for this M range: median {med:.1f} %, p90 {p90:.1f} % (out-of-sample)"
        if med is not None
        else "error not measured: uncalibrated model"
    )
    if held_med is not None:
        band += (
            f"; on aiter's later tuning sessions (held back): median {held_med:.1f} %, "
            f"p90 {held_p90:.1f} %"
        )
    print(
        f"M={m} N={n} K={k}: PREDICTED MI355X time (cycle model {predictor.model_id}, "
        f"calibration {predictor.calibration_id}); {band}"
    )
    print(
        f"{'rank':>4} {'us_pred':>10} {'gap %':>6} {'TFLOP/s_pred':>12} {'bound':>7} {'safe':>5}"
        f" {'err p90 %':>10}  kernel"
    )
    for row in rows:
        rank = str(row["rank"]) if row["safe"] else "-"
        safe = "yes" if row["safe"] else "NO"
        gap = f"{row['gap_pct']:.1f}" if row["gap_pct"] is not None else "-"
        print(
            f"{rank:>4} {row['us_pred']:>10.2f} {gap:>6} {row['tflops_pred']:>12.1f} "
            f"{row['bound']:>7} {safe:>5} {kernel_error_cell(row):>10}  {row['kernel']}"
        )
    print(
        "err p90 %: the out-of-sample error (k-fold) of the kernel's own timed rows, how many "
        "in brackets; * never timed: the error of a kernel the fit has not seen (leave one "
        "kernel out)"
    )
    close = [r for r in rows if r["gap_pct"] is not None and 0 < r["gap_pct"] < RESOLUTION_PCT]
    if close:
        print(
            f"{len(close)} kernel(s) predicted within {RESOLUTION_PCT} % of the best: closer than "
            "aiter's own re-timings of one kernel differ (median), so a measurement would not "
            "order them either"
        )
    sys.stdout.flush()


def kernel_error_cell(row: dict[str, Any]) -> str:
    p90 = row["error_kernel_p90_pct"]
    if p90 is None:
        return "-"
    if not row["error_kernel_rows"]:
        return f"{p90:.1f}*"
    return f"{p90:.1f} ({row['error_kernel_rows']})"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "predict",
        help=command_help("predict"),
        description="Predict each kernel's MI355X time at a shape with f4pipe's cycle model "
        "(the kernel's own instructions, replayed from one emulated workgroup; constants "
        "fitted on aiter's recorded MI355X timings). Safe kernels are ranked fastest first; "
        "kernels unsafe at the shape (f4pipe.aiter.shaperules) are listed after them, "
        "unranked. The first prediction of a kernel traces it on the emulator (about a "
        "second; cached).",
    )
    add_co_dir(p)
    p.add_argument("-m", type=int, help="rows of A and D")
    p.add_argument("-n", type=int, help="rows of B, columns of D")
    p.add_argument("-k", type=int, help="the reduction dimension")
    p.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    p.add_argument(
        "--all",
        action="store_true",
        help="every kernel (the default when no --kernel is given)",
    )
    p.add_argument("--splitk", type=int, default=0, help="log2 of the K split (splitK kernels)")
    p.add_argument(
        "--shapes",
        type=Path,
        help="CSV with columns M, N, K and optionally kernel: many shapes in one process",
    )
    p.add_argument(
        "--warm",
        action="store_true",
        help="A and B already in the Infinity Cache, as when launches repeat on the same "
        "buffers (the seed driver's timing); default: cold, as aiter's tuner times with "
        "rotated copies",
    )
    p.add_argument(
        "--json", action="store_true", help="one JSON object per kernel and shape, one per line"
    )
    p.set_defaults(func=run_predict)
