"""The host flow (f4pipe.host.gemm) on the host-model device, and `f4pipe gemm`'s behaviour."""

from __future__ import annotations

import ctypes.util
import json
import re

import numpy as np
import pytest
from hostmodel import HostModelDevice, TimingModelDevice

import f4pipe.devices.opendevice as device_module
from f4pipe.cli import main
from f4pipe.core.errors import InputError, ShapeError
from f4pipe.host.gemm import GemmRequest, run_gemm, tflops
from f4pipe.host.kernarg import unpack_kernarg

PREFIX = "f4gemm_bf16_per1x32Fp4_"
BF16_HALF_ULP = 2.0**-8  # relative rounding bound of bf16 (8 significant bits)


def run(manifest, name, request, device=None):
    entry = manifest.get(PREFIX + name)
    return run_gemm(device or HostModelDevice(), entry, manifest.co_path(entry), request)


@pytest.mark.parametrize(
    "name", ["BpreShuffle_256x256", "noBpreShuffle_256x256", "BpreShuffle_96x640"]
)
def test_host_flow_verifies(manifest, name):
    # M=300 is an M edge noBpreShuffle does not bound (f4pipe.aiter.shaperules): it runs padded
    policy = "pad" if name.startswith("no") else "refuse"
    result = run(manifest, name, GemmRequest(300, 2048, 1024, edge_policy=policy))
    v = result.verification
    assert v.passed and v.bad == 0
    assert 0 < v.max_rel_err <= BF16_HALF_ULP  # only the bf16 rounding of the output
    assert result.us is None and result.not_timed_reason
    assert result.d.shape == (300, 2048)


def test_verification_catches_a_layout_bug(manifest):
    # The same flow against a kernel that reads pre-shuffled B as if it were plain must fail.
    result = run(
        manifest,
        "BpreShuffle_256x256",
        GemmRequest(64, 256, 512),
        HostModelDevice(honour_b_shuffle=False),
    )
    assert not result.passed and result.verification.bad > 0


def test_kernarg_and_grid_reach_the_device(manifest):
    device = HostModelDevice()
    result = run(manifest, "BpreShuffle_256x256", GemmRequest(256, 1024, 4096, 2), device)
    ((grid, blob),) = device.launches
    ka = unpack_kernarg(blob)
    assert grid == (4, 1, 4) == result.geometry.grid
    assert (ka["M"], ka["N"], ka["K"], ka["log2_k_split"]) == (256, 1024, 4096, 2)
    assert ka["stride_C0"] == 1024 and ka["stride_A0"] == ka["stride_B0"] == 4096
    assert ka["stride_ScaleA0"] == ka["stride_ScaleB0"] == 128
    assert result.passed and result.verification.atol == 2e-2 * result.verification.max_abs_ref


def test_canary_rows_beyond_m_are_returned(manifest):
    result = run(
        manifest,
        "BpreShuffle_32x128",
        GemmRequest(17, 256, 256, d_prefill=0xAB, keep_padded_d=True),
    )
    assert result.d_padded_bits.shape == (32, 256)
    assert (result.d_padded_bits[17:] == 0xABAB).all()
    assert result.passed


def test_splitk_refuses_a_prefill_and_non_splitk_refuses_a_split(manifest):
    with pytest.raises(InputError, match="zeroed"):
        run(manifest, "BpreShuffle_256x256", GemmRequest(32, 256, 1024, 1, d_prefill=0xAB))
    with pytest.raises(ShapeError, match="not a splitK kernel"):
        run(manifest, "BpreShuffle_96x640", GemmRequest(32, 256, 1024, 1))


def test_timed_path(manifest):
    device = TimingModelDevice()
    result = run(manifest, "BpreShuffle_256x256", GemmRequest(32, 256, 512, 1, iters=2), device)
    assert result.us > 0 and result.tflops == tflops(32, 256, 512, result.us)
    assert len(device.zeroed_before_timed) == 5 + 2  # splitK: memset before every launch
    assert tflops(4096, 4096, 4096, 33.5) == pytest.approx(4102.7, abs=0.1)  # seed README row


def test_seeds_are_recorded_and_change_the_operands(manifest):
    a = run(manifest, "BpreShuffle_32x128", GemmRequest(32, 128, 256, seed_a=1, seed_b=2))
    b = run(manifest, "BpreShuffle_32x128", GemmRequest(32, 128, 256, seed_a=3, seed_b=2))
    assert (a.seed_a, a.seed_b) == (1, 2) and not np.array_equal(a.d, b.d)


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_list(f4gemm_dir, capsys):
    assert main(["gemm", "--co-dir", str(f4gemm_dir), "--list"]) == 0
    out = capsys.readouterr().out
    assert "35 kernels" in out and out.count(".co") == 35


