"""What changed since the archived set before: the pipeline's `changes` step (`f4pipe changes`).

Before the report, the main job compares its set with the newest archived set of another aiter
id (`<archives>/<aiter-id>/*.tar.gz`, newest by the tarball's modification time; the set's own
id is left out, so a re-run never compares with itself) and writes the comparison's verdict-level
facts as a small JSON record (f4pipe.report.changes.ChangesRecord). The report reads that record
as data for its first card; the whole comparison is one `f4pipe compare` away.

Which set is the baseline depends on the archives present when the step runs, so the changes
record, the report of a later set and that set's archive depend on them too: the same tables and
the same archives give the same record (it names the baseline's archive by file name, never by a
path or a time).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from f4pipe.compare import Comparison, compare_sets, open_result_set, set_label
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import write_json
from f4pipe.pipeline.archive import SUFFIX
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.report.changes import CHANGES_FORMAT, SUMMARY_LINES, Baseline, ChangesRecord


def newest_other_archive(archives: Path, result: ResultSet) -> Path | None:
    """The newest archive (by modification time, then name) in `archives/<id>/` for an id
    other than the set's own; None when there is none (or no archives directory yet: the
    first run of the main job)."""
    if not archives.exists():
        return None
    if not archives.is_dir():
        raise InputError(
            f"{archives}: not a directory; give the directory the archives are in, e.g. "
            "--archives results/archives"
        )
    own = {result.aiter_id, result.directory.name}
    found = [
        path
        for folder in archives.iterdir()
        if folder.is_dir() and folder.name not in own
        for path in folder.glob(f"*{SUFFIX}")
        if path.is_file()
    ]
    return max(found, key=lambda p: (p.stat().st_mtime_ns, p.name), default=None)


def changes_record(result: ResultSet, archive: Path | None) -> ChangesRecord:
    """The record of `result` against `archive` (None: no baseline, the first archived set)."""
    if archive is None:
        return first_record(result)
    with opened_baseline(archive) as base:
        comparison = compare_sets(base, result)
        baseline = Baseline(
            aiter_id=archive.parent.name, archive=archive.name, label=set_label(base)
        )
        return comparison_record(comparison, baseline)


@contextlib.contextmanager
def opened_baseline(archive: Path) -> Iterator[ResultSet]:
    """The baseline archive unpacked; a damaged one is refused in one line that says what to
    do (skipping it would compare with an older set than the newest, unannounced)."""
    try:
        with open_result_set(archive) as base:
            yield base
    except InputError as exc:
        why = str(exc).splitlines()[0].removeprefix(f"{archive}: ").rstrip(":")
        raise InputError(
            f"{archive}: the baseline (newest archive of another aiter id) is unusable: {why}; "
            f"check it with `f4pipe archive --check {archive}`, or move it out of the archives "
            "directory"
        ) from None


def first_record(result: ResultSet) -> ChangesRecord:
    return ChangesRecord(
        format=CHANGES_FORMAT,
        set=set_label(result),
        baseline=None,
        differs=False,
        verdict_changes={},
        newly_unsafe=0,
        regressions=0,
        tuned_picks=0,
        summary=[],
        summary_omitted=0,
    )


def comparison_record(comparison: Comparison, baseline: Baseline) -> ChangesRecord:
    lines = comparison.summary_lines()
    return ChangesRecord(
        format=CHANGES_FORMAT,
        set=set_label(comparison.b),
        baseline=baseline,
        differs=comparison.differs,
        verdict_changes=comparison.verdict_changes(),
        newly_unsafe=comparison.newly_unsafe,
        regressions=comparison.regressions,
        tuned_picks=comparison.tuned_picks,
        summary=lines[:SUMMARY_LINES],
        summary_omitted=max(0, len(lines) - SUMMARY_LINES),
        architectures=comparison.architecture_cards(),
    )


def write_changes(
    result_dir: str | os.PathLike[str],
    archives: str | os.PathLike[str],
    out: str | os.PathLike[str],
) -> ChangesRecord:
    """Compare the set with its baseline and write the record to `out` (atomically)."""
    result = ResultSet.load(result_dir)
    record = changes_record(result, newest_other_archive(Path(archives), result))
    write_json(out, record)
    return record
