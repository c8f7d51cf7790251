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


#: The "reused from" of a row that ran in this result set.
RAN_HERE = "ran here"
#: Appended to the origin of a row that took a run made in this set for another row.
SHARED_SUFFIX = ", a run made here"


def reuse_counts(rs: ResultSet) -> pd.DataFrame:
    """One line per (table, origin) over the rows the result store keyed (`reuse_key` set):
    rows, and the store keys they came under. A row taken from the store under a key that a
    row of the same table ran under in this set shares that run (the rebuilt variant takes
    the original's emulated rows, several audit rows one emulated shape): its origin says so,
    so a first run never reads as one that reused an earlier run."""
    lines = []
    for name in REUSABLE_TABLES:
        df = rs.table(name)
        if df is None or not len(df):
            continue
        keyed = df[df[REUSE_KEY].notna()]
        ran = keyed[REUSED_FROM].isna()
        shared = ~ran & keyed[REUSE_KEY].isin(set(keyed.loc[ran, REUSE_KEY]))
        origin = keyed[REUSED_FROM].fillna("").where(~shared, keyed[REUSED_FROM] + SHARED_SUFFIX)
        for source, rows in keyed.groupby(origin, sort=True):
            lines.append(
                {
                    "table": name,
                    "rows": len(rows),
                    "reused from": source or RAN_HERE,
                    "store keys": int(rows[REUSE_KEY].nunique()),
                }
            )
    return pd.DataFrame(lines, columns=["table", "rows", "reused from", "store keys"])


def reused_lines(counts: pd.DataFrame) -> pd.DataFrame:
    """The lines of rows taken from an earlier run or another set (not those that share a run
    made in this set, nor those that ran here)."""
    origin = counts["reused from"]
    return counts[(origin != RAN_HERE) & ~origin.str.endswith(SHARED_SUFFIX)]


def reuse_verdict(counts: pd.DataFrame) -> str:
    """The verdict: rows reused from an earlier run or another set, and apart from them
    the rows that share a run made in this set."""
    total = int(counts["rows"].sum())
    shared = int(counts.loc[counts["reused from"].str.endswith(SHARED_SUFFIX), "rows"].sum())
    reused = reused_lines(counts)
    if not len(reused):
        verdict = f"none: all {total} rows the result store keys ran in this set"
    else:
        origins = ", ".join(sorted(set(reused["reused from"])))
        verdict = (
            f"{int(reused['rows'].sum())} of {total} rows the result store keys reused, "
            f"not run again (from {origins})"
        )
    if shared:
        verdict += (
            f"; {shared} of them share a run made here with another row of the same key "
            "(the rebuilt variant takes the original's emulated rows)"
        )
    return verdict


def reuse_headline(counts: pd.DataFrame) -> str:
    """'none reused', or '66 of 639 rows reused': the verdict's counts, shared runs aside."""
    reused = reused_lines(counts)
    if not len(reused):
        return "none reused"
    return f"{int(reused['rows'].sum())} of {int(counts['rows'].sum())} rows reused"


def reuse_section(rs: ResultSet, out_dir: Path | None) -> Section:
    """Which rows were reused, per table and origin (no plot: `out_dir` is unused)."""
    sec = Section("reuse", "Reused results: rows taken from the result store", "", "info")
    counts = reuse_counts(rs)
    if not len(counts):
        sec.verdict, sec.state = "no row kept in a result store (config reuse)", "none"
        sec.headline = "no result store"
        return sec
    sec.verdict = reuse_verdict(counts)
    sec.headline = reuse_headline(counts)
    sec.notes.append(
        "A reused row is the row that a run in the named result set produced for the same "
        "kernel bytes and manifest row, run parameters, device, toolchain and f4pipe (its "
        "`reused_from` and `reuse_key` columns): round trips (with their assembly, rebuilt "
        "object and verdict text), verify, splitk and safety rows, and the emulations of the "
        "tuned-table audit; bench rows are never reused. A row reused from this set itself "
        "was produced by an earlier run of it."
    )
    sec.notes.append(
        f"`{SHARED_SUFFIX.lstrip(', ')}`: the row's key is one a row of the same table ran "
        "under in this set, so it took that run instead of repeating it: on the emulator the "
        "rebuilt variant executes the original's decoded program and takes its rows "
        "(`<set>/original`), and audit rows whose reduced emulated shape is the same share one "
        "emulation. Nothing came from an earlier run."
    )
    sec.table = counts
    return sec
