"""The hardware Device: a gfx950 GPU through hip-python (`from hip import hip`).

Kept small and explicit: every HIP call goes through `_call`, which turns a non-success
hipError_t into a DeviceError named by hipGetErrorName and hipGetErrorString, including the
calls that release (hipEventDestroy, hipModuleUnload, hipFree). hip-python imports without
ROCm; its first call then raises RuntimeError ("failed to dlopen 'libamdhip64.so'"), which
`HipDevice.open` reports as NoDeviceError.

hip-python is generated from one ROCm release's headers and must match the installed ROCm:
`open` compares the HIP version hip-python was built for with hipRuntimeGetVersion and raises
HipVersionError naming both (and the release to install) when major.minor differ. The
releases differ in one call f4pipe makes: hipGetDeviceProperties fills a hipDeviceProp_t the
caller passes up to hip-python 7.x and returns one from 10.0 on.

On f4pipe's HIP shim (f4pipe.hipshim: a libamdhip64.so that runs the emulator), `open`
attaches the emulator, keys results as HIP_SHIM_DEVICE_ID and times nothing as hardware.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from f4pipe.arch.gfx950 import ARCH
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.core.device import HIP_SHIM_DEVICE_ID, DeviceBuffer
from f4pipe.core.errors import (
    CodeObjectError,
    DeviceError,
    HipVersionError,
    InputError,
    NoDeviceError,
)
from f4pipe.devices.devinfo import (
    ClockSampler,
    DeviceInfo,
    fingerprint,
    hip_python_version,
    rocm_version,
    version_text,
)
from f4pipe.hipshim import SHIM_DEVICE_NAME

#: The hip-python release to install for each HIP runtime (major, minor) that hipRuntimeGetVersion
#: reports; each is tested on f4pipe's HIP shim (`nox -s hip`, pyproject's [tool.f4pipe]).
HIP_PYTHON_FOR_HIP: dict[tuple[int, int], str] = {
    (6, 4): "6.4",
    (7, 0): "7.0",
    (7, 1): "7.1",
    (7, 2): "7.2",
    (7, 15): "10.0",
}
#: From this hip-python release on, hipGetDeviceProperties(deviceId) returns the properties.
PROPS_RETURNED_FROM = (10, 0)


def _hip() -> Any:
    """The hip-python module, or NoDeviceError when hip-python itself is not installed."""
    try:
        from hip import hip
    except ImportError as exc:
        raise NoDeviceError(
            f"hip-python is not installed ({exc}); pip install hip-python"
        ) from None
    return hip


def hip_python_release() -> tuple[int, ...]:
    """The installed hip-python's version as integers, e.g. (7, 0, 2, 555, 40)."""
    try:
        text = metadata.version("hip-python")
    except metadata.PackageNotFoundError:
        return ()
    return tuple(int(part) for part in re.findall(r"\d+", text))


def _as_text(result: Any) -> str:
    """hip-python returns (hipError_t, bytes) or bytes for the error-text calls."""
    text = result[1] if isinstance(result, tuple) else result
    return text.decode(errors="replace") if isinstance(text, bytes) else str(text)


def hip_error_name(hip: Any, err: Any) -> str:
    """hipGetErrorName of `err` as text."""
    return _as_text(hip.hipGetErrorName(err))


def hip_error_text(hip: Any, err: Any) -> str:
    """'<hipGetErrorName>: <hipGetErrorString>' of `err`."""
    return f"{hip_error_name(hip, err)}: {_as_text(hip.hipGetErrorString(err))}"