def test_cli_bad_n_names_the_rule(capsys):
    assert main(["gemm", "-m", "512", "-n", "1000", "-k", "2048", "--device", "hip"]) == 2
    err = capsys.readouterr().err
    assert "N % 16" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(ctypes.util.find_library("amdhip64") is not None, reason="HIP runtime here")
def test_cli_hip_without_runtime(capsys):
    assert main(["gemm", "-m", "512", "-n", "1024", "-k", "2048", "--device", "hip"]) == 2
    err = capsys.readouterr().err
    assert "no HIP runtime" in err and "libamdhip64" in err and "Traceback" not in err


def test_cli_needs_a_co_dir(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("AITER_ASM_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./resources/aiter to fall back on
    monkeypatch.setattr(device_module, "open_device", lambda kind: HostModelDevice())
    assert main(["gemm"]) == 2
    assert "--co-dir" in capsys.readouterr().err


@pytest.fixture
def model_device(monkeypatch):
    """Run the CLI against the host-model device (the emulator's place until it lands)."""
    devices = []

    def fake_open(kind):
        devices.append(HostModelDevice())
        return devices[-1]

    monkeypatch.setattr(device_module, "open_device", fake_open)
    return devices


def test_cli_json_run(f4gemm_dir, model_device, capsys, monkeypatch):
    monkeypatch.setenv("AITER_ASM_DIR", str(f4gemm_dir))
    assert main(["gemm", "-m", "64", "-n", "256", "-k", "512", "--json", "--splitk", "-1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {
        "kernel", "M", "N", "K", "log2_k_split", "gdz", "max_abs_err", "max_rel_err",
        "err_frac", "passed", "us", "tflops", "us_is_hardware", "device", "padding", "races",
        "status", "hazards", "hazard", "advisories", "alpha_ignored",
    }  # fmt: skip
    assert out["passed"] is True and out["us"] is None and out["device"] == "hostmodel"
    assert out["status"] == "passed" and out["hazards"] is None  # no timing model here
    assert out["alpha_ignored"] is None  # alpha 1
    assert out["kernel"] == PREFIX + "BpreShuffle_256x256" and out["log2_k_split"] >= 1


def test_cli_human_run_and_kernel_choice(f4gemm_dir, model_device, capsys):
    args = ["gemm", "--co-dir", str(f4gemm_dir), "-m", "32", "-n", "256", "-k", "256"]
    assert main([*args, "--kernel", PREFIX + "BpreShuffle_32x128.co"]) == 0
    out = capsys.readouterr().out
    assert "BpreShuffle_32x128" in out and "grid=(2,1,1)" in out and "PASSED" in out
    assert "not measured: no gfx950 device" in out
    assert main([*args, "--kernel", PREFIX + "BpreShuffle_32x128", "--splitk", "2"]) == 2
    assert "cannot split K" in capsys.readouterr().err
    assert main([*args, "--kernel", "nonesuch"]) == 2
    assert main([*args, "--no-verify"]) == 0
    assert "verification skipped" in capsys.readouterr().out


def test_cli_failed_verification_exits_1(f4gemm_dir, monkeypatch, capsys):
    monkeypatch.setattr(
        device_module, "open_device", lambda kind: HostModelDevice(honour_b_shuffle=False)
    )
    args = ["gemm", "--co-dir", str(f4gemm_dir), "-m", "32", "-n", "256", "-k", "256"]
    assert main(args) == 1
    assert "FAILED" in capsys.readouterr().out


def test_the_verdict_line_states_the_criterion_it_applies(f4gemm_dir, model_device, capsys):
    """max_abs_err can exceed atol on a pass (the criterion is atol + rtol*|ref| per element):
    the PASS line says so instead of printing atol beside a larger error and 'PASSED'."""
    args = ["gemm", "--co-dir", str(f4gemm_dir), "-m", "32", "-n", "256", "-k", "256"]
    assert main([*args, "--kernel", "BpreShuffle_32x128"]) == 0
    out = capsys.readouterr().out
    (verdict,) = [line for line in out.splitlines() if "PASSED" in line]
    assert re.search(
        r"PASSED: 0 element\(s\) outside \|D - ref\| <= atol \+ rtol\*\|ref\|", verdict
    )
    assert not re.search(r"max_abs_err=\S+ .*atol=", out)  # the error and atol on one line
