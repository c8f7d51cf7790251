"""The report's reuse card on a first run: rows that share a run made in the same set (the
rebuilt variant taking the original's emulated rows) are not counted as reused from an earlier
run, and a set that did reuse an earlier one still says which."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from f4pipe.pipeline.resultset import TABLES, ResultSet
from f4pipe.pipeline.resultstore import REUSE_KEY, REUSED_FROM
from f4pipe.report.reuse import RAN_HERE, SHARED_SUFFIX, reuse_counts, reuse_section


def result_set(verify: pd.DataFrame) -> ResultSet:
    tables = {**dict.fromkeys(TABLES), "verify": verify}
    return ResultSet(Path("results/x"), tables, None)


def verify_rows(*rows: tuple[str | None, str]) -> pd.DataFrame:
    return pd.DataFrame([{REUSED_FROM: origin, REUSE_KEY: key} for origin, key in rows])


def test_a_first_run_whose_rebuilt_rows_take_the_originals_reuses_nothing() -> None:
    # two original rows ran here; the rebuilt variant's rows came under the same keys
    rs = result_set(
        verify_rows((None, "k1"), (None, "k2"), ("set-a/original", "k1"), ("set-a/original", "k2"))
    )
    counts = reuse_counts(rs)
    assert dict(zip(counts["reused from"], counts["rows"], strict=True)) == {
        RAN_HERE: 2,
        "set-a/original" + SHARED_SUFFIX: 2,
    }
    verdict = reuse_section(rs, None).verdict
    assert verdict.startswith("none: all 4 rows the result store keys ran in this set")
    assert "2 of them share a run made here" in verdict


def test_rows_from_an_earlier_set_are_counted_as_reused() -> None:
    rs = result_set(verify_rows((None, "k1"), ("set-old/original", "k9"), ("set-a/original", "k1")))
    verdict = reuse_section(rs, None).verdict
    assert verdict.startswith("1 of 3 rows the result store keys reused, not run again")
    assert "(from set-old/original)" in verdict and "1 of them share a run made here" in verdict
