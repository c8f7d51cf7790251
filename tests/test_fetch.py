"""The fetch stage against real sources: PyPI, a git repository served by file://, a local dir.

The git and local sources are built from a few of the real f4gemm code objects (from the
`f4gemm_dir` fixture) with a trimmed manifest, so they exercise the same bytes as the wheel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from f4pipe.aiter.aiterdir import AiterDir
from f4pipe.aiter.manifest import MANIFEST_NAME, manifest_text, read_manifest
from f4pipe.cli import main
from f4pipe.core.errors import ChecksumError, ConfigError, FetchError, ManifestError
from f4pipe.core.fsio import sha256_file
from f4pipe.core.layout import PROVENANCE_JSON
from f4pipe.fetch import (
    DEFAULT_PACKAGE,
    DEFAULT_VERSION,
    GIT_F4GEMM_PATH,
    TREE_MARKER_NAME,
    WHEEL_F4GEMM_PREFIX,
    aiter_id_for,
    ensure_wheel,
    extract_wheel_file,
    extract_wheel_tree,
    fetch_aiter,
    wheel_cache_dir,
)

PYPI = {"kind": "pypi", "package": DEFAULT_PACKAGE, "version": DEFAULT_VERSION}
TUNED = "a4w4_blockscale_tuned_gemm.csv"
MODEL_TUNED = "model_configs/dsv3_a4w4_blockscale_tuned_gemm.csv"
SAMPLE = (
    "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256.co",
    "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128.co",
    "f4gemm_bf16_per1x32Fp4_noBpreShuffle_256x256.co",
)
UNLISTED = "f4gemm_bf16_per1x32Fp4_BpreShuffle_64x128.co"


def make_f4gemm(f4gemm_dir: Path, dest: Path, *, drop: str | None = None) -> Path:
    """A small real f4gemm directory: three code objects, their manifest rows (aiter HEAD's
    header case), an unlisted .co and a non-.co file that fetch must leave behind."""
    dest.mkdir(parents=True)
    entries = [e for e in read_manifest(f4gemm_dir) if e.co_name in SAMPLE]
    (dest / MANIFEST_NAME).write_text(manifest_text(entries))
    for name in (*SAMPLE, UNLISTED):
        if name != drop:
            shutil.copyfile(f4gemm_dir / name, dest / name)
    (dest / "codegen.py").write_text("# not a code object\n")
    return dest


def git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    return subprocess.run([*cmd, *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def git_repo(tmp_path: Path, f4gemm_dir: Path) -> tuple[str, str, Path]:
    """(file:// url, commit of `main`, repo): aiter's layout plus branches for failure cases."""
    repo = tmp_path / "aiter.git-src"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    git(repo, "config", "uploadpack.allowFilter", "true")  # serve blob-less fetches, as GitHub
    make_f4gemm(f4gemm_dir, repo / GIT_F4GEMM_PATH)
    (repo / "README.md").write_text("not aiter, a test double of its layout\n")
    configs = repo / "aiter" / "configs"
    extract_wheel_file(PYPI, configs / TUNED)  # the wheel's table, as the repository has it
    (configs / "model_configs").mkdir()
    (configs / MODEL_TUNED).write_text((configs / TUNED).read_text())
    (configs / "a4w4_blockscale_untuned_gemm.csv").write_text("M,N,K\n1,800,5120\n")
    (configs / "bf16_tuned_gemm.csv").write_text("M,N,K\n1,800,5120\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "f4gemm")
    commit = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "missing-co")
    git(repo, "rm", "-q", f"{GIT_F4GEMM_PATH}/{SAMPLE[1]}")
    git(repo, "commit", "-q", "-m", "lose a listed code object")
    git(repo, "checkout", "-q", "-b", "no-f4gemm", "main")
    git(repo, "rm", "-q", "-r", "hsa")
    git(repo, "commit", "-q", "-m", "no kernels")
    git(repo, "checkout", "-q", "main")
    return repo.as_uri(), commit, repo


def mtimes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(directory.rglob("*"))}


