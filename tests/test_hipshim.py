"""f4pipe's HIP shim: its launch checks can fail, and the HIP path runs on it through the
installed hip-python.

The shim is built here with the system C compiler for the HIP version the installed
hip-python was generated for. The tests that load it (tests/on_shim) run in their own pytest
process started with ROCM_PATH and LD_LIBRARY_PATH naming it, so hip-python finds it by its
ordinary library search and this process never loads a HIP runtime. `nox -s hip` repeats this
for every supported hip-python release.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hip import hip

from f4pipe.hipshim import build_shim, hip_version_number, shim_environment
from f4pipe.hipshim.backend import Launch, check_launch, read_kernels

REPO = Path(__file__).resolve().parent.parent
SMALL = (32, 256, 512)  # M, N, K: every kernel runs it in ~0.2 s on the emulator
KERNEL_256 = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"


@pytest.fixture(scope="module")
def shim_lib(tmp_path_factory) -> Path:
    """The shim, reporting the HIP version the installed hip-python is built for."""
    return build_shim(tmp_path_factory.mktemp("rocm"), int(hip.HIP_VERSION))


@pytest.fixture(scope="module")
def kernel_256(f4gemm_dir):
    """KernelInfo of the 256x256 tile, read from the real code object's metadata."""
    image = (f4gemm_dir / f"{KERNEL_256}.co").read_bytes()
    (info,) = read_kernels(image).values()
    return info


def kernarg_for(info, m: int, n: int, k: int, size: int | None = None) -> bytes:
    """A kernarg block with M, N, K where the kernel's metadata puts them."""
    blob = bytearray(info.kernarg_segment_size if size is None else size)
    for name, value in (("Mdim", m), ("Ndim", n), ("Kdim", k)):
        offset, _ = info.args[name]
        blob[offset : offset + 4] = value.to_bytes(4, "little")
    return bytes(blob)


def test_the_right_launch_passes_every_check(kernel_256):
    launch = Launch(
        kernel_256.name, (2, 1, 1), (256, 1, 1), 0, kernarg_for(kernel_256, 256, 512, 1024)
    )
    assert check_launch(kernel_256, launch) == []


def test_kernarg_off_by_four_is_refused(kernel_256):
    for size in (380, 388):
        blob = kernarg_for(kernel_256, 256, 512, 1024, size=size)
        problems = check_launch(
            kernel_256, Launch(kernel_256.name, (2, 1, 1), (256, 1, 1), 0, blob)
        )
        assert problems == [
            f"kernarg block is {size} bytes; the kernel's .kernarg_segment_size is 384"
        ]


def test_grid_in_threads_is_refused(kernel_256):
    blob = kernarg_for(kernel_256, 256, 512, 1024)
    (problem,) = check_launch(
        kernel_256, Launch(kernel_256.name, (512, 1, 1), (256, 1, 1), 0, blob)
    )
    assert "grid (512, 1, 1) is not the f4gemm launch for M=256 N=512 K=1024" in problem
    assert "it needs (2, 1, 1) workgroups (this grid counts work-items, not workgroups)" in problem


def test_block_of_64_is_refused(kernel_256):
    blob = kernarg_for(kernel_256, 256, 512, 1024)
    (problem,) = check_launch(kernel_256, Launch(kernel_256.name, (2, 1, 1), (64, 1, 1), 0, blob))
    assert problem == "block (64, 1, 1); the kernel's .reqd_workgroup_size is (256, 1, 1)"


def test_dynamic_lds_beyond_160k_is_refused(kernel_256):
    blob = kernarg_for(kernel_256, 256, 512, 1024)
    (problem,) = check_launch(kernel_256, Launch(kernel_256.name, (2, 1, 1), (256, 1, 1), 4, blob))
    assert problem == "LDS 163840 static + 4 dynamic bytes exceeds the gfx950's 163840"


