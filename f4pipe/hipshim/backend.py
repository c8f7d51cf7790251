"""The Python half of the HIP shim: code objects, launch checks and the emulator.

libamdhip64.c calls these through ctypes callbacks (f4pipe_shim_attach). A module's image is
read with f4pipe.codeobj.codeobject; hipModuleGetFunction succeeds only for a kernel that the
metadata
note lists and the symbol table holds; hipModuleLaunchKernel is refused, with a message that
names the mismatch, unless the launch is what the kernel's metadata asks for:

- the kernarg block passed through `extra` is exactly `.kernarg_segment_size` bytes;
- the block is `.reqd_workgroup_size` (or fits `.max_flat_workgroup_size` when none is given);
- `.group_segment_fixed_size` plus the dynamic LDS fits the gfx950's 160 KiB;
- for aiter's f4gemm kernels, the grid counts workgroups and tiles D exactly: the seed
  README's geometry (x = ceil(N / tile_N), y = ceil(M / tile_M), z = the K splits), restated
  here from the kernarg values the metadata names rather than imported from f4pipe.host.kernarg,
  so that a wrong grid there is caught here.

Then the kernel runs on f4pipe's EmulatorDevice over the shim's host buffers: each is copied
into the emulator at its device address before the launch and back after it, through the
Device protocol only (alloc, upload, launch, download).
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import struct
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from f4pipe.arch import gfx950
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.core.device import DeviceBuffer
from f4pipe.core.errors import DeviceError, F4PipeError, NoDeviceError

from . import LIBRARY_NAME, SHIM_ARCH

# hipError_t values the backend returns (libamdhip64.c lists the names).
HIP_SUCCESS = 0
HIP_ERROR_INVALID_VALUE = 1
HIP_ERROR_INVALID_IMAGE = 200
HIP_ERROR_NO_BINARY_FOR_GPU = 209
HIP_ERROR_INVALID_HANDLE = 400
HIP_ERROR_NOT_FOUND = 500
HIP_ERROR_LAUNCH_FAILURE = 719

#: aiter's f4gemm kernels are named ..._<tileM>x<tileN> (seed README, "Dependency").
F4GEMM_SYMBOL = re.compile(r"f4gemm_.*_(\d+)x(\d+)E?$")
SPLITK_K_ALIGN = 256  # seed README: a K chunk is rounded up to 256 elements


class LaunchRefused(F4PipeError):
    """A launch the shim will not run; `code` is the hipError_t it returns."""

    def __init__(self, message: str, code: int = HIP_ERROR_INVALID_VALUE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class KernelInfo:
    """What a code object's metadata note says about one kernel."""

    name: str
    kernarg_segment_size: int
    group_segment_fixed_size: int
    reqd_workgroup_size: tuple[int, int, int] | None
    max_flat_workgroup_size: int
    args: dict[str, tuple[int, int]]  # named by-value/pointer arguments: (offset, size)

    @classmethod
    def from_metadata(cls, kernel: dict[str, Any]) -> KernelInfo:
        reqd = kernel.get(".reqd_workgroup_size")
        args = {}
        for arg in kernel.get(".args", []):
            name = arg.get(".name", "")
            if name and name != "pad" and name not in args:
                args[name] = (int(arg[".offset"]), int(arg[".size"]))
        return cls(
            name=kernel[".name"],
            kernarg_segment_size=int(kernel[".kernarg_segment_size"]),
            group_segment_fixed_size=int(kernel.get(".group_segment_fixed_size", 0)),
            reqd_workgroup_size=tuple(int(x) for x in reqd) if reqd else None,  # type: ignore[arg-type]
            max_flat_workgroup_size=int(kernel.get(".max_flat_workgroup_size", 1024)),
            args=args,
        )

    def arg_u32(self, kernarg: bytes, name: str) -> int | None:
        """The 32-bit value of argument `name` in `kernarg`, or None if the kernel has none."""
        where = self.args.get(name)
        if where is None or where[0] + 4 > len(kernarg):
            return None
        return struct.unpack_from("<i", kernarg, where[0])[0]


