"""`f4pipe changes` and the report's first card, on real result sets and their real archives
(tests/resultsets.py): set B is set A with one kernel edited and reassembled."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

from cards import cards_of, check_cards
from resultsets import EDITED

from f4pipe.cli import main as cli_main
from f4pipe.pipeline.archive import tarball_bytes
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.report import build_report


def archive(result_dir: Path, archives: Path, mtime: int) -> Path:
    """Archive a set as the main job does (`<archives>/<aiter-id>/`), dated `mtime`."""
    target = archives / ResultSet.load(result_dir).aiter_id
    assert cli_main(["archive", str(result_dir), "-o", str(target)]) == 0
    (tarball,) = target.glob("*.tar.gz")
    os.utime(tarball, (mtime, mtime))
    return tarball


def changes(result_dir: Path, archives: Path, out: Path) -> dict:
    assert cli_main(["changes", str(result_dir), "--archives", str(archives), "-o", str(out)]) == 0
    return json.loads(out.read_text())


def test_changes_since_the_newest_archive_of_another_aiter_id(result_sets, tmp_path, capsys):
    archives = tmp_path / "archives"
    timed = archive(result_sets["timed"], archives, 1_000)
    newest = archive(result_sets["A"], archives, 2_000)
    archive(result_sets["B"], archives, 3_000)  # B's own: never its baseline
    out = tmp_path / "changes.json"
    record = changes(result_sets["B"], archives, out)
    assert "since wheel-subset__" in capsys.readouterr().out
    assert record["baseline"]["aiter_id"] == "wheel-subset"
    assert record["baseline"]["archive"] == newest.name
    assert record["differs"] is True and record["newly_unsafe"] == 0
    counts = record["verdict_changes"]
    assert counts["code objects"] == 1 and counts["verify"] == 2 and counts["roundtrip"] == 0
    assert f"  changed: {EDITED} (instructions " in "\n".join(record["summary"])
    # the record names no path of this machine (the archive was unpacked in a temporary
    # directory), so the same tables and archives give the same bytes
    text = out.read_text()
    assert str(tmp_path) not in text and "f4pipe-compare-" not in text
    assert changes(result_sets["B"], archives, tmp_path / "again.json") == record
    assert (tmp_path / "again.json").read_text() == text

    report = build_report(result_sets["B"], tmp_path / "report", changes=out)
    page = report.index.read_text()
    check_cards(page, list(report.sections))
    first = cards_of(page)[0]
    assert first["title"] == "Changed since wheel-subset" and first["state"] == "bad"
    total = sum(counts.values())
    # every architecture's kernels are named on the card (gfx950's edited kernel here)
    assert record["architectures"] == {"gfx950": "1 kernels changed"}
    assert first["headline"] == f"gfx950: 1 kernels changed; {total} verdict inputs changed"
    assert f"{total} verdict inputs changed since wheel-subset" in first["verdict"]
    assert "1 code objects" in first["verdict"] and newest.name in page

    # another set archived later is the baseline from then on
    os.utime(timed, (4_000, 4_000))
    assert changes(result_sets["B"], archives, out)["baseline"]["aiter_id"] == "wheel-subset-timed"


def test_nothing_changed_is_ok(result_sets, tmp_path):
    """A's tables against the timed set's archive: the same verify and splitK rows, only bench
    measured there; no verdict input changed."""
    archives = tmp_path / "archives"
    archive(result_sets["timed"], archives, 1_000)
    out = tmp_path / "changes.json"
    record = changes(result_sets["A"], archives, out)
    assert record["differs"] is False and not any(record["verdict_changes"].values())
    report = build_report(result_sets["A"], tmp_path / "report", changes=out)
    first = cards_of(report.index.read_text())[0]
    assert first["title"] == "Changed since wheel-subset-timed" and first["state"] == "ok"
    assert first["headline"] == "no verdict input changed"


def test_the_first_archived_set_has_no_baseline(result_sets, tmp_path, capsys):
    archives = tmp_path / "archives"
    out = tmp_path / "changes.json"
    record = changes(result_sets["A"], archives, out)  # no archives directory yet
    assert record["baseline"] is None and record["differs"] is False
    archive(result_sets["A"], archives, 1_000)  # only its own archive
    assert changes(result_sets["A"], archives, out) == record
    assert "first archived set" in capsys.readouterr().out
    # the pipeline's place for it: the report finds it beside the tables
    copy = shutil.copytree(result_sets["A"], tmp_path / "set")
    shutil.copy(out, copy / "changes.json")
    report = build_report(copy)
    first = cards_of(report.index.read_text())[0]
    assert first["headline"] == "first archived set" and first["state"] == "none"


def test_bad_input_is_one_line_and_exit_2(result_sets, tmp_path, capsys):
    out = tmp_path / "changes.json"
    not_a_dir = tmp_path / "archives.txt"
    not_a_dir.write_text("")
    for argv in (
        ["changes", str(tmp_path / "nowhere"), "--archives", str(tmp_path), "-o", str(out)],
        ["changes", str(result_sets["A"]), "--archives", str(not_a_dir), "-o", str(out)],
    ):
        capsys.readouterr()
        assert cli_main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("f4pipe changes: error: ") and err.count("\n") == 1, err
    # a damaged baseline is refused, not skipped: the card would name a comparison not made
    archives = tmp_path / "archives"
    tarball = archive(result_sets["A"], archives, 1_000)
    tarball.write_bytes(tarball.read_bytes()[:-100])
    argv = ["changes", str(result_sets["B"]), "--archives", str(archives), "-o", str(out)]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"f4pipe changes: error: {tarball}: the baseline ") and err.count("\n") == 1
    )
    assert not out.exists() and list(tmp_path.glob("changes.json*")) == []
    tarball = archive(result_sets["A"], archives, 1_000)
    _tampered(tarball)
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "refusing to use a damaged archive" in err and err.count("\n") == 1, err
    # the report refuses a JSON that is not a changes record
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"format": 99}')
    argv = ["report", str(result_sets["A"]), "-o", str(tmp_path / "r"), "--changes", str(bogus)]
    assert cli_main(argv) == 2
    assert "not an f4pipe changes.json" in capsys.readouterr().err


def _tampered(tarball: Path) -> None:
    """One member's bytes changed, the gzip stream whole: SHA256SUMS then disagrees."""
    top = tarball.name.removesuffix(".tar.gz")
    with tarfile.open(tarball, "r:gz") as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar}
    members["roundtrip.parquet"] += b"\0"
    tarball.write_bytes(tarball_bytes(top, members))
