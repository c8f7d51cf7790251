"""f4pipe's HIP runtime shim: a libamdhip64.so backed by host memory and the gfx950 emulator.

Why: the hardware launcher (f4pipe.devices.hipdevice) goes through hip-python, whose API changes
between releases; the shim lets it run for real, with every supported hip-python release, on
a machine without ROCm (rung 4 of the design's ladder: API use, kernarg, grid and block
checked against the code object's metadata; nothing learned about silicon).

Pieces: libamdhip64.c (the HIP functions f4pipe calls, in C, built here with the system C
compiler), backend.py (what needs the code object: metadata, launch checks, the emulator).
The library is found the way hip-python finds ROCm: put it at `<root>/lib/libamdhip64.so`
and set ROCM_PATH=<root> (hip-python 10) and LD_LIBRARY_PATH=<root>/lib (hip-python 6.x and
7.x dlopen the bare name) before the process starts; `shim_environment` gives both.

The device can never pass for a GPU: it is named SHIM_DEVICE_NAME, HipDevice gives it the
device_id f4pipe.core.device.HIP_SHIM_DEVICE_ID, and its times are host wall clock, which the
bench stage records as such and never as TFLOP/s.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from f4pipe.arch import gfx950
from f4pipe.core.native import compile_shared

#: What the shim's hipGetDeviceProperties calls itself; HipDevice recognises the shim by it.
SHIM_DEVICE_NAME = "f4pipe HIP shim (gfx950 emulator, not a GPU)"
SHIM_ARCH = f"{gfx950.ARCH}:sramecc+:xnack-"
LIBRARY_NAME = "libamdhip64.so"
SOURCE_NAME = "libamdhip64.c"


def hip_version_number(major: int, minor: int, patch: int) -> int:
    """HIP's version integer, as hipRuntimeGetVersion reports it."""
    return major * 10_000_000 + minor * 100_000 + patch


def build_shim(root: Path, hip_version: int) -> Path:
    """Compile the shim into `<root>/lib/libamdhip64.so`, reporting HIP version `hip_version`
    (the integer of hip_version_number); return the library's path. The soname is the bare
    name, so a process that loaded it by path also satisfies dlopen("libamdhip64.so")."""
    lib = Path(root) / "lib" / LIBRARY_NAME
    lib.parent.mkdir(parents=True, exist_ok=True)
    source = resources.files(__package__).joinpath(SOURCE_NAME)
    flags = [
        "-std=c11",
        "-D_POSIX_C_SOURCE=199309L",
        "-O1",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fvisibility=hidden",
        f"-Wl,-soname,{LIBRARY_NAME}",
        f'-DF4PIPE_SHIM_DEVICE_NAME="{SHIM_DEVICE_NAME}"',
        f'-DF4PIPE_SHIM_ARCH="{SHIM_ARCH}"',
        f"-DF4PIPE_SHIM_HIP_VERSION={int(hip_version)}",
        f"-DF4PIPE_SHIM_LDS_BYTES={gfx950.LDS_BYTES_PER_CU}",
    ]
    with resources.as_file(source) as src:
        compile_shared(src, lib, flags, "the HIP shim")
    return lib


def shim_environment(lib: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default os.environ) with ROCM_PATH and LD_LIBRARY_PATH naming the shim, so a
    new process's hip-python finds it by its ordinary search."""
    env = dict(os.environ if base is None else base)
    lib_dir = Path(lib).parent
    env["ROCM_PATH"] = str(lib_dir.parent)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(lib_dir), env.get("LD_LIBRARY_PATH", "")) if p
    )
    return env
