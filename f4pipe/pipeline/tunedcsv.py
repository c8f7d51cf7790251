"""The outputs of `f4pipe tune` for one shape list: the tuned CSV in the release's own a4w4
format, its provenance (what every number is and where it comes from) and the side table of
every shape; the written table is looked up as aiter would before anything is reported."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from f4pipe import __version__
from f4pipe.aiter.lookup import lookup
from f4pipe.aiter.manifest import Manifest
from f4pipe.aiter.tuned import NO_KERNEL_ID, a4w4_bw, a4w4_tflops
from f4pipe.arch.gfx950 import ARCH, NUM_CU
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.pipeline.tune import SHAPE_KEY, STATUS_TUNED, ShapeList
from f4pipe.pipeline.tunemeasure import BY_MEASUREMENT

if TYPE_CHECKING:
    from f4pipe.perf.predict import Predictor


def written_picks(frame: pd.DataFrame) -> pd.DataFrame:
    """The picks a table holds, one per (M, N, K) (the first line of the list that asks for a
    shape wins over a later line pinning another kernel), in aiter's tuner's order."""
    picks = frame[frame["picked"]].sort_values(["n", "k", "m", "line"], kind="stable")
    return picks.drop_duplicates(["m", "n", "k"])


def table_rows(frame: pd.DataFrame, list_name: str, manifest: Manifest) -> list[dict[str, Any]]:
    """The tuned CSV's rows of one list (every column by its lower-case name); a shape two
    lines of the list share is written once."""
    symbols = {e.name: e.symbol for e in manifest}
    picks = written_picks(frame[frame["list"] == list_name])
    return [
        {
            "gfx": ARCH,
            "cu_num": NUM_CU,
            "m": r.m,
            "n": r.n,
            "k": r.k,
            "kernelid": NO_KERNEL_ID,
            "splitk": r.log2_k_split,
            "us": round(written_us(r), 4),
            "kernelname": symbols[r.kernel],
            "tflops": a4w4_tflops(r.m, r.n, r.k, written_us(r)),
            "bw": a4w4_bw(r.m, r.n, r.k, written_us(r)),
            "errratio": r.err_ratio,
        }
        for r in picks.itertuples()
    ]


def written_us(pick: Any) -> float:
    """A pick's `us`: what a GPU measured where the pick was decided by measurement, else the
    prediction (never a time the HIP shim's host clock took)."""
    return float(pick.us_measured if pick.decided_by == BY_MEASUREMENT else pick.us_pred)


def provenance(
    frame: pd.DataFrame, sl: ShapeList, predictor: Predictor, keys: ArtifactKeys, header: str
) -> dict[str, Any]:
    """What the tuned CSV's numbers are and where they come from."""
    from f4pipe.perf.costs import M_RANGES

    mine = frame[frame["list"] == sl.name]
    shapes = mine.drop_duplicates(SHAPE_KEY)
    picks = mine[mine["picked"]]
    cal = predictor.calibration_file
    lacking = shapes[shapes["status"] != STATUS_TUNED]
    return {
        "shape_list": str(sl.path),
        "aiter_id": keys.aiter_id,
        "f4pipe_version": __version__,
        "model_id": predictor.model_id,
        "calibration_id": predictor.calibration_id,
        "header_from": header,
        "predicted_columns": ["us", "tflops", "bw"],
        "predicted": "us is the cycle model's MI355X time (not measured) except in the rows "
        "of measured_rows; tflops and bw are aiter's tuner's formulas applied to it",
        "measured_rows": [
            {"m": r.m, "n": r.n, "k": r.k, "us": r.us_measured, "on": r.measured_on}
            for r in picks[picks["decided_by"] == BY_MEASUREMENT].itertuples()
        ],
        "decided_by": {str(k): int(v) for k, v in picks["decided_by"].value_counts().items()},
        "decision": "predicted: the fastest safe candidate by the cycle model; measured: the "
        "fastest measured on a GPU among the candidates the model cannot separate (within the "
        "row's p90 error band of the best, at least the 3 fastest); shim-timed: the same path "
        "on f4pipe's HIP shim (the host's clock: proves the path, not a GPU's pick)",
        "error_band_pct": {
            name: dict(zip(("median", "p90"), cal.error_band(lo), strict=True))
            for name, lo, _ in M_RANGES
        },
        "kernelId": f"{NO_KERNEL_ID}: aiter's dispatch reads kernelName and splitK only",
        "errRatio": "share of D[:M,:N] outside rtol 1e-2 / atol 1e-2 of the bf16 reference, "
        "from one emulated run per (kernel, split, edge classes) at the reduced shape in "
        "err_shapes (M x N x K; the row's own shape where it is that small)",
        "err_shapes": {f"{r.m}x{r.n}x{r.k}": r.err_shape for r in picks.itertuples()},
        "rows": len(picks.drop_duplicates(["m", "n", "k"])),
        "shapes_without_a_row": [
            {"name": r.name, "line": r.line, "m": r.m, "n": r.n, "k": r.k, "status": r.status}
            for r in lacking.itertuples()
        ],
    }


def lookup_misses(csv_path: Path, frame: pd.DataFrame, manifest: Manifest) -> list[str]:
    """The shapes of `frame` for which f4pipe's model of aiter's lookup, given the written
    table alone, does not run the pick (at the row's M and at the smallest M it serves)."""
    from f4pipe.aiter.lookup import build_index
    from f4pipe.aiter.tuned import read_tuned

    index = build_index({csv_path.name: read_tuned(csv_path)})
    misses = []
    for r in written_picks(frame).itertuples():
        for m in {r.m, r.m_low}:
            got = lookup(index, manifest, m, r.n, r.k, cu_num=NUM_CU, gfx=ARCH)
            if got.outcome != "hit" or got.kernel != r.kernel or got.log2_k_split != r.log2_k_split:
                misses.append(f"M={m} N={r.n} K={r.k}: {got.outcome} {got.runs or got.how}")
    return misses


SIDE_COLUMNS = [
    "name",
    "line",
    "m",
    "m_low",
    "n",
    "k",
    "status",
    "kernel",
    "log2_k_split",
    "us_pred",
    "us_measured",
    "decided_by",
    "err_ratio",
    "err_shape",
    "aiter_outcome",
    "aiter_row",
    "aiter_kernel",
    "aiter_split",
    "aiter_safe",
    "reason",
]


def write_outputs(
    frame: pd.DataFrame,
    sl: ShapeList,
    path: Path,
    manifest: Manifest,
    predictor: Predictor,
    keys: ArtifactKeys,
    header: tuple[str, ...],
    header_source: str,
) -> str:
    """The tuned CSV of one list, its provenance and its side table (every shape: status,
    pick, aiter's answer); the written table is looked up as aiter would, and a shape it
    does not serve as picked is a bug (RuntimeError)."""
    from f4pipe.aiter.tuned import write_tuned
    from f4pipe.core.fsio import write_json, write_text

    mine = frame[frame["list"] == sl.name]
    rows = table_rows(mine, sl.name, manifest)
    write_tuned(path, header, rows)
    misses = lookup_misses(path, mine, manifest)
    if misses:
        raise RuntimeError(f"{path}: aiter's lookup misses the written rows: {misses[:3]}")
    stem = path.with_suffix("")
    record = provenance(mine, sl, predictor, keys, header_source)
    write_json(stem.with_name(stem.name + ".provenance.json"), record)
    shapes = mine[mine["picked"] | (mine["status"] != STATUS_TUNED)]
    shapes = shapes.drop_duplicates(SHAPE_KEY)[SIDE_COLUMNS].copy()
    tuned = shapes["status"] == STATUS_TUNED
    shapes["kernel"] = shapes["kernel"].where(tuned, "")
    shapes["log2_k_split"] = shapes["log2_k_split"].astype("Int64").where(tuned)
    shapes["us_pred"] = shapes["us_pred"].round(4).where(tuned)
    shapes["aiter_split"] = shapes["aiter_split"].astype("Int64")
    write_text(stem.with_name(stem.name + ".shapes.csv"), shapes.to_csv(index=False))
    return f"{len(rows)} row(s) -> {path} (provenance and shapes beside it)"


def write_tune_table(path: Path, frame: pd.DataFrame) -> None:
    """The TUNE table, written from the frame by columns (10^5 rows: no row dicts), with no
    pandas metadata, so the same frame gives the same bytes as writing its rows would."""
    import pyarrow as pa

    from f4pipe.core.schemas import TUNE, write_table

    table = pa.Table.from_pandas(frame[TUNE.names], schema=TUNE, preserve_index=False)
    write_table(path, table.replace_schema_metadata(None))