def read_kernels(image: bytes) -> dict[str, KernelInfo]:
    """The kernels of a gfx950 code object image: listed in the metadata note and present in
    the symbol table. LaunchRefused (hipErrorInvalidImage / NoBinaryForGpu) otherwise."""
    try:
        co = CodeObject.from_bytes(image, "<hipModuleLoadData image>")
        metadata = co.metadata()
        arch = co.arch
        symbols = {s.name for s in co.kernel_symbols()}
    except F4PipeError as exc:
        raise LaunchRefused(str(exc), HIP_ERROR_INVALID_IMAGE) from None
    processor = SHIM_ARCH.split(":")[0]
    if arch != processor:
        raise LaunchRefused(
            f"the code object is built for {arch}; this device is {processor}",
            HIP_ERROR_NO_BINARY_FOR_GPU,
        )
    if not metadata or not metadata.get("amdhsa.kernels"):
        raise LaunchRefused("no amdhsa.kernels in the metadata note", HIP_ERROR_INVALID_IMAGE)
    kernels = [KernelInfo.from_metadata(k) for k in metadata["amdhsa.kernels"]]
    return {k.name: k for k in kernels if k.name in symbols}


@dataclass(frozen=True)
class Launch:
    """One hipModuleLaunchKernel as the shim received it."""

    function: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem_bytes: int
    kernarg: bytes


def f4gemm_grid(info: KernelInfo, kernarg: bytes) -> tuple[tuple[int, int, int], str] | None:
    """The grid (in workgroups) an f4gemm launch with this kernarg block must have, and the
    values it follows from; None for kernels that are not f4gemm."""
    tile = F4GEMM_SYMBOL.search(info.name)
    m, n, k = (info.arg_u32(kernarg, a) for a in ("Mdim", "Ndim", "Kdim"))
    if tile is None or m is None or n is None or k is None:
        return None
    tile_m, tile_n = int(tile.group(1)), int(tile.group(2))
    log2 = info.arg_u32(kernarg, "log2_k_split") or 0
    gdz = 1
    if 0 < log2 < 31 and k > 0:
        k_per_tg = math.ceil(k / (1 << log2) / SPLITK_K_ALIGN) * SPLITK_K_ALIGN
        gdz = math.ceil(k / k_per_tg)
    grid = (math.ceil(n / tile_n), math.ceil(m / tile_m), gdz)
    return grid, f"M={m} N={n} K={k} log2_k_split={log2}, tile {tile_m}x{tile_n}"


def check_launch(info: KernelInfo, launch: Launch) -> list[str]:
    """Every way `launch` differs from what `info` (the metadata) requires; [] when none."""
    problems = []
    if len(launch.kernarg) != info.kernarg_segment_size:
        problems.append(
            f"kernarg block is {len(launch.kernarg)} bytes; the kernel's "
            f".kernarg_segment_size is {info.kernarg_segment_size}"
        )
    if info.reqd_workgroup_size is not None and launch.block != info.reqd_workgroup_size:
        problems.append(
            f"block {launch.block}; the kernel's .reqd_workgroup_size is {info.reqd_workgroup_size}"
        )
    elif math.prod(launch.block) > info.max_flat_workgroup_size:
        problems.append(
            f"block {launch.block} has {math.prod(launch.block)} work-items; the kernel's "
            f".max_flat_workgroup_size is {info.max_flat_workgroup_size}"
        )
    lds = info.group_segment_fixed_size + launch.shared_mem_bytes
    if lds > gfx950.LDS_BYTES_PER_CU:
        problems.append(
            f"LDS {info.group_segment_fixed_size} static + {launch.shared_mem_bytes} dynamic "
            f"bytes exceeds the gfx950's {gfx950.LDS_BYTES_PER_CU}"
        )
    if min(launch.grid) < 1 or min(launch.block) < 1:
        problems.append(f"grid {launch.grid} / block {launch.block} has a zero dimension")
    elif not problems:
        expected = f4gemm_grid(info, launch.kernarg)
        if expected is not None and launch.grid != expected[0]:
            grid, why = expected
            in_items = tuple(g * b for g, b in zip(grid, launch.block, strict=True))
            counts_items = launch.grid == in_items
            hint = " (this grid counts work-items, not workgroups)" if counts_items else ""
            problems.append(
                f"grid {launch.grid} is not the f4gemm launch for {why}: it needs {grid} "
                f"workgroups{hint}"
            )
    return problems