def assert_fetched_copy(aiter_dir: Path, source_dir: Path, names: tuple[str, ...]) -> dict:
    """The copy holds exactly the manifest + listed .co, byte-identical, as recorded."""
    record = AiterDir(aiter_dir).verify()
    f4gemm = aiter_dir / "f4gemm"
    assert sorted(p.name for p in f4gemm.iterdir()) == sorted([MANIFEST_NAME, *names])
    for name in [MANIFEST_NAME, *names]:
        assert (f4gemm / name).read_bytes() == (source_dir / name).read_bytes()
        assert record["files"][name] == {
            "sha256": sha256_file(source_dir / name),
            "size": (source_dir / name).stat().st_size,
        }
    assert record["aiter_id"] == aiter_dir.name
    assert record["f4pipe_version"]
    return record


# ---------------------------------------------------------------------------------------------
# PyPI


@pytest.mark.network
def test_pypi_fetch_records_wheel_and_rerun_is_offline(tmp_path: Path) -> None:
    res = tmp_path / "resources"
    result = fetch_aiter(PYPI, res)
    assert result.aiter_id == "pypi-amd-aiter-0.1.7.post2.dev18" == aiter_id_for(PYPI)
    assert result.f4gemm_dir == res / "aiter" / result.aiter_id / "f4gemm"
    manifest = read_manifest(result.f4gemm_dir)
    assert len(manifest) == 35
    record = assert_fetched_copy(
        result.f4gemm_dir.parent, result.f4gemm_dir, tuple(e.co_name for e in manifest)
    )
    wheel, wheel_sha = ensure_wheel(PYPI)
    # the release's host facts, read from the wheel (tests/test_hostfacts.py)
    host = record["source"].pop("host_facts")
    assert host["scale padding (e8m0_shuffle)"]["value"] == "arbitrary"
    assert record["source"] == {
        "kind": "pypi",
        "package": DEFAULT_PACKAGE,
        "version": DEFAULT_VERSION,
        "wheel": wheel.name,
        "wheel_sha256": wheel_sha,
        "wheel_size": wheel.stat().st_size,
        "f4gemm_dir": f"{wheel.name}:{WHEEL_F4GEMM_PREFIX}",
        "tables_dir": f"{wheel.name}:aiter/configs",
    }
    # the wheel's one a4w4 tuned table comes along (the untuned shape list does not)
    assert list(record["tables"]) == ["a4w4_blockscale_tuned_gemm.csv"]
    assert result.aiter.tuned_tables() == {
        "a4w4_blockscale_tuned_gemm.csv": result.f4gemm_dir.parent
        / "configs"
        / "a4w4_blockscale_tuned_gemm.csv"
    }
    assert wheel_sha == sha256_file(wheel)
    assert record["skipped"] == ["codegen.py"]

    # Re-run: nothing changes and no wheel is needed (an empty cache stays unused).
    before = mtimes(result.f4gemm_dir.parent)
    empty_cache = tmp_path / "empty-cache"
    again = fetch_aiter({**PYPI, "sha256": wheel_sha}, res, cache_dir=empty_cache)
    assert again == dataclasses.replace(result, fetched=False)
    assert mtimes(result.f4gemm_dir.parent) == before
    assert not empty_cache.exists()


@pytest.mark.network
def test_pypi_changed_pin_and_tampered_copy_are_errors(tmp_path: Path) -> None:
    res = tmp_path / "resources"
    result = fetch_aiter(PYPI, res)
    recorded = result.aiter.provenance()["source"]["wheel_sha256"]
    wrong = "0" * 64
    with pytest.raises(ChecksumError, match=f"expected wheel sha256 {wrong}.*records {recorded}"):
        fetch_aiter({**PYPI, "sha256": wrong}, res)

    victim = result.f4gemm_dir / SAMPLE[0]
    expected = sha256_file(victim)
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    actual = sha256_file(victim)
    with pytest.raises(ChecksumError) as err:
        fetch_aiter(PYPI, res)
    assert str(victim) in str(err.value)
    assert f"expected sha256 {expected}" in str(err.value)
    assert f"actual {actual}" in str(err.value)
    assert sha256_file(victim) == actual  # never silently refetched


