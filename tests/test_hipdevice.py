"""The hip-python Device's host logic: the `extra` launch array, error translation, kernarg
sizing, the version check and the no-device paths. The HIP path itself runs on f4pipe's HIP
shim in tests/test_hipshim.py and on a GPU in tests/test_hardware.py."""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
from types import SimpleNamespace

import pytest
from hip import hip

try:  # where hip-python keeps its `extra` wrapper: rocm.bindings from 10.0 on, hip before
    from rocm.bindings._hip_helpers import HipModuleLaunchKernel_extra
except ImportError:
    from hip._hip_helpers import HipModuleLaunchKernel_extra

from f4pipe.core.errors import DeviceError, HipVersionError, NoDeviceError
from f4pipe.devices.hipdevice import (
    HipDevice,
    KernargExtra,
    _call,
    _text,
    check_versions,
    device_id_from,
    fit_kernarg,
)
from f4pipe.devices.opendevice import open_device
from f4pipe.host.kernarg import KERNARG_SIZE, pack_kernarg

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
        hipGetErrorString=lambda err: (0, b"out of memory"),
    )
    assert _call(fake, "hipMalloc", (0, 1234)) == 1234
    assert _call(fake, "hipFree", (0,)) is None
    with pytest.raises(
        DeviceError, match=r"hipMalloc\(64\) failed: hipErrorOutOfMemory: out of memory"
    ):
        _call(fake, "hipMalloc(64)", (2, None))


def test_kernarg_is_sized_to_the_kernels_segment():
    blob = pack_kernarg({"M": 300, "N": 2048, "K": 1024})
    assert fit_kernarg(blob, 384) == blob + bytes(12)
    assert fit_kernarg(blob, 368) == blob[:368]  # noBpreShuffle: log2_k_split (0) falls off
    split = pack_kernarg({"M": 300, "N": 2048, "K": 1024, "log2_k_split": 1})
    with pytest.raises(DeviceError, match="sets bytes past the kernel's 368-byte"):
        fit_kernarg(split, 368)


def test_version_mismatch_names_both_versions_and_the_release_to_install():
    built_for_7_0 = SimpleNamespace(HIP_VERSION_MAJOR=7, HIP_VERSION_MINOR=0)
    check_versions(built_for_7_0, 70051831)  # 7.0.x: any patch level matches
    with pytest.raises(HipVersionError) as info:
        check_versions(built_for_7_0, 60443484)
    message = str(info.value)
    assert "is built for HIP 7.0, but the HIP runtime (libamdhip64.so) is HIP 6.4" in message
    assert "pip install 'hip-python==6.4.*'" in message
    with pytest.raises(HipVersionError, match="f4pipe supports the hip-python releases for HIP"):
        check_versions(built_for_7_0, 60200000)


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
