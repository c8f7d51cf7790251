"""Which kernels aiter's tuner raced when it timed a row of the tuned table.

The tuned table keeps each row as first recorded. 30 of the pinned wheel's 796 asm rows were
timed in July and August 2025, when aiter shipped 5 B-preshuffle f4gemm kernels, not 35; their
recorded kernel is the fastest of those 5 and says nothing about the other 30. Scoring the
cycle model's ranking on such a row must rank only the kernels the tuner had
(tuning_history.json beside this file, read from aiter's git history by
scripts/aiter_tuning_history.py; docs/reference/aiter.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

HISTORY_PATH = Path(__file__).with_name("tuning_history.json")


def row_key(m: int, n: int, k: int, kernel: str, us: float | str) -> str:
    """One tuned row: its shape, recorded kernel (.co name) and recorded time, as aiter wrote
    them (the time parsed as a float, so the same row reads alike from any CSV)."""
    return f"{m},{n},{k},{kernel},{float(us)!r}"


@dataclass(frozen=True)
class TuningHistory:
    commits: dict[str, tuple[str, frozenset[str]]]  # commit -> (date, kernels present)
    rows: dict[str, str]  # row_key -> the first commit holding that row

    def raced(self, m: int, n: int, k: int, kernel: str, us: float) -> frozenset[str] | None:
        """The kernels present when the row was first recorded; None for a row the history
        does not know (another table)."""
        commit = self.rows.get(row_key(m, n, k, kernel, us))
        return None if commit is None else self.commits[commit][1]

    def recorded_on(self, m: int, n: int, k: int, kernel: str, us: float) -> str | None:
        commit = self.rows.get(row_key(m, n, k, kernel, us))
        return None if commit is None else self.commits[commit][0]


@cache
def load_history(path: Path = HISTORY_PATH) -> TuningHistory:
    data = json.loads(path.read_text())
    commits = {c: (v["date"], frozenset(v["kernels"])) for c, v in data["commits"].items()}
    return TuningHistory(commits=commits, rows=dict(data["rows"]))