@pytest.mark.network
def test_cached_wheel_modified_is_an_error(tmp_path: Path) -> None:
    wheel, _ = ensure_wheel(PYPI)
    cache = tmp_path / "cache"
    where = wheel_cache_dir(DEFAULT_PACKAGE, DEFAULT_VERSION, cache)
    where.mkdir(parents=True)
    shutil.copyfile(wheel, where / wheel.name)
    shutil.copyfile(wheel.with_name(wheel.name + ".sha256"), where / (wheel.name + ".sha256"))
    assert ensure_wheel(PYPI, cache_dir=cache)[0] == where / wheel.name
    with open(where / wheel.name, "r+b") as fh:
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 1]))
    with pytest.raises(ChecksumError, match="cache was modified"):
        fetch_aiter(PYPI, tmp_path / "resources", cache_dir=cache)
    assert not (tmp_path / "resources" / "aiter" / aiter_id_for(PYPI)).exists()


@pytest.mark.network
def test_pypi_unknown_version(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match=r"amd-aiter==9\.9\.9.*no wheel for version 9\.9\.9"):
        fetch_aiter({**PYPI, "version": "9.9.9"}, tmp_path / "res", cache_dir=tmp_path / "c")


def test_pypi_network_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real pip against an index nobody listens on (no config files, no local mirrors).
    for name in list(os.environ):
        if name.upper().startswith("PIP_") or name.upper().endswith("_PROXY"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    with pytest.raises(FetchError, match="could not reach the package index"):
        fetch_aiter(PYPI, tmp_path / "res", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "res" / "aiter" / aiter_id_for(PYPI)).exists()


@pytest.mark.network
def test_extract_wheel_tree(tmp_path: Path, f4gemm_dir: Path) -> None:
    dest = tmp_path / "tree"
    assert extract_wheel_tree(PYPI, dest, WHEEL_F4GEMM_PREFIX) == dest
    extracted = sorted(p.name for p in dest.iterdir() if p.name != TREE_MARKER_NAME)
    assert extracted == sorted(["codegen.py", *(p.name for p in f4gemm_dir.iterdir())])
    for name in extracted[1:]:
        assert (dest / name).read_bytes() == (f4gemm_dir / name).read_bytes()
    before = mtimes(dest)
    extract_wheel_tree(PYPI, dest, WHEEL_F4GEMM_PREFIX)
    assert mtimes(dest) == before
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    with pytest.raises(FetchError, match="not made by extract_wheel_tree"):
        extract_wheel_tree(PYPI, foreign, WHEEL_F4GEMM_PREFIX)


# ---------------------------------------------------------------------------------------------
# git (a repository this test builds, served as file://)


def test_git_fetch_branch_then_pinned_commit_offline(
    tmp_path: Path, git_repo: tuple[str, str, Path]
) -> None:
    url, commit, repo = git_repo
    res = tmp_path / "resources"
    source = {"kind": "git", "url": url, "rev": "main"}
    assert aiter_id_for(source) == f"git-{commit[:12]}"
    result = fetch_aiter(source, res)
    assert result.fetched and result.aiter_id == f"git-{commit[:12]}"
    record = assert_fetched_copy(result.f4gemm_dir.parent, repo / GIT_F4GEMM_PATH, SAMPLE)
    # this tree holds no host code: every fact unknown, naming the file
    host = record["source"].pop("host_facts")
    assert {f["value"] for f in host.values()} == {"unknown"}
    assert record["source"] == {
        "kind": "git",
        "url": url,
        "rev": "main",
        "commit": commit,
        "f4gemm_dir": GIT_F4GEMM_PATH,
        "tables_dir": "aiter/configs",
    }
    assert record["skipped"] == sorted(["codegen.py", UNLISTED])
    # every a4w4 tuned GEMM table, model_configs included; untuned and other tables stay out
    assert sorted(record["tables"]) == sorted([TUNED, MODEL_TUNED])
    for rel, path in result.aiter.tuned_tables().items():
        assert path.read_bytes() == (repo / "aiter" / "configs" / rel).read_bytes()
    assert [e.co_name for e in read_manifest(result.f4gemm_dir)] == [
        e.co_name for e in read_manifest(repo / GIT_F4GEMM_PATH)
    ]

    # Pinned by commit, a re-run needs no repository at all.
    before = mtimes(result.f4gemm_dir.parent)
    shutil.rmtree(repo)
    pinned = {"kind": "git", "url": url, "rev": commit}
    assert aiter_id_for(pinned) == result.aiter_id
    again = fetch_aiter(pinned, res)
    assert not again.fetched and again.f4gemm_dir == result.f4gemm_dir
    assert mtimes(result.f4gemm_dir.parent) == before


def test_a_local_copy_of_a_fetched_aiter_keeps_its_tuned_tables(
    tmp_path: Path, git_repo: tuple[str, str, Path]
) -> None:
    """resources/aiter/<id>/ copied elsewhere (f4gemm/ beside configs/) is a local source with
    the same tables: the byte-identical update flow audits what the first set audited."""
    url, _, _ = git_repo
    first = fetch_aiter({"kind": "git", "url": url, "rev": "main"}, tmp_path / "res")
    copy = tmp_path / "copy"
    shutil.copytree(first.f4gemm_dir.parent, copy)
    (copy / "provenance.json").unlink()
    local = fetch_aiter({"kind": "local", "path": str(copy / "f4gemm")}, tmp_path / "res2")
    tables = local.aiter.tuned_tables()
    assert sorted(tables) == sorted([TUNED, MODEL_TUNED])
    for rel, path in first.aiter.tuned_tables().items():
        assert tables[rel].read_bytes() == path.read_bytes()


def test_git_fetch_by_commit(tmp_path: Path, git_repo: tuple[str, str, Path]) -> None:
    url, commit, repo = git_repo
    result = fetch_aiter({"kind": "git", "url": url, "rev": commit}, tmp_path / "res")
    assert result.fetched and result.aiter_id == f"git-{commit[:12]}"
    assert_fetched_copy(result.f4gemm_dir.parent, repo / GIT_F4GEMM_PATH, SAMPLE)


def test_git_errors(tmp_path: Path, git_repo: tuple[str, str, Path]) -> None:
    url, commit, _ = git_repo
    res = tmp_path / "res"
    with pytest.raises(FetchError, match="has no branch or tag 'no-such-branch'"):
        fetch_aiter({"kind": "git", "url": url, "rev": "no-such-branch"}, res)
    absent = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(FetchError, match=f"git fetch {url} {absent} failed"):
        fetch_aiter({"kind": "git", "url": url, "rev": absent}, res)
    with pytest.raises(FetchError, match="is not a git repository"):
        fetch_aiter({"kind": "git", "url": (tmp_path / "nowhere").as_uri(), "rev": "main"}, res)
    with pytest.raises(ManifestError, match=f"commit .* lists 1 code object.*: {SAMPLE[1]};"):
        fetch_aiter({"kind": "git", "url": url, "rev": "missing-co"}, res)
    with pytest.raises(ManifestError, match=f"has no {GIT_F4GEMM_PATH}/{MANIFEST_NAME}"):
        fetch_aiter({"kind": "git", "url": url, "rev": "no-f4gemm"}, res)
    with pytest.raises(ConfigError, match="full 40-hex"):
        fetch_aiter({"kind": "git", "url": url, "rev": commit[:10]}, res)
    # Nothing half-written is left behind.
    assert not [p for p in (res / "aiter").iterdir() if not p.name.endswith(".lock")]


# ---------------------------------------------------------------------------------------------
# local directories


@pytest.fixture
def aiter_tree(tmp_path: Path, f4gemm_dir: Path) -> Path:
    """An installed wheel's layout: <site>/aiter_meta/hsa/gfx950/f4gemm with a small real f4gemm
    directory, <site>/aiter/configs with the wheel's tuned table; returns <site>/aiter_meta."""
    meta = tmp_path / "aiter_meta"
    make_f4gemm(f4gemm_dir, meta / "hsa" / "gfx950" / "f4gemm")
    extract_wheel_file(PYPI, tmp_path / "aiter" / "configs" / TUNED)
    return meta


def test_local_accepts_both_aiter_asm_dir_meanings(tmp_path: Path, aiter_tree: Path) -> None:
    res = tmp_path / "resources"
    f4gemm = aiter_tree / "hsa" / "gfx950" / "f4gemm"
    seed_meaning = {"kind": "local", "path": str(aiter_tree / "hsa")}  # appends gfx950/f4gemm
    result = fetch_aiter(seed_meaning, res)
    assert result.fetched and result.aiter_id.startswith("local-")
    record = assert_fetched_copy(result.f4gemm_dir.parent, f4gemm, SAMPLE)
    # this tree holds no host code: every fact unknown, naming the file
    host = record["source"].pop("host_facts")
    assert {f["value"] for f in host.values()} == {"unknown"}
    assert record["source"] == {
        "kind": "local",
        "path": str(aiter_tree / "hsa"),
        "f4gemm_dir": str(f4gemm.resolve()),
        "tables_dir": str((aiter_tree.parent / "aiter" / "configs").resolve()),
    }
    assert list(record["tables"]) == [TUNED]
    assert result.aiter_id == f"local-{record['content_sha256'][:12]}"
    before = mtimes(result.f4gemm_dir.parent)
    for path in (aiter_tree / "hsa" / "gfx950", f4gemm):  # aiter's meaning; the dir itself
        source = {"kind": "local", "path": str(path)}
        assert aiter_id_for(source) == result.aiter_id
        assert fetch_aiter(source, res) == dataclasses.replace(result, fetched=False)
    assert mtimes(result.f4gemm_dir.parent) == before


def test_local_changed_bytes_new_id_or_pin_error(tmp_path: Path, aiter_tree: Path) -> None:
    res = tmp_path / "resources"
    f4gemm = aiter_tree / "hsa" / "gfx950" / "f4gemm"
    first = fetch_aiter({"kind": "local", "path": str(f4gemm)}, res)
    digest = first.aiter.provenance()["content_sha256"]
    old_sha = sha256_file(f4gemm / SAMPLE[2])
    data = bytearray((f4gemm / SAMPLE[2]).read_bytes())
    data[-1] ^= 0xFF
    (f4gemm / SAMPLE[2]).write_bytes(bytes(data))
    new_sha = sha256_file(f4gemm / SAMPLE[2])

    # Unpinned: different content is a different aiter id; the first stays valid.
    second = fetch_aiter({"kind": "local", "path": str(f4gemm)}, res)
    assert second.fetched and second.aiter_id != first.aiter_id
    first.aiter.verify()

    # Pinned to the first content: the change is an error naming the file and both digests.
    with pytest.raises(ChecksumError) as err:
        fetch_aiter({"kind": "local", "path": str(f4gemm), "sha256": digest}, res)
    message = str(err.value)
    assert f"pins {digest}" in message
    assert f"{SAMPLE[2]}: expected sha256 {old_sha}, actual {new_sha}" in message
    assert SAMPLE[0] not in message


def test_local_tampered_or_extra_file_in_copy(tmp_path: Path, aiter_tree: Path) -> None:
    res = tmp_path / "resources"
    source = {"kind": "local", "path": str(aiter_tree / "hsa")}
    result = fetch_aiter(source, res)
    victim = result.f4gemm_dir / MANIFEST_NAME
    expected = sha256_file(victim)
    victim.write_text(victim.read_text() + "\n")
    with pytest.raises(ChecksumError, match=f"{victim}.*expected sha256 {expected}.*actual"):
        fetch_aiter(source, res)
    victim.write_text(victim.read_text()[:-1])  # restored: verifies again
    assert not fetch_aiter(source, res).fetched
    (result.f4gemm_dir / "rebuilt.co").write_bytes(b"\x7fELF")
    with pytest.raises(ChecksumError, match=r"not recorded in provenance.json: \['rebuilt.co'\]"):
        fetch_aiter(source, res)


def test_local_manifest_errors(tmp_path: Path, f4gemm_dir: Path) -> None:
    res = tmp_path / "resources"
    broken = make_f4gemm(f4gemm_dir, tmp_path / "broken", drop=SAMPLE[0])
    with pytest.raises(ManifestError, match=f"^{broken}: .* not there: {SAMPLE[0]};"):
        fetch_aiter({"kind": "local", "path": str(broken)}, res)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ManifestError, match=f"no {MANIFEST_NAME} in {empty}"):
        fetch_aiter({"kind": "local", "path": str(empty)}, res)
    assert not (res / "aiter").exists() or not list((res / "aiter").glob("local-*"))


