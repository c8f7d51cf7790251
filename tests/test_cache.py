"""What commands keep between runs in f4pipe's cache (f4pipe.core.cache): a kernel's static
findings, found once and read by every later command of the same f4pipe source, and never
kept by a library caller (a test that swaps a rule in must not leave its findings behind)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from f4pipe.analysis import hazards
from f4pipe.analysis.cfg import ByProgram, program_key
from f4pipe.cli import main
from f4pipe.codeobj.program import Program
from f4pipe.core.cache import KEPT_DIR

KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
SYMBOL = f"_ZN5aiter{len(KERNEL)}{KERNEL}E"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("F4PIPE_CACHE", str(root))
    monkeypatch.setattr(hazards, "_WAIT_STATE_FINDINGS", ByProgram())  # this process: empty
    return root


def counted_pass(monkeypatch) -> list[int]:
    """Count the static wait-state passes run (the pass itself unchanged)."""
    calls: list[int] = []
    real = hazards.wait_state_findings

    def counting(model, cfg):
        calls.append(1)
        return real(model, cfg)

    monkeypatch.setattr(hazards, "wait_state_findings", counting)
    return calls


def test_a_command_keeps_a_kernels_findings_for_the_next(cache, f4gemm_dir, monkeypatch, capsys):
    co = str(f4gemm_dir / f"{KERNEL}.co")
    stale = cache / KEPT_DIR / "0.0.0+src.another-checkout"
    stale.mkdir(parents=True)
    calls = counted_pass(monkeypatch)
    assert main(["hazards", co]) == 0
    first = capsys.readouterr().out
    assert calls == [1]
    entries = sorted(cache.glob(f"{KEPT_DIR}/*/*/*.pickle"))
    assert [p.parent.name for p in entries] == ["counter-findings", "wait-state-findings"]
    assert not stale.exists(), "another f4pipe source's entries are never read: removed"

    monkeypatch.setattr(hazards, "_WAIT_STATE_FINDINGS", ByProgram())  # as a new process starts
    assert main(["hazards", co]) == 0
    assert calls == [1], "the second command read the kept findings"
    assert capsys.readouterr().out == first


def test_an_unreadable_entry_is_found_again_and_replaced(cache, f4gemm_dir, monkeypatch, capsys):
    co = str(f4gemm_dir / f"{KERNEL}.co")
    assert main(["hazards", co]) == 0
    first = capsys.readouterr().out
    (entry,) = cache.glob(f"{KEPT_DIR}/*/wait-state-findings/*.pickle")
    entry.write_bytes(b"\x80\x05truncated")
    monkeypatch.setattr(hazards, "_WAIT_STATE_FINDINGS", ByProgram())
    calls = counted_pass(monkeypatch)
    assert main(["hazards", co]) == 0
    assert calls == [1]
    assert capsys.readouterr().out == first
    assert pickle.loads(entry.read_bytes()) == ()  # the shipped kernel has no findings


def test_a_library_caller_keeps_nothing(cache, f4gemm_dir):
    program = Program.load(f4gemm_dir / f"{KERNEL}.co", SYMBOL)
    report = hazards.analyse(program)
    assert report.count == 0
    assert not cache.exists()


def test_the_key_holds_the_workgroup_bounds_the_lds_ranges_use(f4gemm_dir):
    program = Program.load(f4gemm_dir / f"{KERNEL}.co", SYMBOL)
    wider = dataclasses.replace(program, max_workgroup_size=program.max_workgroup_size * 2)
    xyz = dataclasses.replace(program, workitem_id_dims=2)
    keys = {program_key(p) for p in (program, wider, xyz)}
    assert len(keys) == 3
