"""The report's "Reused results" section: which rows came from the result store, and from where.

A reused row (f4pipe.pipeline.resultstore) was not run in this result set: it is the row a run in
another set (or an earlier run of this one) produced for the same kernel bytes, parameters, device,
toolchain and f4pipe. The section says so plainly, per table and per originating aiter id, so a
reader never mistakes a reused verdict for a fresh one."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from f4pipe.pipeline.resultset import ResultSet
from f4pipe.pipeline.resultstore import REUSE_KEY, REUSED_FROM
from f4pipe.report.render import Section

#: Tables whose rows may be reused: the round trips and the emulated verdicts (bench never: its
#: numbers are measurements). Of the audit, only rows with an emulation are.
REUSABLE_TABLES = ("roundtrip", "verify", "splitk", "safety", "audit")


def reuse_counts(rs: ResultSet) -> pd.DataFrame:
    """One line per (table, origin) over the rows the result store keyed (`reuse_key` set):
    rows, and the store keys they came under."""
    lines = []
    for name in REUSABLE_TABLES:
        df = rs.table(name)
        if df is None or not len(df):
            continue
        keyed = df[df[REUSE_KEY].notna()]
        origin = keyed[REUSED_FROM].fillna("")
        for source, rows in keyed.groupby(origin, sort=True):
            lines.append(
                {
                    "table": name,
                    "rows": len(rows),
                    "reused from": source or "ran here",
                    "store keys": int(rows[REUSE_KEY].nunique()),
                }
            )
    return pd.DataFrame(lines, columns=["table", "rows", "reused from", "store keys"])


def reuse_section(rs: ResultSet, out_dir: Path | None) -> Section:
    """Which rows were reused, per table and origin (no plot: `out_dir` is unused)."""
    sec = Section("reuse", "Reused results: rows taken from the result store", "", "info")
    counts = reuse_counts(rs)
    if not len(counts):
        sec.verdict, sec.state = "no row kept in a result store (config reuse)", "none"
        return sec
    reused = counts[counts["reused from"] != "ran here"]
    total = int(counts["rows"].sum())
    if not len(reused):
        sec.verdict = f"none: all {total} rows the result store keys ran in this set"
    else:
        origins = ", ".join(sorted(set(reused["reused from"])))
        sec.verdict = (
            f"{int(reused['rows'].sum())} of {total} rows the result store keys reused, "
            f"not run again (from {origins})"
        )
    sec.notes.append(
        "A reused row is the row that a run in the named result set produced for the same "
        "kernel bytes and manifest row, run parameters, device, toolchain and f4pipe (its "
        "`reused_from` and `reuse_key` columns): round trips (with their assembly, rebuilt "
        "object and verdict text), verify, splitk and safety rows, and the emulations of the "
        "tuned-table audit; bench rows are never reused."
    )
    sec.table = counts
    return sec
