"""Finding and provisioning an LLVM that knows gfx950."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from f4pipe.cli import main
from f4pipe.codeobj.toolchain import (
    TOOLS,
    _nothing_found_message,
    find_toolchain,
    knows_gfx950,
    probe_dir,
    read_toolchain_json,
)
from f4pipe.core.errors import ToolchainError


@pytest.mark.network
def test_provisioning_from_debian_into_a_fresh_cache(tmp_path: Path, monkeypatch) -> None:
    """The real thing: Debian 13's LLVM unpacked into a private root, no root privileges used
    by the tools, gfx950 proven before use."""
    monkeypatch.setenv("F4PIPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # nothing LLVM-22-like on PATH
    tc = find_toolchain()
    assert tc.found_by in ("provisioned", "rocm", "system")
    if tc.found_by == "provisioned":
        assert tc.bin_dir == tmp_path / "cache" / "toolchain" / "debian-trixie-llvm-22" / "bin"
        assert tc.toolchain_id.startswith("llvm-22.")
        prov = json.loads((tc.bin_dir.parent / "provenance.json").read_text())
        assert any(p.startswith("libllvm22") for p in prov["packages"])
    for tool in TOOLS:
        assert tc.tool(tool).is_file()
    assert knows_gfx950(tc.bin_dir)
    # a second call finds the provisioned copy instead of downloading again
    assert find_toolchain() == tc


def _fake_llvm(bin_dir: Path, version: str) -> None:
    """Scripts standing in for an old LLVM's tools: they print a version and reject gfx950."""
    bin_dir.mkdir(parents=True)
    for tool in TOOLS:
        script = bin_dir / tool
        script.write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = "--version" ]; then echo "LLVM (http://llvm.org/):"; '
            f'echo "  LLVM version {version}"; exit 0; fi\n'
            "echo \"'gfx950' is not a recognized processor for this target\" >&2\n"
        )
        script.chmod(0o755)


def test_old_llvm_is_rejected_with_the_reason(tmp_path: Path) -> None:
    _fake_llvm(tmp_path / "old", "14.0.6")
    reason = probe_dir(tmp_path / "old", "system")
    assert isinstance(reason, str) and "older than 20" in reason
    _fake_llvm(tmp_path / "new", "21.1.0")
    reason = probe_dir(tmp_path / "new", "path")
    assert isinstance(reason, str) and "does not know gfx950" in reason


def test_configured_toolchain_must_work(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match="does not exist"):
        find_toolchain(str(tmp_path / "missing"))
    _fake_llvm(tmp_path / "old", "14.0.6")
    with pytest.raises(ToolchainError, match="configured toolchain unusable"):
        find_toolchain(str(tmp_path / "old"))
    (tmp_path / "partial").mkdir()
    with pytest.raises(ToolchainError, match="missing llvm-objdump"):
        find_toolchain(str(tmp_path / "partial"))


def test_nothing_found_says_what_to_install() -> None:
    msg = _nothing_found_message(["/usr/lib/llvm-14/bin: LLVM 14.0.6 is older than 20"])
    assert "Install ROCm" in msg and "LLVM >= 20" in msg and "toolchain.bin_dir" in msg


def test_toolchain_cli_writes_json(toolchain, tmp_path: Path, capsys) -> None:
    out = tmp_path / "toolchain.json"
    assert main(["toolchain", "--toolchain-bin", str(toolchain.bin_dir), "-o", str(out)]) == 0
    data = read_toolchain_json(out)
    assert data["toolchain_id"] == toolchain.toolchain_id
    assert Path(data["llvm-mc"]).is_file()
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ToolchainError, match="lacks toolchain_id"):
        read_toolchain_json(tmp_path / "bad.json")
