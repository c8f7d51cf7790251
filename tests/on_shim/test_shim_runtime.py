"""The shim as hip-python sees it: found by the ordinary library search, reporting itself as
a shim, its hipDeviceProp_t and error names agreeing with the installed hip-python."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from hip import hip

from f4pipe.core.device import HIP_SHIM_DEVICE_ID
from f4pipe.devices.hipdevice import device_properties
from f4pipe.hipshim import SHIM_DEVICE_NAME


def loaded_runtime() -> list[str]:
    """Paths of every libamdhip64.so mapped into this process."""
    maps = Path("/proc/self/maps").read_text().splitlines()
    return sorted({line.split()[-1] for line in maps if line.endswith("libamdhip64.so")})


def test_hip_python_found_the_shim_by_its_search(device):
    shim = Path(os.environ["LD_LIBRARY_PATH"].split(os.pathsep)[0]) / "libamdhip64.so"
    assert loaded_runtime() == [str(shim)]
    assert Path(os.environ["ROCM_PATH"]) / "lib" / "libamdhip64.so" == shim


def test_the_device_calls_itself_a_shim(device):
    assert device.shim and device.name == SHIM_DEVICE_NAME
    assert device.device_id == HIP_SHIM_DEVICE_ID and "gfx" not in device.device_id
    assert device.arch.startswith("gfx950") and device.num_cu == 256


def test_device_properties_land_where_hip_python_reads_them(device):
    props = device_properties(hip, 0)
    assert props.warpSize == 64 and props.maxThreadsPerBlock == 1024
    assert (props.major, props.minor) == (9, 5)
    assert props.sharedMemPerBlock == 160 * 1024
    # fields after the 256-byte gcnArchName: the tail of the struct lines up too
    assert props.maxSharedMemoryPerMultiProcessor == 160 * 1024


def test_error_names_are_hip_pythons(device):
    lib = ctypes.CDLL("libamdhip64.so", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    lib.hipGetErrorName.restype = ctypes.c_char_p
    codes = [0, 1, 2, 3, 9, 17, 21, 100, 101, 200, 209, 400, 500, 600, 719, 801]
    for code in codes:
        names = {e.name for e in hip.hipError_t if e.value == code}
        assert lib.hipGetErrorName(code).decode() in names, code
