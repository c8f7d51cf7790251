"""The report's "Changed since <baseline>" section: what moved since the archived set before.

The pipeline's `changes` step (`f4pipe changes`, f4pipe.compare.baseline) compares the set
with the newest archived set of another aiter id and writes `<set>/changes.json`; this section
reads that file as data. It never imports f4pipe.compare, which sits above the report: the
record's keys are the contract, `ChangesRecord` below, and the writer builds one.

Which set is the baseline depends on the archives present when the step ran (the newest by file
time), so the report of a later set depends on them too: it is reproducible given the same
archives, as the step's JSON records the baseline's archive by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import NotRequired, TypedDict

import pandas as pd

from f4pipe.core.errors import InputError
from f4pipe.core.fsio import read_json_file
from f4pipe.report.render import Section

#: The version of changes.json's layout; a reader refuses another.
CHANGES_FORMAT = 1
#: The first lines of `f4pipe compare`'s summary a record keeps (the whole list is a compare
#: away; the report shows these folded).
SUMMARY_LINES = 24


class Baseline(TypedDict):
    """The archived set a record compares against."""

    aiter_id: str
    archive: str  # the tarball's file name in its archives directory
    label: str  # aiter id · toolchain · device (directory), as `f4pipe compare` prints it


class ChangesRecord(TypedDict):
    """changes.json: the comparison's verdict-level facts, no tables."""

    format: int
    set: str
    baseline: Baseline | None  # None: no other aiter id's archive, the first archived set
    differs: bool  # a verdict input changed (kernels, code objects, verdicts)
    verdict_changes: dict[str, int]  # per kind, as `f4pipe compare --json` counts them
    newly_unsafe: int  # tuned-table rows unsafe now that were not
    regressions: int  # measured runs slower beyond the noise
    tuned_picks: NotRequired[int]  # tuned shapes whose pick changed (records before: absent)
    summary: list[str]  # the first SUMMARY_LINES of `f4pipe compare`'s summary
    summary_omitted: int  # lines after those
    #: Per architecture whose kernels changed, "4 kernels added, 5 changed" (absent: written
    #: before every architecture was compared)
    architectures: NotRequired[dict[str, str]]


TITLE = "Changed since"
LAST = f"{TITLE} the last archived set"  # the title without a baseline
NOT_COMPARED = (
    "not compared: no changes.json for this set (the main job writes it before the report; a "
    "report built by hand has none); `f4pipe compare OLD NEW` names every change between two "
    "sets or archives"
)


def read_changes(path: Path) -> ChangesRecord:
    """A changes.json, checked for its format (an InputError naming the file otherwise)."""
    record = read_json_file(path, "changes.json")
    if not isinstance(record, dict) or record.get("format") != CHANGES_FORMAT:
        raise InputError(
            f"{path}: not an f4pipe changes.json of format {CHANGES_FORMAT}; write it again "
            "with `f4pipe changes RESULT_DIR --archives DIR -o FILE`"
        )
    return record  # type: ignore[return-value]  # checked: the format key; the writer's keys


def changes_section(record: ChangesRecord | None) -> Section:
    """The section and its card: `bad` when a verdict input changed (or a run got slower
    beyond the noise, which `compare` fails on too), `ok` when nothing did, `none` when there
    is no baseline or no record."""
    if record is None:
        sec = Section("changes", LAST, NOT_COMPARED, "none", headline="not compared")
        return sec
    baseline = record["baseline"]
    if baseline is None:
        sec = Section("changes", LAST, "", "none")
        sec.verdict = (
            "first archived set: no archive of another aiter id to compare with (the next "
            "aiter's report compares with this one)"
        )
        sec.headline = "first archived set"
        return sec
    sec = Section("changes", f"{TITLE} {baseline['aiter_id']}", "", "ok")
    changed = {kind: n for kind, n in record["verdict_changes"].items() if n}
    total = sum(changed.values())
    slower, unsafe = record["regressions"], record["newly_unsafe"]
    sec.state = "bad" if record["differs"] or slower else "ok"
    sec.verdict = _verdict(baseline["label"], changed, unsafe, slower)
    cards = architecture_lines(record.get("architectures", {}))
    sec.verdict += "".join(f"; {line}" for line in cards)
    sec.headline = "; ".join([*cards, _headline(total, unsafe, slower)])
    picks = record.get("tuned_picks", 0)
    if picks:
        sec.verdict += f"; {picks} tuned picks changed (predicted; `f4pipe compare` names them)"
        sec.headline += f", {picks} tuned picks changed"
    sec.notes.append(
        f"baseline: {baseline['archive']} (in the archives directory's {baseline['aiter_id']}/), "
        "the newest archive of another aiter id when the changes step ran (by file time); "
        "every change, row by row: `f4pipe compare ARCHIVE RESULT_DIR -o DIR`"
    )
    counts = record["verdict_changes"]
    sec.table = pd.DataFrame({"kind": list(counts), "changes": list(counts.values())})
    lines = list(record["summary"])
    if record["summary_omitted"]:
        lines.append(f"... {record['summary_omitted']} more lines (f4pipe compare)")
    sec.code["f4pipe compare's summary (first lines)"] = lines
    return sec


def architecture_lines(cards: dict[str, str]) -> list[str]:
    """Per architecture whose kernels changed, "gfx1250: 4 kernels added, 5 changed": an update
    of one architecture's code objects is named on the card, not only counted."""
    return [f"{arch}: {text}" for arch, text in cards.items()]


def _verdict(label: str, changed: dict[str, int], unsafe: int, slower: int) -> str:
    if changed:
        kinds = ", ".join(f"{n} {kind}" for kind, n in changed.items())
        verdict = f"{sum(changed.values())} verdict inputs changed since {label} ({kinds})"
    else:
        verdict = f"no verdict input changed since {label}"
    if unsafe:
        verdict += f"; {unsafe} tuned-table rows newly unsafe"
    if slower:
        verdict += f"; {slower} measured runs slower beyond the noise"
    return verdict


def _headline(total: int, unsafe: int, slower: int) -> str:
    if not total and not slower:
        return "no verdict input changed"
    head = f"{total} verdict inputs changed"
    if unsafe:
        head += f", {unsafe} newly unsafe"
    if slower:
        head += f", {slower} slower"
    return head
