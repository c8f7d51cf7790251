"""What a hand-typed command reads to find its code objects and name its keys, with the network
cut and no LLVM to be found: reading an aiter directory never fetches, and naming a key never
provisions a toolchain."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from f4pipe.aiter.aiterdir import AiterDir, aiter_id_of, tuned_tables_of
from f4pipe.cli import main
from f4pipe.cli.locate import fetched_aiter_dir, locate_co_dir
from f4pipe.codeobj import toolchain as toolchain_module
from f4pipe.codeobj.toolchain import find_toolchain
from f4pipe.core.errors import ManifestError, ToolchainError
from f4pipe.fetch import aiter_id_for, fetch_aiter

TUNED = "a4w4_blockscale_tuned_gemm.csv"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection this process opens fails the test, and pip or git started from it find
    no server: a tripwire for work that must stay offline."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"tried to open a network connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.setenv("PIP_NO_INDEX", "1")


@pytest.fixture
def checkout(tmp_path: Path, f4gemm_dir: Path) -> Path:
    """An aiter checkout's layout, not fetched: <root>/hsa/gfx950/f4gemm beside
    <root>/aiter/configs (the real code objects and the wheel's tuned table)."""
    root = tmp_path / "aiter"
    shutil.copytree(f4gemm_dir, root / "hsa" / "gfx950" / "f4gemm")
    (root / "aiter" / "configs").mkdir(parents=True)
    shutil.copyfile(f4gemm_dir.parent / "configs" / TUNED, root / "aiter" / "configs" / TUNED)
    return root


def test_a_directory_without_provenance_is_read_offline(
    tmp_path: Path, checkout: Path, no_network: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout's id is its content (the id a local fetch gives it) and its tables are the
    tree's; a directory under resources/aiter/ without provenance is not a fetched aiter."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AITER_ASM_DIR", raising=False)
    located = locate_co_dir(checkout / "hsa")
    assert located.co_dir == checkout / "hsa" / "gfx950" / "f4gemm"
    assert located.fetched is None
    assert tuned_tables_of(located.co_dir) == {TUNED: checkout / "aiter" / "configs" / TUNED}
    content = aiter_id_of(located.co_dir)
    assert content.startswith("local-")
    foreign = tmp_path / "resources" / "aiter" / content
    shutil.copytree(located.co_dir, foreign / "f4gemm")
    assert AiterDir.holding(foreign / "f4gemm") is None
    assert fetched_aiter_dir() is None  # nothing was fetched: `--co-dir` is needed
    with pytest.raises(ManifestError, match="run `f4pipe fetch`"):
        locate_co_dir()
    shutil.rmtree(foreign)
    sources = [{"kind": "local", "path": str(checkout / "hsa")}]
    retuned = shutil.copytree(checkout, tmp_path / "retuned")
    with open(retuned / "aiter" / "configs" / TUNED, "a") as fh:
        fh.write("\n")  # other bytes: another content id
    sources.append({"kind": "local", "path": str(retuned / "hsa")})
    fetched = [fetch_aiter(source, tmp_path / "resources") for source in sources]
    assert fetched[0].aiter_id == content == aiter_id_for(sources[0])  # offline, too
    assert fetched[1].aiter_id not in (content, None)
    latest = fetched_aiter_dir()
    assert latest is not None and latest.path.name in (fetched[0].aiter_id, fetched[1].aiter_id)
    other = sources[1] if latest.path.name == fetched[0].aiter_id else sources[0]
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(
        f"aiter: {{kind: local, path: {other['path']}}}\n"
    )
    configured = fetched_aiter_dir()  # the config's source wins over the latest fetch
    assert configured is not None and configured.path.name == aiter_id_for(other)
    assert configured.path.name != latest.path.name
    assert sorted(configured.tuned_tables()) == [TUNED]


def test_naming_keys_never_provisions_llvm(
    tmp_path: Path, f4gemm_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """With an empty cache, a command that runs no LLVM tool names its toolchain key from a
    toolchain already there, or says how to name it; it never downloads one."""

    def tripwire() -> Path:
        raise AssertionError("provisioned LLVM to name a key")

    monkeypatch.setattr(toolchain_module, "provision_debian_llvm", tripwire)
    monkeypatch.setenv("F4PIPE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.chdir(tmp_path)  # no results/<aiter-id>/toolchain.json here
    table = f4gemm_dir.parent / "configs" / TUNED
    argv = ["audit-tuned", str(table), "--co-dir", str(f4gemm_dir), "--no-emulate"]
    try:
        present = find_toolchain(provision=False).toolchain_id
    except ToolchainError:
        present = None
    capsys.readouterr()
    code = main([*argv, "-o", "audit.parquet"])
    err = capsys.readouterr().err
    if present is None:  # this machine's case: no LLVM that knows gfx950 outside the cache
        assert code == 2, err
        assert "pass --toolchain-id or --toolchain-json, or run `f4pipe toolchain`" in err
        assert not (tmp_path / "audit.parquet").exists()
    else:
        assert code in (0, 1), err
        assert set(pq.read_table("audit.parquet")["toolchain_id"].to_pylist()) == {present}
    assert main([*argv, "--toolchain-id", "llvm-test", "-o", "keyed.parquet"]) in (0, 1)
    keys = pq.read_table("keyed.parquet").select(["aiter_id", "toolchain_id"]).to_pylist()
    assert {(r["aiter_id"], r["toolchain_id"]) for r in keys} == {
        (AiterDir.holding(f4gemm_dir).aiter_id(), "llvm-test")
    }
    assert not (tmp_path / "empty-cache").exists()
