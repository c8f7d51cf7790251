"""Archives of real result sets: reproducible bytes, checksums, and tampering caught."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import tarfile

import pytest

from f4pipe.aiter.manifest import MANIFEST_NAME
from f4pipe.cli import main as cli_main
from f4pipe.pipeline.archive import (
    PROVENANCE_NAME,
    SUMS_NAME,
    archive_name,
    check_archive,
    create_archive,
    tarball_bytes,
)
from f4pipe.pipeline.resultset import ResultSet


@pytest.fixture
def set_a(result_sets, tmp_path):
    """A private copy of set A (tests below touch and tamper with files)."""
    return shutil.copytree(result_sets["A"], tmp_path / "results" / "wheel-subset")


def repack(path, top, edit):
    """Rewrite an archive with `edit(members)` applied; SHA256SUMS left as it was."""
    with tarfile.open(path, "r:gz") as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar if m.isfile()}
    edit(members)
    path.write_bytes(tarball_bytes(top, members))


def test_name_and_reproducible_bytes(set_a, tmp_path):
    rs = ResultSet.load(set_a)
    first = create_archive(set_a, tmp_path / "a1")
    assert first.name == f"wheel-subset__{rs.toolchain_id}__emulator.tar.gz"
    assert first.name == archive_name(rs.aiter_id, rs.toolchain_id, rs.device_id) + ".tar.gz"
    # new mtimes and a different output directory: the same bytes
    for path in set_a.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    second = create_archive(set_a, tmp_path / "a2")
    assert first.read_bytes() == second.read_bytes()
    data = first.read_bytes()
    assert data[4:8] == b"\0\0\0\0"  # gzip header mtime
    with tarfile.open(first, "r:gz") as tar:
        infos = tar.getmembers()
    names = [i.name for i in infos]
    assert names == sorted(names)
    assert all(i.mtime == 0 and i.uid == 0 and i.gid == 0 and not i.uname for i in infos)
    top = first.name.removesuffix(".tar.gz")
    assert f"{top}/{SUMS_NAME}" in names and f"{top}/{PROVENANCE_NAME}" in names
    assert f"{top}/roundtrip.parquet" in names
    assert f"{top}/rebuilt/{MANIFEST_NAME}" in names


def test_sha256sums_is_sha256sum_format_and_provenance(set_a, tmp_path):
    tarball = create_archive(set_a, tmp_path)
    # unpacked by the system's tar, as a user would (and tarfile's extraction filters exist
    # only from Python 3.11.4; Debian 12's is 3.11.2)
    (tmp_path / "x").mkdir()
    subprocess.run(["tar", "-xzf", str(tarball), "-C", str(tmp_path / "x")], check=True)
    top = tmp_path / "x" / tarball.name.removesuffix(".tar.gz")
    proc = subprocess.run(["sha256sum", "--check", "--quiet", SUMS_NAME], cwd=top)
    assert proc.returncode == 0
    prov = json.loads((top / PROVENANCE_NAME).read_text())
    rs = ResultSet.load(set_a)
    assert (prov["aiter_id"], prov["toolchain_id"], prov["device_id"]) == (
        rs.aiter_id,
        rs.toolchain_id,
        "emulator",
    )
    assert prov["tables"]["roundtrip.parquet"]["rows"] == 2
    assert prov["toolchain"]["toolchain_id"] == rs.toolchain_id


def test_cli_archive_check_ok_then_tampered(set_a, tmp_path, capsys):
    assert cli_main(["archive", str(set_a), "-o", str(tmp_path / "arch")]) == 0
    (tarball,) = (tmp_path / "arch").iterdir()
    assert cli_main(["archive", "--check", str(tarball)]) == 0
    assert "OK" in capsys.readouterr().out
    top = tarball.name.removesuffix(".tar.gz")

    def tamper(members):
        members["verify.parquet"] = members["verify.parquet"][:-9] + b"tampered!"
        del members["kernels.parquet"]
        members["extra.txt"] = b"not listed\n"

    repack(tarball, top, tamper)
    assert cli_main(["archive", "--check", str(tarball)]) == 1
    out = capsys.readouterr().out
    assert "changed: verify.parquet" in out
    assert "missing: kernels.parquet" in out
    assert f"not in {SUMS_NAME}: extra.txt" in out
    result = check_archive(tarball)
    assert (result.changed, result.missing, result.unlisted) == (
        ["verify.parquet"],
        ["kernels.parquet"],
        ["extra.txt"],
    )


def test_a_tampered_rebuilt_object_is_named(set_a, tmp_path):
    tarball = create_archive(set_a, tmp_path)
    co = next(n.name for n in (set_a / "rebuilt").glob("*.co"))

    def flip(members):
        data = bytearray(members[f"rebuilt/{co}"])
        data[len(data) // 2] ^= 1
        members[f"rebuilt/{co}"] = bytes(data)

    repack(tarball, tarball.name.removesuffix(".tar.gz"), flip)
    assert check_archive(tarball).changed == [f"rebuilt/{co}"]


def test_broken_and_foreign_archives_are_errors(set_a, tmp_path, capsys):
    tarball = create_archive(set_a, tmp_path)
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(tarball.read_bytes()[:4000])
    assert cli_main(["archive", "--check", str(truncated)]) == 2
    assert "not a readable .tar.gz" in capsys.readouterr().err
    foreign = tmp_path / "foreign.tar.gz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    foreign.write_bytes(gzip.compress(raw.getvalue()))
    assert cli_main(["archive", "--check", str(foreign)]) == 2
    assert "outside <top>/" in capsys.readouterr().err
    assert cli_main(["archive", str(set_a)]) == 2  # no -o


def test_archives_and_reports_do_not_depend_on_the_home_directory(set_a, tmp_path, monkeypatch):
    """The same result set on two machines whose caches and homes differ (the provisioned
    toolchain lives under each user's ~/.cache): the same archive bytes and report header."""
    from f4pipe.core.cache import cache_root
    from f4pipe.report import build_report

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    real = str(cache_root())  # where this machine's toolchain.json points

    def on_machine(home: str, name: str):
        cache = f"{home}/.cache/f4pipe"
        copy = shutil.copytree(set_a, tmp_path / name / "results" / "wheel-subset")
        tc_path = copy / "toolchain.json"
        assert real in tc_path.read_text()
        tc_path.write_text(tc_path.read_text().replace(real, cache))
        monkeypatch.setenv("HOME", home)
        monkeypatch.setenv("F4PIPE_CACHE", cache)
        report = build_report(copy)
        header = report.index.read_text().split("</table>", 1)[0]
        return create_archive(copy, tmp_path / name / "out").read_bytes(), header

    first, header_1 = on_machine("/home/ana", "one")
    second, header_2 = on_machine("/srv/users/bo", "two")
    assert header_1 == header_2 and "$F4PIPE_CACHE" in header_1
    assert first == second
