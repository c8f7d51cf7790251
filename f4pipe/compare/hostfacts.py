"""The release's host facts (f4pipe.aiter.hostfacts: the scale padding its shuffles write, how
its dispatch picks an asm kernel, its launcher's shape checks) side by side: an update that
changes one changes what the shape verdicts rest on, so each change counts as a verdict input.
A fact is compared by what it says, not where: a file whose lines moved is no change."""

from __future__ import annotations

from typing import Any

import pandas as pd

from f4pipe.aiter.hostfacts import HOST_FACTS_KEY, facts_from_record

COLUMNS = ["fact", "A", "B"]


def _said(record: dict[str, Any]) -> dict[str, str] | None:
    recorded = record.get("source", {}).get(HOST_FACTS_KEY) if record else None
    if recorded is None:
        return None
    return {n: f"{f.words} [{f.where()}]" for n, f in facts_from_record(recorded).items()}


def host_fact_changes(ra: dict[str, Any], rb: dict[str, Any]) -> pd.DataFrame:
    """Facts whose words differ between two fetch records (provenance.json); none when either
    record predates the facts (the source facts say so)."""
    fa, fb = _said(ra), _said(rb)
    if fa is None or fb is None:
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for name in sorted(fa.keys() | fb.keys()):
        a, b = fa.get(name, "-"), fb.get(name, "-")
        if a.split(" [")[0] != b.split(" [")[0]:
            rows.append({"fact": name, "A": a, "B": b})
    return pd.DataFrame(rows, columns=COLUMNS)
