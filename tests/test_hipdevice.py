"""The hip-python Device's host logic. The HIP path itself needs ROCm and a gfx950 GPU; here we
check what surrounds it: the `extra` launch array, error translation, and the no-device paths."""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
from types import SimpleNamespace

import pytest
from hip import hip
from rocm.bindings._hip_helpers import HipModuleLaunchKernel_extra

from f4pipe.device import open_device
from f4pipe.errors import DeviceError, NoDeviceError
from f4pipe.hipdevice import HipDevice, KernargExtra, _call, _text, device_id_from
from f4pipe.kernarg import KERNARG_SIZE, pack_kernarg

HAS_HIP_RUNTIME = ctypes.util.find_library("amdhip64") is not None


def test_kernarg_extra_is_the_documented_config_array():
    blob = pack_kernarg({"M": 300, "N": 2048, "K": 1024})
    extra = KernargExtra(hip, blob)
    cfg = extra.config
    assert cfg[0] == hip.HIP_LAUNCH_PARAM_BUFFER_POINTER
    assert cfg[2] == hip.HIP_LAUNCH_PARAM_BUFFER_SIZE
    assert cfg[4] == hip.HIP_LAUNCH_PARAM_END
    assert ctypes.string_at(cfg[1], KERNARG_SIZE) == blob
    assert struct.unpack("<Q", ctypes.string_at(cfg[3], 8))[0] == KERNARG_SIZE == 0x174
    # hip-python's `extra` wrapper takes it as a plain pointer to our array, not a re-packed
    # list of values.
    assert int(HipModuleLaunchKernel_extra(cfg)) == ctypes.addressof(cfg)


def test_call_translates_hip_errors_by_name():
    fake = SimpleNamespace(
        hipError_t=SimpleNamespace(hipSuccess=0),
        hipGetErrorName=lambda err: (0, b"hipErrorOutOfMemory"),
    )
    assert _call(fake, "hipMalloc", (0, 1234)) == 1234
    assert _call(fake, "hipFree", (0,)) is None
    with pytest.raises(DeviceError, match=r"hipMalloc\(64\) failed: hipErrorOutOfMemory"):
        _call(fake, "hipMalloc(64)", (2, None))


def test_device_properties_text():
    assert _text(b"gfx950:sramecc+:xnack-\0\0\0") == "gfx950:sramecc+:xnack-"
    assert device_id_from("AMD Instinct MI355X", "gfx950:sramecc+:xnack-") == (
        "AMD_Instinct_MI355X-gfx950"
    )


@pytest.mark.skipif(HAS_HIP_RUNTIME, reason="this machine has a HIP runtime")
def test_without_hip_runtime_open_raises_no_device():
    with pytest.raises(NoDeviceError, match=r"no HIP runtime.*libamdhip64"):
        HipDevice.open()
    with pytest.raises(NoDeviceError, match="no HIP runtime"):
        open_device("hip")


def test_unknown_device_kind():
    with pytest.raises(NoDeviceError, match="unknown device kind 'cuda'"):
        open_device("cuda")