def _call(hip: Any, what: str, result: Any) -> Any:
    """Check a hip-python call's result tuple (err, *values); return the values (or the only
    one). A failure becomes DeviceError naming the call and the HIP error."""
    items = result if isinstance(result, tuple) else (result,)
    err, values = items[0], items[1:]
    if err != hip.hipError_t.hipSuccess:
        raise DeviceError(f"{what} failed: {hip_error_text(hip, err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def _released(hip: Any, what: str, result: Any) -> str | None:
    """Check a release call (destroy, unload, free) without raising: the error text or None,
    so that cleanup goes on and an exception already in flight is not replaced."""
    try:
        _call(hip, what, result)
    except DeviceError as exc:
        return str(exc)
    return None


def check_versions(hip: Any, runtime_version: int) -> None:
    """HipVersionError unless hip-python was generated for the HIP runtime's major.minor."""
    runtime = (runtime_version // 10_000_000, runtime_version // 100_000 % 100)
    bound = (int(hip.HIP_VERSION_MAJOR), int(hip.HIP_VERSION_MINOR))
    if runtime == bound:
        return
    release = ".".join(str(x) for x in hip_python_release()) or "?"
    want = HIP_PYTHON_FOR_HIP.get(runtime)
    fix = (
        f"pip install 'hip-python=={want}.*'"
        if want
        else f"f4pipe supports the hip-python releases for HIP {_versions()}"
    )
    raise HipVersionError(
        f"hip-python {release} is built for HIP {bound[0]}.{bound[1]}, but the HIP runtime "
        f"(libamdhip64.so) is HIP {runtime[0]}.{runtime[1]} (hipRuntimeGetVersion "
        f"{runtime_version}); install the hip-python release of your ROCm: {fix}"
    )


def _versions() -> str:
    return ", ".join(f"{a}.{b} (hip-python {r})" for (a, b), r in HIP_PYTHON_FOR_HIP.items())


def device_properties(hip: Any, device_index: int) -> Any:
    """hipGetDeviceProperties in the form the installed hip-python has (see the module
    docstring)."""
    if hip_python_release() >= PROPS_RETURNED_FROM:
        return _call(hip, "hipGetDeviceProperties", hip.hipGetDeviceProperties(device_index))
    props = hip.hipDeviceProp_t()
    _call(hip, "hipGetDeviceProperties", hip.hipGetDeviceProperties(props, device_index))
    return props


def kernarg_segment_size(image: bytes, co_path: Path, symbol: str) -> int:
    """The kernel's .kernarg_segment_size from the code object's metadata note."""
    try:
        meta = CodeObject.from_bytes(image, co_path).metadata() or {}
    except CodeObjectError as exc:
        raise InputError(str(exc)) from None
    for kernel in meta.get("amdhsa.kernels", []):
        if kernel.get(".name") == symbol:
            return int(kernel[".kernarg_segment_size"])
    raise InputError(f"{co_path}: the metadata note lists no kernel {symbol!r}")


def fit_kernarg(kernarg: bytes, size: int) -> bytes:
    """`kernarg` as the kernel's `size`-byte segment: zero-padded (aiter's 0x174-byte block
    for a 384-byte segment), or cut where only zero bytes fall off (the noBpreShuffle
    kernel's 368 bytes end before log2_k_split). DeviceError if a set byte would be lost."""
    if len(kernarg) <= size:
        return kernarg + bytes(size - len(kernarg))
    if any(kernarg[size:]):
        raise DeviceError(
            f"the kernarg block sets bytes past the kernel's {size}-byte "
            f".kernarg_segment_size (block is {len(kernarg)} bytes)"
        )
    return kernarg[:size]


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
    kernarg_size: int  # the kernel's .kernarg_segment_size: the bytes every launch passes


class HipDevice:
    """Device protocol on a gfx950 GPU (device 0)."""

    can_time = True

    def __init__(
        self,
        hip: Any,
        name: str,
        arch: str,
        num_cu: int,
        *,
        shim: bool = False,
        info: DeviceInfo | None = None,
    ) -> None:
        self._hip = hip
        self.name = name
        self.arch = arch
        self.num_cu = num_cu
        self.shim = shim  # f4pipe's emulator-backed HIP runtime, not a GPU
        self.device_id = HIP_SHIM_DEVICE_ID if shim else device_id_from(name, arch)
        self._modules: list[Any] = []
        self._allocations: dict[int, Any] = {}
        #: Identity and software stack for every row this device measures (f4pipe.devices.devinfo).
        self.info = info
        self._clocks: ClockSampler | None = None

    @property
    def clocks(self) -> ClockSampler:
        """AMD SMI readings of this GPU (opened on first use; the shim has none)."""
        if self._clocks is None:
            self._clocks = ClockSampler(None if self.shim else 0)
        return self._clocks

    @classmethod
    def open(cls, device_index: int = 0) -> HipDevice:
        """Open GPU `device_index`; NoDeviceError without a HIP runtime or a gfx950 GPU,
        HipVersionError when hip-python and the runtime belong to different ROCm releases."""
        hip = _hip()
        try:
            runtime = _call(hip, "hipRuntimeGetVersion", hip.hipRuntimeGetVersion())
            count = _call(hip, "hipGetDeviceCount", hip.hipGetDeviceCount())
        except RuntimeError as exc:  # hip-python could not dlopen the HIP runtime
            raise NoDeviceError(
                f"no HIP runtime: hip-python could not load libamdhip64.so ({exc}); run on a "
                "machine with ROCm and a gfx950 GPU, or use --device emulator"
            ) from None
        except DeviceError as exc:
            raise NoDeviceError(f"no gfx950 GPU: {exc}") from None
        check_versions(hip, int(runtime))
        if count is None or count <= device_index:
            raise NoDeviceError(f"no gfx950 GPU: HIP reports {count or 0} device(s)")
        _call(hip, "hipSetDevice", hip.hipSetDevice(device_index))
        props = device_properties(hip, device_index)
        arch = _text(props.gcnArchName)
        name = _text(props.name)
        if not arch.startswith(ARCH):
            raise NoDeviceError(
                f"no gfx950 GPU: device {device_index} is {name!r} ({arch}); the f4gemm code "
                f"objects need {ARCH}"
            )
        shim = name == SHIM_DEVICE_NAME
        if shim:
            from f4pipe.hipshim.backend import attach_emulator

            attach_emulator()
        return cls(
            hip,
            name=name,
            arch=arch,
            num_cu=int(props.multiProcessorCount),
            shim=shim,
            info=device_info(hip, props, name, arch, int(runtime)),
        )

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
        return HipKernel(
            symbol=symbol,
            co_path=co_path,
            module=module,
            function=function,
            kernarg_size=kernarg_segment_size(image, co_path, symbol),
        )

    def alloc(self, nbytes: int) -> DeviceBuffer:
        ptr = _call(self._hip, f"hipMalloc({nbytes})", self._hip.hipMalloc(nbytes))
        addr = int(ptr)
        self._allocations[addr] = ptr
        return DeviceBuffer(addr=addr, nbytes=nbytes)

    def free(self, buf: DeviceBuffer) -> None:
        ptr = self._allocations.pop(buf.addr, None)
        if ptr is not None:
            _call(self._hip, f"hipFree({buf.addr:#x})", self._hip.hipFree(ptr))

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
        """Launch and wait. Hardware checks no races or hazards: there is no LaunchReport."""
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
        try:
            stop = _call(hip, "hipEventCreate", hip.hipEventCreate())
        except DeviceError:
            _released(hip, "hipEventDestroy(start)", hip.hipEventDestroy(start))
            raise
        try:
            _call(hip, "hipEventRecord(start)", hip.hipEventRecord(start, None))
            for _ in range(iters):
                one()
            _call(hip, "hipEventRecord(stop)", hip.hipEventRecord(stop, None))
            _call(hip, "hipEventSynchronize(stop)", hip.hipEventSynchronize(stop))
            ms = _call(hip, "hipEventElapsedTime", hip.hipEventElapsedTime(start, stop))
        finally:
            failed = [
                e
                for e in (
                    _released(hip, "hipEventDestroy(start)", hip.hipEventDestroy(start)),
                    _released(hip, "hipEventDestroy(stop)", hip.hipEventDestroy(stop)),
                )
                if e
            ]
        if failed:
            raise DeviceError("; ".join(failed))
        return float(ms) * 1000.0 / iters

    def time_launch_series(
        self,
        kernel: HipKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernargs,
        zero_before_each,
        protocol,
    ) -> np.ndarray:
        hip = self._hip
        turn = iter(range(1 << 62))

        def one() -> None:
            j = next(turn) % len(kernargs)
            zero = zero_before_each[j]
            if zero is not None:
                _call(hip, "hipMemsetAsync", hip.hipMemsetAsync(zero.addr, 0, zero.nbytes, None))
            self._launch_async(kernel, grid, block, kernargs[j])

        events = []
        try:
            for _ in range(2 * protocol.launches):
                events.append(_call(hip, "hipEventCreate", hip.hipEventCreate()))
            starts, stops = events[0::2], events[1::2]
            self._warm_up(one, starts[0], stops[0], protocol)
            out = np.empty((protocol.repeats, protocol.launches))
            for r in range(protocol.repeats):
                for i in range(protocol.launches):
                    _call(hip, "hipEventRecord(start)", hip.hipEventRecord(starts[i], None))
                    one()
                    _call(hip, "hipEventRecord(stop)", hip.hipEventRecord(stops[i], None))
                _call(hip, "hipEventSynchronize", hip.hipEventSynchronize(stops[-1]))
                for i in range(protocol.launches):
                    ms = _call(
                        hip, "hipEventElapsedTime", hip.hipEventElapsedTime(starts[i], stops[i])
                    )
                    out[r, i] = float(ms) * 1000.0
        finally:
            released = (_released(hip, "hipEventDestroy", hip.hipEventDestroy(e)) for e in events)
            failed = [e for e in released if e]
        if failed:
            raise DeviceError("; ".join(failed))
        return out

    def _warm_up(self, one, start, stop, protocol) -> None:
        """At least protocol.warmup launches and protocol.warmup_ms of them (timed in rounds
        of `warmup` launches between one event pair, so the host never waits per launch)."""
        hip = self._hip
        done, spent_ms = 0, 0.0
        chunk = max(protocol.warmup, 1)
        while done < protocol.warmup or spent_ms < protocol.warmup_ms:
            _call(hip, "hipEventRecord(start)", hip.hipEventRecord(start, None))
            for _ in range(chunk):
                one()
            _call(hip, "hipEventRecord(stop)", hip.hipEventRecord(stop, None))
            _call(hip, "hipEventSynchronize", hip.hipEventSynchronize(stop))
            elapsed = hip.hipEventElapsedTime(start, stop)
            spent_ms += float(_call(hip, "hipEventElapsedTime", elapsed))
            done += chunk

    def close(self) -> None:
        """Free every allocation and unload every module; DeviceError naming each release
        that failed (after trying them all)."""
        hip = self._hip
        failed = [
            _released(hip, f"hipFree({addr:#x})", hip.hipFree(ptr))
            for addr, ptr in self._allocations.items()
        ]
        failed += [
            _released(hip, "hipModuleUnload", hip.hipModuleUnload(module))
            for module in self._modules
        ]
        self._allocations.clear()
        self._modules.clear()
        errors = [e for e in failed if e]
        if errors:
            raise DeviceError("; ".join(errors))

    # --- internals -----------------------------------------------------------------------

    def _launch_async(
        self,
        kernel: HipKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
    ) -> None:
        """Launch with the kernarg block passed through `extra` (HIP_LAUNCH_PARAM_BUFFER_*),
        as the seed driver and aiter do, sized to the kernel's .kernarg_segment_size;
        sharedMemBytes 0 (the 160 KB LDS is static)."""
        hip = self._hip
        extra = KernargExtra(hip, fit_kernarg(kernarg, kernel.kernarg_size))
        _call(
            hip,
            f"hipModuleLaunchKernel({kernel.symbol} from {kernel.co_path.name}, grid={grid}, "
            f"block={block}, {kernel.kernarg_size}-byte kernarg)",
            hip.hipModuleLaunchKernel(kernel.function, *grid, *block, 0, None, None, extra.config),
        )


def device_info(hip: Any, props: Any, name: str, arch: str, runtime: int) -> DeviceInfo:
    """The facts every measured row records about this GPU and its software stack."""
    pci = f"{int(props.pciDomainID):04x}:{int(props.pciBusID):02x}:{int(props.pciDeviceID):02x}"
    try:
        driver = version_text(int(_call(hip, "hipDriverGetVersion", hip.hipDriverGetVersion())))
    except DeviceError:
        driver = ""
    return DeviceInfo(
        gpu_name=name,
        gcn_arch=arch,
        cu_count=int(props.multiProcessorCount),
        device_fingerprint=fingerprint(name, arch, pci),
        hip_runtime=version_text(runtime),
        hip_driver=driver,
        rocm_version=rocm_version(),
        hip_python_version=hip_python_version(),
    )


def _text(value: Any) -> str:
    """hip-python exposes char arrays as bytes (NUL-padded) or str."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value)