class ShimLaunch(ctypes.Structure):
    """struct f4pipe_shim_launch (libamdhip64.c)."""

    _fields_ = (
        ("module", ctypes.c_uint64),
        ("function", ctypes.c_char_p),
        ("grid", ctypes.c_uint32 * 3),
        ("block", ctypes.c_uint32 * 3),
        ("shared_mem_bytes", ctypes.c_uint32),
        ("kernarg", ctypes.c_void_p),
        ("kernarg_size", ctypes.c_uint64),
        ("num_buffers", ctypes.c_uint64),
        ("buffers", ctypes.c_void_p),
    )


class ShimBuffer(ctypes.Structure):
    """struct f4pipe_shim_buffer (libamdhip64.c)."""

    _fields_ = (
        ("device_addr", ctypes.c_uint64),
        ("host", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
    )


_MSG = ctypes.c_void_p  # a char buffer the callback writes its message into
ALLOC_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64), _MSG, ctypes.c_uint64
)
FREE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, _MSG, ctypes.c_uint64)
LOAD_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64, _MSG, ctypes.c_uint64
)
UNLOAD_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, _MSG, ctypes.c_uint64)
FUNCTION_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_uint64, ctypes.c_char_p, _MSG, ctypes.c_uint64
)
LAUNCH_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ShimLaunch), _MSG, ctypes.c_uint64)


