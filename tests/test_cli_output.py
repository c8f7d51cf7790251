"""What the command line prints, read as a user reads it: output into a closed pipe ends
quietly, `hazards` takes an .s as `waits` and `try` do, no printed path is gone when the
command ends, and `toolchain` says where its LLVM came from in words."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from f4pipe.cli import main

KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"


def test_output_into_a_closed_pipe_ends_quietly_with_exit_0(f4gemm_dir):
    """`f4pipe predict ... | head -1`: the reader has gone before the table is written (one
    kernel: a first prediction traces it, about a second per kernel)."""
    read, write = os.pipe()
    os.close(read)
    shape = ["-m", "4096", "-n", "4096", "-k", "4096", "--kernel", "BpreShuffle_32x128"]
    proc = subprocess.run(
        [sys.executable, "-m", "f4pipe", "predict", *shape, "--co-dir", str(f4gemm_dir)],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write)
    assert (proc.returncode, proc.stderr) == (0, "")
    # the same command into an open pipe writes its table: the closed one had output to refuse
    shown = subprocess.run(
        [sys.executable, "-m", "f4pipe", "predict", *shape, "--co-dir", str(f4gemm_dir)],
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0 and "BpreShuffle_32x128" in shown.stdout


def test_hazards_takes_assembly_as_waits_and_try_do(tmp_path, toolchain, f4gemm_dir, capsys):
    from f4pipe.codeobj.co2asm import co2asm

    asm = tmp_path / "k.s"
    asm.write_text(co2asm(f4gemm_dir / f"{KERNEL}.co", toolchain))
    tool = ["--toolchain-bin", str(toolchain.bin_dir)]
    assert main(["hazards", str(asm), *tool]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{asm}:_ZN5aiter41{KERNEL}E: ") and "0 wait-state and 0 counter" in out
    # the .s is what is checked: without a main-loop wait it has counter findings, exit 1
    broken = tmp_path / "nowait.s"
    text = asm.read_text()
    broken.write_text(text.replace("\ts_waitcnt vmcnt(12) lgkmcnt(5)\n", "\ts_nop 0\n", 1))
    assert main(["hazards", str(broken), *tool]) == 1
    assert re.search(
        r"nowait\.s:\S+: \d+ reachable instructions, 0 wait-state and [1-9]\d* counter",
        capsys.readouterr().out,
    )


def test_try_prints_no_path_that_is_gone_when_it_ends(tmp_path, base_asm, toolchain, f4gemm_dir):
    edit = tmp_path / "same.s"
    edit.write_text(base_asm)
    argv = ["try", str(edit), "--co-dir", str(f4gemm_dir), "--device", "emulator"]
    proc = subprocess.run(
        [sys.executable, "-m", "f4pipe", *argv, "--toolchain-bin", str(toolchain.bin_dir)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed = set(re.findall(r"(/[\w.+-]+(?:/[\w.+-]+)+)", proc.stdout))
    assert printed and [p for p in printed if not Path(p).exists()] == []


def test_toolchain_says_where_its_llvm_came_from(capsys):
    assert main(["toolchain"]) == 0
    out = capsys.readouterr().out
    assert "found by" not in out
    assert re.search(
        r"\((\w+), (from the config|from ROCm|found on PATH|found under /usr/lib|"
        r"provisioned by f4pipe from Debian)\) in /",
        out,
    )
