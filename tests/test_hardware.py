"""The same GEMMs on a real gfx950 GPU (hip-python) and on the emulator.

Runs only where a gfx950 GPU answers (`nox -s hardware` on an MI355X); everywhere else each test
is skipped with the reason the HIP runtime gave. The emulator is the reference here: on the
shapes the safety rules allow, hardware and emulator must produce the same bf16 bits, since both
execute the same code object on the same operands.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from f4pipe.aiter.manifest import read_manifest
from f4pipe.core.errors import NoDeviceError
from f4pipe.devices.hipdevice import HipDevice
from f4pipe.emu import EmulatorDevice
from f4pipe.host.gemm import GemmRequest, run_gemm

pytestmark = pytest.mark.hardware


@pytest.fixture(scope="module")
def gpu():
    try:
        device = HipDevice.open()
    except NoDeviceError as exc:
        pytest.skip(f"no gfx950 GPU: {exc}")
    if device.shim:  # f4pipe's HIP shim: tests/test_hipshim.py is its suite
        device.close()
        pytest.skip(f"no gfx950 GPU: {device.name} is f4pipe's HIP shim")
    yield device
    device.close()


def test_every_kernel_matches_the_emulator_bit_for_bit(gpu, f4gemm_dir: Path) -> None:
    manifest = read_manifest(f4gemm_dir)
    emulator = EmulatorDevice()
    for entry in manifest:
        request = GemmRequest(300, 2048, 1024, edge_policy="pad")
        on_gpu = run_gemm(gpu, entry, manifest.co_path(entry), request)
        emulated = run_gemm(emulator, entry, manifest.co_path(entry), request)
        assert on_gpu.passed, entry.name
        np.testing.assert_array_equal(on_gpu.d, emulated.d, err_msg=entry.name)


def test_splitk_passes_the_two_percent_bound(gpu, f4gemm_dir: Path) -> None:
    manifest = read_manifest(f4gemm_dir)
    for entry in (e for e in manifest if e.splitk):
        for log2 in range(1, 5):
            result = run_gemm(
                gpu, entry, manifest.co_path(entry), GemmRequest(256, 1024, 4096, log2)
            )
            assert result.passed, (entry.name, log2, result.verification)


def test_throughput_is_measured(gpu, f4gemm_dir: Path) -> None:
    manifest = read_manifest(f4gemm_dir)
    entry = manifest.get("f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256")
    request = GemmRequest(4096, 4096, 4096, verify=False, iters=20)
    result = run_gemm(gpu, entry, manifest.co_path(entry), request)
    assert result.us is not None and result.us > 0
    assert result.tflops is not None and result.tflops > 0