def _host_bytes(addr: int, nbytes: int) -> np.ndarray:
    """A uint8 view of `nbytes` of host memory at `addr` (no copy)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))


def _reporting(fn: Callable[..., None]) -> Callable[..., int]:
    """Wrap a callback: success is 0; LaunchRefused gives its code and message; any other
    exception is a launch failure whose message (and traceback, for a bug) goes back to C."""

    def wrapper(*args: Any) -> int:
        *inputs, msg, cap = args
        try:
            fn(*inputs)
        except LaunchRefused as exc:
            _write(msg, cap, str(exc))
            return exc.code
        except F4PipeError as exc:
            _write(msg, cap, f"{type(exc).__name__}: {exc}")
            return HIP_ERROR_LAUNCH_FAILURE
        except Exception:  # a bug in the shim's Python half: never a silent success
            _write(msg, cap, traceback.format_exc(limit=4).replace("\n", " | "))
            return HIP_ERROR_LAUNCH_FAILURE
        return HIP_SUCCESS

    return wrapper


def _write(msg: Any, cap: int, text: str) -> None:
    data = text.encode(errors="replace")[: max(cap - 1, 0)] + b"\0"
    ctypes.memmove(msg, data, len(data))


class ShimBackend:
    """The emulator behind one process's shim: modules, device buffers, launches."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        from f4pipe.emu import EmulatorDevice

        self.lib = lib
        self.emulator = EmulatorDevice()
        self._dir = tempfile.TemporaryDirectory(prefix="f4pipe-hipshim-")
        self._modules: dict[int, tuple[Path, dict[str, KernelInfo]]] = {}
        self._buffers: dict[int, DeviceBuffer] = {}
        #: Every launch the shim ran since the last clear_call_log (tests read the kernargs).
        self.launches: list[Launch] = []
        self._callbacks = (
            ALLOC_FN(_reporting(self._alloc)),
            FREE_FN(_reporting(self._free)),
            LOAD_FN(_reporting(self._load)),
            UNLOAD_FN(_reporting(self._unload)),
            FUNCTION_FN(_reporting(self._function)),
            LAUNCH_FN(_reporting(self._launch)),
        )  # kept alive as long as the library may call them
        lib.f4pipe_shim_attach(*self._callbacks)

    def _alloc(self, nbytes: int, addr_out: Any) -> None:
        buf = self.emulator.alloc(int(nbytes))
        self._buffers[buf.addr] = buf
        addr_out[0] = buf.addr

    def _free(self, addr: int) -> None:
        self.emulator.free(self._buffers.pop(int(addr)))

    def _load(self, module: int, image: int, size: int) -> None:
        data = ctypes.string_at(image, size)
        kernels = read_kernels(data)
        path = Path(self._dir.name) / f"module-{module}.co"
        path.write_bytes(data)
        self._modules[int(module)] = (path, kernels)

    def _unload(self, module: int) -> None:
        if self._modules.pop(int(module), None) is None:
            raise LaunchRefused(f"module {module} is not loaded", HIP_ERROR_INVALID_HANDLE)

    def _function(self, module: int, name: bytes) -> None:
        _, kernels = self._modules[int(module)]
        if name.decode() not in kernels:
            raise LaunchRefused(
                f"no kernel {name.decode()!r} in the module; it has {', '.join(sorted(kernels))}",
                HIP_ERROR_NOT_FOUND,
            )

    def _launch(self, launch_ptr: Any) -> None:
        raw = launch_ptr.contents
        path, kernels = self._modules[int(raw.module)]
        name = raw.function.decode()
        launch = Launch(
            function=name,
            grid=tuple(raw.grid),  # type: ignore[arg-type]
            block=tuple(raw.block),  # type: ignore[arg-type]
            shared_mem_bytes=int(raw.shared_mem_bytes),
            kernarg=ctypes.string_at(raw.kernarg, raw.kernarg_size),
        )
        self.launches.append(launch)
        problems = check_launch(kernels[name], launch)
        if problems:
            where = f"{name} grid={launch.grid} block={launch.block}"
            raise LaunchRefused(f"{where}: " + "; ".join(problems))
        count = int(raw.num_buffers)
        table = (ShimBuffer * count).from_address(raw.buffers) if count else []
        for entry in table:
            host = _host_bytes(entry.host, entry.nbytes)
            self.emulator.upload(self._buffers[entry.device_addr], host)
        kernel = self.emulator.load(path, name)
        # The LaunchStats stay here: HIP's API has no channel for them, so HipDevice.launch
        # returns None on the shim as on hardware.
        self.emulator.launch(kernel, launch.grid, launch.block, launch.kernarg)
        for entry in table:
            result = self.emulator.download(self._buffers[entry.device_addr])
            _host_bytes(entry.host, entry.nbytes)[:] = result[: entry.nbytes]

    def call_log(self) -> list[str]:
        """The HIP calls the shim received since the last clear_call_log, in order."""
        self.lib.f4pipe_shim_call_log.restype = ctypes.c_char_p
        return self.lib.f4pipe_shim_call_log().decode().splitlines()

    def clear_call_log(self) -> None:
        self.lib.f4pipe_shim_clear_call_log()
        self.launches.clear()

    def live_allocations(self) -> int:
        self.lib.f4pipe_shim_live_allocations.restype = ctypes.c_uint64
        return int(self.lib.f4pipe_shim_live_allocations())

    def live_handles(self) -> int:
        """Modules, functions and events not yet unloaded or destroyed."""
        self.lib.f4pipe_shim_live_handles.restype = ctypes.c_uint64
        return int(self.lib.f4pipe_shim_live_handles())


_BACKEND: ShimBackend | None = None


def attach_emulator() -> ShimBackend:
    """Connect the shim that hip-python loaded in this process to an EmulatorDevice (once per
    process). The library is found by its soname, so this attaches to the very copy hip-python
    uses; NoDeviceError if no shim is loaded."""
    global _BACKEND
    if _BACKEND is None:
        try:
            lib = ctypes.CDLL(LIBRARY_NAME, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            lib.f4pipe_shim_attach  # noqa: B018 - is it the shim?
        except (OSError, AttributeError) as exc:
            raise NoDeviceError(
                f"the HIP runtime calls itself the f4pipe shim, but no loaded {LIBRARY_NAME} "
                f"exports f4pipe_shim_attach ({exc})"
            ) from None
        _BACKEND = ShimBackend(lib)
    return _BACKEND


def attached_backend() -> ShimBackend:
    """The backend attach_emulator made; DeviceError if none."""
    if _BACKEND is None:
        raise DeviceError("no HIP shim is attached in this process")
    return _BACKEND