def test_foreign_directory_is_not_overwritten(tmp_path: Path, aiter_tree: Path) -> None:
    res = tmp_path / "resources"
    source = {"kind": "local", "path": str(aiter_tree / "hsa")}
    foreign = res / "aiter" / aiter_id_for(source)
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FetchError, match=f"has no {PROVENANCE_JSON}"):
        fetch_aiter(source, res)
    assert (foreign / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ({"kind": "svn"}, "kind 'svn' is not one of"),
        ({"kind": "git", "url": "file:///x"}, r"missing key\(s\) \['rev'\]"),
        ({"kind": "pypi", "version": ">=0.1"}, "not an exact version"),
        ({"kind": "pypi", "sha256": "abc"}, "not 64 hex digits"),
        ({"kind": "local", "path": "x", "rev": "y"}, r"unknown key\(s\) \['rev'\]"),
        ({"kind": "git", "url": "file:///x", "rev": "--upload-pack=evil"}, "no leading '-'"),
    ],
)
def test_source_validation(source: dict, match: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=match):
        fetch_aiter(source, tmp_path)


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_fetch(tmp_path: Path, aiter_tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = tmp_path / "resources"
    argv = ["fetch", "--source", "local", "--path", str(aiter_tree / "hsa" / "gfx950")]
    assert main([*argv, "--resources", str(res), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fetched"] is True and out["aiter_id"].startswith("local-")
    assert out["source"]["f4gemm_dir"] == str((aiter_tree / "hsa" / "gfx950" / "f4gemm").resolve())
    assert Path(out["f4gemm_dir"]) == res / "aiter" / out["aiter_id"] / "f4gemm"
    assert main([*argv, "--resources", str(res)]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"{out['aiter_id']}\t") and "already present, verified" in line
    assert main(["fetch", "--source", "local", "--path", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["fetch", "--source", "git", "--path", "x"]) == 2
    assert "--source git takes" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Tuned tables (fetched with the code objects, every source kind)


def test_tuned_csv_from_git_local_and_the_fetched_aiter(
    tmp_path: Path, git_repo: tuple[str, str, Path], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    url, commit, repo = git_repo
    monkeypatch.chdir(tmp_path)  # --resources defaults to ./resources
    want = (repo / "aiter" / "configs" / MODEL_TUNED).read_bytes()
    argv = ["tuned-csv", "--source", "git", "--url", url, "--rev", commit, "--member"]
    assert main([*argv, f"aiter/configs/{MODEL_TUNED}", "-o", "git.csv"]) == 0
    assert (tmp_path / "git.csv").read_bytes() == want
    # no source option: the aiter fetched under ./resources
    assert main(["tuned-csv", "--member", MODEL_TUNED, "-o", "fetched.csv"]) == 0
    assert (tmp_path / "fetched.csv").read_bytes() == want
    argv = ["tuned-csv", "--source", "local", "--path", str(repo / "hsa"), "-o", "local.csv"]
    assert main(argv) == 0
    assert (tmp_path / "local.csv").read_bytes() == (repo / "aiter/configs" / TUNED).read_bytes()
    capsys.readouterr()
    assert main(["tuned-csv", "--member", "nope.csv", "-o", "x.csv"]) == 2
    assert "has no tuned table 'nope.csv'" in capsys.readouterr().err


def test_local_id_names_the_tables_too(tmp_path: Path, aiter_tree: Path) -> None:
    """A retuned table is new content: a new id, so the audit reruns."""
    source = {"kind": "local", "path": str(aiter_tree / "hsa")}
    first = fetch_aiter(source, tmp_path / "res")
    table = aiter_tree.parent / "aiter" / "configs" / TUNED
    table.write_text(table.read_text().replace(",0.0\n", ",0.5\n", 1))
    second = fetch_aiter(source, tmp_path / "res")
    assert second.fetched and second.aiter_id != first.aiter_id
    assert first.aiter.provenance()["files"] == second.aiter.provenance()["files"]


def test_changed_table_in_a_fetch_is_an_error(tmp_path: Path, aiter_tree: Path) -> None:
    result = fetch_aiter({"kind": "local", "path": str(aiter_tree / "hsa")}, tmp_path / "res")
    copy = result.f4gemm_dir.parent / "configs" / TUNED
    copy.write_text(copy.read_text() + "256,1,1,1,0,0,1.0,x,1,1,0.0\n")
    with pytest.raises(ChecksumError, match=f"{TUNED} is missing or changed after it was fetched"):
        result.aiter.verify()


def test_reading_a_fetch_made_before_tables_never_fetches(
    tmp_path: Path, git_repo: tuple[str, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A provenance without "tables" (an older f4pipe): reading the tables is an error naming
    `f4pipe fetch` and changes nothing, even with the source at hand; the next fetch of the
    source adds the tables, nothing else changed."""
    url, commit, _ = git_repo
    source = {"kind": "git", "url": url, "rev": commit}
    fetched = fetch_aiter(source, tmp_path / "res").aiter
    record = fetched.provenance()
    legacy = {k: v for k, v in record.items() if k not in ("tables", "manifest_header")}
    legacy["source"] = {k: v for k, v in record["source"].items() if k != "tables_dir"}
    shutil.rmtree(fetched.configs)
    fetched.provenance_json.write_text(json.dumps(legacy))
    f4gemm_before = mtimes(fetched.f4gemm)
    before = {**mtimes(fetched.path), "provenance": fetched.provenance_json.read_bytes()}
    with pytest.raises(FetchError, match="run `f4pipe fetch` with its source again"):
        fetched.tuned_tables()
    argv = ["audit-tuned", "--co-dir", str(fetched.f4gemm), "--no-emulate", "--toolchain-id", "t"]
    assert main(argv) == 2
    assert "before f4pipe fetched aiter's tuned tables" in capsys.readouterr().err
    assert {**mtimes(fetched.path), "provenance": fetched.provenance_json.read_bytes()} == before
    again = fetch_aiter(source, tmp_path / "res")  # the source completes it
    assert not again.fetched
    assert sorted(fetched.tuned_tables()) == sorted([TUNED, MODEL_TUNED])
    completed = fetched.verify()
    assert completed["tables"] == record["tables"]
    assert completed["content_sha256"] == record["content_sha256"]
    assert mtimes(fetched.f4gemm) == f4gemm_before


@pytest.mark.network
def test_fetch_made_before_tables_is_completed_once(tmp_path: Path) -> None:
    """A provenance without "tables" (an older f4pipe) gets the wheel's tables added, nothing
    else changed."""
    res = tmp_path / "resources"
    aiter_dir = fetch_aiter(PYPI, res).f4gemm_dir.parent
    record = AiterDir(aiter_dir).provenance()
    legacy = {k: v for k, v in record.items() if k not in ("tables", "manifest_header")}
    legacy["source"] = {k: v for k, v in record["source"].items() if k != "tables_dir"}
    shutil.rmtree(aiter_dir / "configs")
    (aiter_dir / PROVENANCE_JSON).write_text(json.dumps(legacy))
    f4gemm_before = mtimes(aiter_dir / "f4gemm")
    again = fetch_aiter(PYPI, res)
    assert not again.fetched
    assert AiterDir(aiter_dir).tuned_tables() == {TUNED: aiter_dir / "configs" / TUNED}
    completed = AiterDir(aiter_dir).verify()
    assert completed["tables"] == record["tables"]
    assert completed["content_sha256"] == record["content_sha256"]
    assert mtimes(aiter_dir / "f4gemm") == f4gemm_before
