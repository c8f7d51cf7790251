"""The hardware Device: a gfx950 GPU through hip-python (`from hip import hip`).

Kept small and explicit because it cannot run on machines without ROCm: every HIP call goes
through `_call`, which turns a non-success hipError_t into a DeviceError named by
hipGetErrorName. hip-python imports without ROCm; its first call then raises RuntimeError
("failed to dlopen 'libamdhip64.so'"), which `HipDevice.open` reports as NoDeviceError.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from f4pipe.device import DeviceBuffer
from f4pipe.errors import DeviceError, InputError, NoDeviceError

REQUIRED_ARCH = "gfx950"


def _hip() -> Any:
    """The hip-python module, or NoDeviceError when hip-python itself is not installed."""
    try:
        from hip import hip
    except ImportError as exc:
        raise NoDeviceError(
            f"hip-python is not installed ({exc}); pip install hip-python"
        ) from None
    return hip


def hip_error_name(hip: Any, err: Any) -> str:
    """hipGetErrorName of `err` as text (hip-python returns (hipError_t, bytes))."""
    result = hip.hipGetErrorName(err)
    name = result[1] if isinstance(result, tuple) else result
    return name.decode() if isinstance(name, bytes) else str(name)


def _call(hip: Any, what: str, result: Any) -> Any:
    """Check a hip-python call's result tuple (err, *values); return the values (or the only
    one). A failure becomes DeviceError naming the call and the HIP error."""
    items = result if isinstance(result, tuple) else (result,)
    err, values = items[0], items[1:]
    if err != hip.hipError_t.hipSuccess:
        raise DeviceError(f"{what} failed: {hip_error_name(hip, err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def device_id_from(name: str, arch: str) -> str:
    """An artifact-set key like 'AMD_Instinct_MI355X-gfx950' (file-system safe)."""
    base = re.sub(r"[^A-Za-z0-9.]+", "_", name).strip("_") or "gpu"
    return f"{base}-{arch.split(':')[0]}"


class KernargExtra:
    """The `extra` array of hipModuleLaunchKernel: {BUFFER_POINTER, &args, BUFFER_SIZE, &size,
    END}. Holds the kernarg bytes and the size so they outlive the launch call."""

    def __init__(self, hip: Any, kernarg: bytes) -> None:
        self.args = ctypes.create_string_buffer(bytes(kernarg), len(kernarg))
        self.size = ctypes.c_size_t(len(kernarg))
        self.config = (ctypes.c_void_p * 5)(
            hip.HIP_LAUNCH_PARAM_BUFFER_POINTER,
            ctypes.addressof(self.args),
            hip.HIP_LAUNCH_PARAM_BUFFER_SIZE,
            ctypes.addressof(self.size),
            hip.HIP_LAUNCH_PARAM_END,
        )


@dataclass(frozen=True)
class HipKernel:
    """A kernel function looked up in a loaded module (the module stays loaded with it)."""

    symbol: str
    co_path: Path
    module: Any
    function: Any


class HipDevice:
    """Device protocol on a gfx950 GPU (device 0)."""

    can_time = True

    def __init__(self, hip: Any, name: str, arch: str, num_cu: int) -> None:
        self._hip = hip
        self.arch = arch
        self.num_cu = num_cu
        self.device_id = device_id_from(name, arch)
        self._modules: list[Any] = []
        self._allocations: dict[int, Any] = {}

    @classmethod
    def open(cls, device_index: int = 0) -> HipDevice:
        """Open GPU `device_index`; NoDeviceError without a HIP runtime or a gfx950 GPU."""
        hip = _hip()
        try:
            count = _call(hip, "hipGetDeviceCount", hip.hipGetDeviceCount())
        except RuntimeError as exc:  # hip-python could not dlopen the HIP runtime
            raise NoDeviceError(
                f"no HIP runtime: hip-python could not load libamdhip64.so ({exc}); run on a "
                "machine with ROCm and a gfx950 GPU, or use --device emulator"
            ) from None
        except DeviceError as exc:
            raise NoDeviceError(f"no gfx950 GPU: {exc}") from None
        if count is None or count <= device_index:
            raise NoDeviceError(f"no gfx950 GPU: HIP reports {count or 0} device(s)")
        _call(hip, "hipSetDevice", hip.hipSetDevice(device_index))
        props = _call(hip, "hipGetDeviceProperties", hip.hipGetDeviceProperties(device_index))
        arch = _text(props.gcnArchName)
        name = _text(props.name)
        if not arch.startswith(REQUIRED_ARCH):
            raise NoDeviceError(
                f"no gfx950 GPU: device {device_index} is {name!r} ({arch}); the f4gemm code "
                f"objects need {REQUIRED_ARCH}"
            )
        return cls(hip, name=name, arch=arch, num_cu=int(props.multiProcessorCount))

    # --- Device protocol -----------------------------------------------------------------

    def load(self, co_path: Path, symbol: str) -> HipKernel:
        co_path = Path(co_path)
        try:
            image = co_path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read code object {co_path}: {exc.strerror}") from None
        hip = self._hip
        module = _call(hip, f"hipModuleLoadData({co_path.name})", hip.hipModuleLoadData(image))
        self._modules.append(module)
        function = _call(
            hip,
            f"hipModuleGetFunction({symbol}) in {co_path.name}",
            hip.hipModuleGetFunction(module, symbol.encode()),
        )
        return HipKernel(symbol=symbol, co_path=co_path, module=module, function=function)

    def alloc(self, nbytes: int) -> DeviceBuffer:
        ptr = _call(self._hip, f"hipMalloc({nbytes})", self._hip.hipMalloc(nbytes))
        addr = int(ptr)
        self._allocations[addr] = ptr
        return DeviceBuffer(addr=addr, nbytes=nbytes)

    def free(self, buf: DeviceBuffer) -> None:
        ptr = self._allocations.pop(buf.addr, None)
        if ptr is not None:
            _call(self._hip, "hipFree", self._hip.hipFree(ptr))

    def upload(self, buf: DeviceBuffer, data: np.ndarray) -> None:
        host = np.ascontiguousarray(data)
        if host.nbytes > buf.nbytes:
            raise DeviceError(f"upload of {host.nbytes} bytes into a {buf.nbytes}-byte buffer")
        kind = self._hip.hipMemcpyKind.hipMemcpyHostToDevice
        _call(self._hip, "hipMemcpy HtoD", self._hip.hipMemcpy(buf.addr, host, host.nbytes, kind))

    def download(self, buf: DeviceBuffer, nbytes: int | None = None) -> np.ndarray:
        size = buf.nbytes if nbytes is None else nbytes
        host = np.empty(size, dtype=np.uint8)
        kind = self._hip.hipMemcpyKind.hipMemcpyDeviceToHost
        _call(self._hip, "hipMemcpy DtoH", self._hip.hipMemcpy(host, buf.addr, size, kind))
        return host

    def memset(self, buf: DeviceBuffer, value: int, nbytes: int | None = None) -> None:
        size = buf.nbytes if nbytes is None else nbytes
        _call(self._hip, "hipMemset", self._hip.hipMemset(buf.addr, value, size))

    def launch(
        self,
        kernel: HipKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
    ) -> None:
        self._launch_async(kernel, grid, block, kernarg)
        _call(self._hip, "hipDeviceSynchronize", self._hip.hipDeviceSynchronize())

    def time_launches(
        self,
        kernel: HipKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
        iters: int,
        warmup: int,
        zero_before_each: DeviceBuffer | None,
    ) -> float:
        hip = self._hip

        def one() -> None:
            if zero_before_each is not None:
                _call(
                    hip,
                    "hipMemsetAsync",
                    hip.hipMemsetAsync(zero_before_each.addr, 0, zero_before_each.nbytes, None),
                )
            self._launch_async(kernel, grid, block, kernarg)

        for _ in range(warmup):
            one()
        start = _call(hip, "hipEventCreate", hip.hipEventCreate())
        stop = _call(hip, "hipEventCreate", hip.hipEventCreate())
        try:
            _call(hip, "hipEventRecord", hip.hipEventRecord(start, None))
            for _ in range(iters):
                one()
            _call(hip, "hipEventRecord", hip.hipEventRecord(stop, None))
            _call(hip, "hipEventSynchronize", hip.hipEventSynchronize(stop))
            ms = _call(hip, "hipEventElapsedTime", hip.hipEventElapsedTime(start, stop))
        finally:
            hip.hipEventDestroy(start)
            hip.hipEventDestroy(stop)
        return float(ms) * 1000.0 / iters

    def close(self) -> None:
        for addr in list(self._allocations):
            self.free(DeviceBuffer(addr=addr, nbytes=0))
        for module in self._modules:
            self._hip.hipModuleUnload(module)
        self._modules.clear()

    # --- internals -----------------------------------------------------------------------

    def _launch_async(
        self,
        kernel: HipKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
    ) -> None:
        """Launch with the kernarg block passed through `extra` (HIP_LAUNCH_PARAM_BUFFER_*),
        as the seed driver and aiter do; sharedMemBytes 0 (the 160 KB LDS is static)."""
        hip = self._hip
        extra = KernargExtra(hip, kernarg)
        _call(
            hip,
            f"hipModuleLaunchKernel({kernel.symbol}, grid={grid})",
            hip.hipModuleLaunchKernel(kernel.function, *grid, *block, 0, None, None, extra.config),
        )


def _text(value: Any) -> str:
    """hip-python exposes char arrays as bytes (NUL-padded) or str."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value)
