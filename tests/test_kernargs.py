"""Which kernel arguments the shipped kernels use (f4pipe.analysis.kernargs), read statically and
checked against what the emulator computes from the same bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from f4pipe.analysis.kernargs import ignored_field, kernarg_loads
from f4pipe.cli import main
from f4pipe.emu import EmulatorDevice
from f4pipe.host.gemm import GemmRequest, run_gemm
from f4pipe.host.kernarg import KERNARG_BY_NAME

PREFIX = "f4gemm_bf16_per1x32Fp4_"
ALPHA = KERNARG_BY_NAME["alpha"].offset
#: The three kernels whose code multiplies by alpha (v_mul_f32 with the alpha SGPR).
APPLY_ALPHA = {"BpreShuffle_128x512", "BpreShuffle_256x256", "noBpreShuffle_256x256"}


def test_every_kernel_loads_the_abi_fields_and_most_ignore_alpha(manifest) -> None:
    """The seed's ABI table marks alpha as read by every kernel; 32 of 35 load it into an SGPR
    that no instruction reads. Every kernel reads the pointers, M, N, K and the strides."""
    used = {"ptr_D", "ptr_A", "ptr_B", "M", "N", "K", "ptr_ScaleA", "ptr_ScaleB"}
    used |= {"stride_C0", "stride_A0", "stride_B0", "stride_ScaleA0", "stride_ScaleB0"}
    for entry in manifest:
        loads = {k.offset: k for k in kernarg_loads(manifest.co_path(entry), entry.symbol)}
        for name in used:
            assert loads[KERNARG_BY_NAME[name].offset].read, (entry.name, name)
        assert ALPHA in loads, entry.name
    ignoring = {
        e.name.removeprefix(PREFIX)
        for e in manifest
        if ignored_field(manifest.co_path(e), e.symbol, ALPHA) is not None
    }
    assert len(ignoring) == 32 and ignoring.isdisjoint(APPLY_ALPHA)
    assert {e.name.removeprefix(PREFIX) for e in manifest} - ignoring == APPLY_ALPHA


@pytest.mark.parametrize(
    ("name", "ignores"), [("BpreShuffle_32x128", True), ("BpreShuffle_256x256", False)]
)
def test_the_emulator_agrees_with_the_static_answer(manifest, name: str, ignores: bool) -> None:
    """A kernel flagged as ignoring alpha gives bit-identical D at alpha 0.5 and 1.0; one that
    reads it does not (and passes its verification at 0.5)."""
    entry = manifest.get(PREFIX + name)
    co = manifest.co_path(entry)
    assert (ignored_field(co, entry.symbol, ALPHA) is not None) == ignores
    device = EmulatorDevice()
    one = run_gemm(device, entry, co, GemmRequest(256, 256, 512, alpha=1.0))
    half = run_gemm(device, entry, co, GemmRequest(256, 256, 512, alpha=0.5))
    device.close()
    assert np.array_equal(one.d, half.d) == ignores
    assert half.status == ("failed" if ignores else "passed")


def test_gemm_says_why_a_kernel_fails_at_another_alpha(f4gemm_dir: Path, capsys) -> None:
    argv = ["gemm", "--co-dir", str(f4gemm_dir), "-m", "32", "-n", "256", "-k", "512"]
    argv += ["--device", "emulator", "--kernel", PREFIX + "BpreShuffle_32x128"]
    assert main([*argv, "--alpha", "0.5"]) == 1
    out = capsys.readouterr().out
    assert "note: this kernel ignores alpha: it loads kernarg 0x40 into s41" in out
    assert main(argv) == 0  # alpha 1: no note
    assert "ignores alpha" not in capsys.readouterr().out