def run_pytest_on_shim(lib: Path, env: dict[str, str], *args: str) -> str:
    """`pytest ARGS` in a new process whose hip-python finds the shim `lib`: its output,
    required to pass and to skip nothing."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env=shim_environment(lib) | env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.lower(), proc.stdout[-2000:]
    return proc.stdout


def test_hip_path_runs_on_the_shim(shim_lib, f4gemm_dir):
    """tests/on_shim in a process whose hip-python finds the shim by its ordinary search."""
    run_pytest_on_shim(shim_lib, {"F4PIPE_ON_SHIM": "1"}, "-q", "tests/on_shim")


def test_isa_tests_run_through_the_hip_path_on_the_shim(shim_lib):
    """`F4PIPE_HW=1 pytest -m isa`, the command an MI355X owner runs, end to end on the shim:
    every instruction case on the emulator and through hip-python, compared bit for bit
    (this proves the harness, not the hardware)."""
    out = run_pytest_on_shim(shim_lib, {"F4PIPE_HW": "1"}, "-v", "-m", "isa", "tests/test_isa.py")
    assert "test_hw_mode_runs_every_case_through_the_hip_path PASSED" in out


def run_f4pipe(lib: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m f4pipe ARGS` in a new process whose hip-python finds the shim `lib`."""
    return subprocess.run(
        [sys.executable, "-m", "f4pipe", *args],
        env=shim_environment(lib),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_gemm_command_runs_on_the_shim(shim_lib, f4gemm_dir):
    shape = ["-m", "32", "-n", "256", "-k", "512", "--kernel", KERNEL_256, "--iters", "1"]
    proc = run_f4pipe(shim_lib, "gemm", "--co-dir", str(f4gemm_dir), *shape, "--device", "hip")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "device: hip-shim-emulator" in proc.stdout and "PASSED" in proc.stdout
    assert "not GPU time, no TFLOP/s" in proc.stdout and "TFLOP/s," not in proc.stdout


def other_hip_version() -> tuple[int, int]:
    """A HIP major.minor that the installed hip-python is not built for."""
    return (6, 4) if (hip.HIP_VERSION_MAJOR, hip.HIP_VERSION_MINOR) != (6, 4) else (7, 0)


@pytest.mark.parametrize(
    "command", [("gemm", "auto"), ("gemm", "hip"), ("verify", "auto")], ids="-".join
)
def test_mismatched_hip_python_is_one_clear_error(command, tmp_path, f4gemm_dir):
    """A HIP runtime from another ROCm release: exit 2 naming both versions and the fix, no
    traceback, and `auto` does not quietly fall back to the emulator (nor a stage to rows
    that say skipped)."""
    major, minor = other_hip_version()
    lib = build_shim(tmp_path / "rocm", hip_version_number(major, minor, 1))
    name, device = command
    extra = ["--aiter-id", "a", "--toolchain-id", "t", "-o", str(tmp_path / "v.parquet")]
    args = ["--co-dir", str(f4gemm_dir), "--device", device, *(extra if name == "verify" else [])]
    proc = run_f4pipe(lib, name, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    bound = f"{hip.HIP_VERSION_MAJOR}.{hip.HIP_VERSION_MINOR}"
    assert (
        f"is built for HIP {bound}, but the HIP runtime (libamdhip64.so) is HIP {major}.{minor}"
        in proc.stderr
    )
    assert f"pip install 'hip-python=={major}.{minor}.*'" in proc.stderr
    assert "Traceback" not in proc.stderr and "PASSED" not in proc.stdout
    assert not (tmp_path / "v.parquet").exists()


def test_the_supported_releases_are_the_tested_ones():
    """pyproject's hip-python pin, the releases nox -s hip runs, and the HIP-to-release table
    HipDevice suggests from say the same thing."""
    import tomllib

    from f4pipe.devices.hipdevice import HIP_PYTHON_FOR_HIP

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    tested = project["tool"]["f4pipe"]["hip-python-releases"]
    series = {".".join(r.split(".")[:2]) for r in tested}
    assert series == set(HIP_PYTHON_FOR_HIP.values())
    (pin,) = [d for d in project["project"]["dependencies"] if d.startswith("hip-python")]
    assert pin == "hip-python>=6.4,<10.1"


def test_tune_times_the_candidates_the_model_cannot_separate_on_the_shim(
    shim_lib, f4gemm_dir, tmp_path
):
    """`tune --device hip` end to end through the HIP path (its measuring step): the
    shape's safe candidates within the model's p90 band of the predicted best, and at least
    its 3 fastest predicted, are timed with the bench protocol; the pick is the fastest timed.
    On the shim the times are the host's clock: the rows say shim-timed and the written `us`
    stays the prediction."""
    import json

    import pandas as pd

    from f4pipe.aiter.tuned import read_tuned
    from f4pipe.pipeline.tunemeasure import MIN_MEASURED

    shapes = tmp_path / "tiny.csv"
    shapes.write_text("name,M,N,K\ntiny,32,256,512\n")
    out, table = tmp_path / "tiny.tuned.csv", tmp_path / "tune.parquet"
    proc = run_f4pipe(
        shim_lib, "tune", "--co-dir", str(f4gemm_dir), "--shapes", str(shapes), "-o", str(out),
        "--table", str(table), "--device", "hip", "--iters", "1", "--repeats", "1",
        "--warmup", "0", "--warmup-ms", "0", "--hot", "--aiter-id", "a", "--toolchain-id", "t",
        "--store", str(tmp_path / "store"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "decided by the HIP shim's host clock" in proc.stdout
    rows = pd.read_parquet(table)
    safe = rows[rows["safe"]]
    best = safe["us_pred"].min()
    within = safe["us_pred"] <= best * (1 + safe["band_p90_pct"] / 100)
    fastest = safe["us_pred"].rank(method="first") <= MIN_MEASURED
    want = set(safe.index[within | fastest])
    timed = rows[rows["measured_on"] != ""]
    assert set(timed.index) == want and len(want) >= MIN_MEASURED
    assert (timed["measured_on"] == "hip-shim-emulator").all() and timed["us_measured"].gt(0).all()
    pick = rows[rows["picked"]]
    assert len(pick) == 1 and pick.index[0] == timed["us_measured"].idxmin()
    assert (rows["decided_by"] == "shim-timed").all()
    written = read_tuned(out)
    assert written["us"].tolist() == [round(float(pick["us_pred"].iloc[0]), 4)]
    record = json.loads(out.with_name("tiny.tuned.provenance.json").read_text())
    assert record["decided_by"] == {"shim-timed": 1} and record["measured_rows"] == []
