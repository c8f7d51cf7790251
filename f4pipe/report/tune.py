"""The report's tuning section: per shape list, the tuned table f4pipe wrote (tuned/<list>.csv)
against aiter's own tables at the same shapes, and the check of the model on aiter's own rows."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from f4pipe.core.layout import TUNED_DIR
from f4pipe.perf.costs import M_RANGES
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.pipeline.tune import (
    AITER_ROWS,
    SHAPE_KEY,
    STATUS_TUNED,
    Summary,
    summarize,
    summary_line,
)
from f4pipe.report.render import Section

#: The summary's columns as the table shows them.
COLUMNS = {
    "list": "shape list",
    "shapes": "shapes",
    "tuned": "tuned",
    "no_safe": "no safe asm kernel",
    "refused": "refused by the kernels",
    "aiter_hits": "aiter has a row",
    "aiter_asm": "of them asm",
    "aiter_unsafe": "unsafe, replaced",
    "same": "pick = aiter's",
    "within_error": "within model error",
    "gain_median_pct": "median predicted gain % where the pick differs",
    "lacking": "aiter lacks, tuned",
}


def agreement(s: Summary) -> str:
    """'<n> of <m> (<p> %)': picks that are aiter's kernel or within the model's error of it,
    over aiter's safe asm rows."""
    compared = s.aiter_asm - s.aiter_unsafe
    agree = s.same + s.within_error
    return f"{agree} of {compared} ({100 * agree / compared:.0f} %)" if compared else "none"


def _bands(df: pd.DataFrame) -> str:
    """The p90 error bands the table used, per M range of the calibration."""
    parts = []
    for name, lo, hi in M_RANGES:
        band = df.loc[(df["m"] >= lo) & (df["m"] <= hi), "band_p90_pct"].dropna()
        if len(band):
            parts.append(f"{band.iloc[0]:g} % at M {name.removeprefix('M')}")
    return ", ".join(parts) or "no band recorded"


def tune_section(rs: ResultSet, out_dir: Path | None) -> Section:
    df = rs.table("tune")
    title = "Tuning without a GPU: aiter-format tables per shape list"
    sec = Section("tune", title, "not run", "none")
    sec.headline = "not run"
    if df is None or not len(df):
        sec.notes.append("tune.parquet is missing: the tune stage has not run.")
        return sec
    summaries = summarize(df)
    lists = [s for s in summaries if s.list != AITER_ROWS]
    check = next((s for s in summaries if s.list == AITER_ROWS), None)
    tuned = sum(s.tuned for s in lists)
    lacking = sum(s.no_safe + s.refused for s in lists)
    parts = [
        f"{tuned} shape(s) tuned in {len(lists)} list(s), {lacking} without a safe asm kernel",
        *(summary_line(s) for s in lists),
    ]
    if check is not None:
        parts.append(
            f"on aiter's own safe asm rows the tuned pick is aiter's recorded kernel or within "
            f"the model's error of it at {agreement(check)}"
        )
    sec.verdict = "; ".join(parts) + (
        f". Tables in {TUNED_DIR}/<list>.csv (aiter's a4w4 format); us, tflops and bw are "
        "PREDICTED by the cycle model, never measured"
    )
    sec.headline = f"{tuned} tuned, {lacking} without a safe kernel"
    if check is not None and check.aiter_asm > check.aiter_unsafe:
        share = 100 * (check.same + check.within_error) / (check.aiter_asm - check.aiter_unsafe)
        sec.headline = f"{tuned} tuned, {lacking} lack safe kernel, {share:.0f} % agree"
    sec.state = "bad" if lacking else "info"
    sec.table = pd.DataFrame([{COLUMNS[k]: v for k, v in asdict(s).items()} for s in summaries])
    gain = COLUMNS["gain_median_pct"]
    sec.table[gain] = pd.to_numeric(sec.table[gain]).round(1)
    sec.notes.append(
        "A gain is 'within the model's error' when it is at most the model's p90 out-of-sample "
        f"error for the row's M range ({_bands(df)}; band_p90_pct in tune.parquet): there the "
        "model cannot tell the two kernels apart, and aiter's measured pick stands."
    )
    missing = df[df["status"] != STATUS_TUNED].drop_duplicates(SHAPE_KEY)
    if len(missing):
        sec.code["Shapes with no safe asm kernel (not in the tuned tables)"] = [
            f"{r.list}:{r.line} {r.name} M={r.m} N={r.n} K={r.k}: {r.status}"
            for r in missing.itertuples()
        ]
    return sec
