"""The Device protocol: what the host-side GEMM code needs from whatever runs a kernel.

The same host code (operands, shuffles, kernarg, grid) drives a real gfx950 GPU through
hip-python or the gfx950 functional emulator; only the Device differs. Buffers are addressed by
integer device addresses because the kernarg block carries raw pointers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from f4pipe.errors import HipVersionError, NoDeviceError
from f4pipe.layout import DEVICE_KINDS, EMULATOR_DEVICE_ID

if TYPE_CHECKING:  # the emulator is optional and heavy: only its report types are named here
    from collections.abc import Sequence

    from f4pipe.benchstats import Protocol as BenchProtocol
    from f4pipe.emu.memory import RaceReport
    from f4pipe.emu.timing import HazardReport

#: What the gfx950 emulator says it is (f4pipe.emu.EmulatorDevice): known without importing it
#: (its device_id is layout.EMULATOR_DEVICE_ID).
EMULATOR_ARCH = "gfx950"
#: Compute units the emulator reports to the tile heuristic: the MI355X's, so kernel choice
#: matches it.
EMULATED_NUM_CU = 256
#: device_id of f4pipe's emulator-backed HIP runtime (f4pipe.hipshim): the hardware launcher's
#: real hip-python calls, but the emulator's results and the host's clock, never a GPU's.
HIP_SHIM_DEVICE_ID = "hip-shim-emulator"


@dataclass(frozen=True)
class DeviceBuffer:
    """A device allocation: `addr` is what goes into the kernarg block."""

    addr: int
    nbytes: int


@runtime_checkable
class Kernel(Protocol):
    """A kernel loaded from a code object, ready to launch."""

    symbol: str
    co_path: Path


class LaunchReport(Protocol):
    """What a device found out about one launch besides its results: the dwords that several
    workgroups stored to (races) and the timing hazards, None for a check it did not make.
    The emulator's LaunchStats is one; a device that checks nothing returns None instead."""

    @property
    def races(self) -> RaceReport | None: ...

    @property
    def hazards(self) -> HazardReport | None: ...


@runtime_checkable
class Device(Protocol):
    """A launch backend.

    `device_id` keys artifact sets (e.g. "AMD_Instinct_MI355X-gfx950" or "emulator");
    `can_time` is True only for hardware: only hardware produces throughput numbers.
    """

    device_id: str
    arch: str
    num_cu: int
    can_time: bool

    def load(self, co_path: Path, symbol: str) -> Kernel: ...

    def alloc(self, nbytes: int) -> DeviceBuffer: ...

    def free(self, buf: DeviceBuffer) -> None: ...

    def upload(self, buf: DeviceBuffer, data: np.ndarray) -> None:
        """Copy `data`'s bytes to the start of `buf` (data.nbytes <= buf.nbytes)."""
        ...

    def download(self, buf: DeviceBuffer, nbytes: int | None = None) -> np.ndarray:
        """The first `nbytes` (default all) bytes of `buf` as a uint8 array."""
        ...

    def memset(self, buf: DeviceBuffer, value: int, nbytes: int | None = None) -> None: ...

    def launch(
        self,
        kernel: Kernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
    ) -> LaunchReport | None:
        """Run one launch to completion (grid in workgroups, block in work-items); what the
        device checked on the way (races, hazards), or None where it checks nothing."""
        ...

    def time_launches(
        self,
        kernel: Kernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
        iters: int,
        warmup: int,
        zero_before_each: DeviceBuffer | None,
    ) -> float:
        """Mean microseconds per launch over `iters` timed launches after `warmup` untimed
        ones; when `zero_before_each` is set, every launch is preceded by a memset of it
        (splitK kernels accumulate atomically) and the memset is inside the timed region,
        as in the seed driver. Hardware only: other devices raise NoDeviceError."""
        ...

    def time_launch_series(
        self,
        kernel: Kernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernargs: Sequence[bytes],
        zero_before_each: Sequence[DeviceBuffer | None],
        protocol: BenchProtocol,
    ) -> np.ndarray:
        """Microseconds of each timed launch, [repeats, launches], per `protocol`
        (f4pipe.benchstats): warm-up by count and time, then every launch between its own event
        pair, cycling through `kernargs` (one per operand copy; cold mode rotates them) with
        the matching `zero_before_each` buffer memset inside the pair (splitK). Hardware (and
        the HIP shim) only: other devices raise NoDeviceError."""
        ...

    def close(self) -> None: ...


def measures_throughput(device: Device) -> bool:
    """True only for a GPU: a device that can time launches and is not f4pipe's HIP shim
    (whose times are the host's wall clock around emulated launches)."""
    return device.can_time and device.device_id != HIP_SHIM_DEVICE_ID


def throughput_device_present() -> bool:
    """Whether `auto` would open a device that measures throughput (a gfx950 GPU). A HIP
    runtime that hip-python does not match counts as present, so the runs report that error
    instead of a silent "skipped"."""
    from f4pipe.hipdevice import HipDevice

    try:
        device = HipDevice.open()
    except HipVersionError:
        return True
    except NoDeviceError:
        return False
    try:
        return measures_throughput(device)
    finally:
        device.close()


def open_emulator(**options: Any) -> Device:
    """The gfx950 functional emulator, imported lazily (it is optional and heavy); `options`
    go to EmulatorDevice (trace_wave, trace_out, workgroup_order, ...)."""
    try:
        from f4pipe.emu import EmulatorDevice  # type: ignore[attr-defined]
    except ImportError as exc:
        raise NoDeviceError(
            f"the gfx950 emulator is not available in this f4pipe ({exc}); use --device hip on "
            "a machine with a gfx950 GPU"
        ) from None
    return EmulatorDevice(**options)


class LazyEmulator:
    """The emulator as a Device whose identity (device_id, arch, num_cu, can_time) is known
    before the emulator is imported: it is imported and built on the first launch-side call.
    A stage whose runs all come from the result store (f4pipe.resultstore) never pays for it."""

    device_id = EMULATOR_DEVICE_ID
    arch = EMULATOR_ARCH
    num_cu = EMULATED_NUM_CU
    can_time = False

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._device: Device | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._device is None:
            self._device = open_emulator(**self._options)
        return getattr(self._device, name)

    def close(self) -> None:
        if self._device is not None:
            self._device.close()


def open_device(kind: str = "auto", *, lazy: bool = False, **emulator_options: Any) -> Device:
    """Open a launch device: `hip` (a gfx950 GPU through hip-python), `emulator`, or `auto`
    (hip when a gfx950 GPU answers, else the emulator). Raises NoDeviceError naming why;
    `auto` raises HipVersionError too (a HIP runtime is there but hip-python does not match
    it: fix the install rather than silently emulate). `emulator_options` configure the
    emulator if that is what opens; `lazy` defers importing it to its first launch-side call
    (LazyEmulator)."""
    from f4pipe.hipdevice import HipDevice

    def emulator() -> Device:
        return LazyEmulator(**emulator_options) if lazy else open_emulator(**emulator_options)

    if kind == "hip":
        return HipDevice.open()
    if kind == "emulator":
        return emulator()
    if kind == "auto":
        try:
            return HipDevice.open()
        except HipVersionError:
            raise
        except NoDeviceError as hip_error:
            try:
                return emulator()
            except NoDeviceError as emu_error:
                raise NoDeviceError(f"no gfx950 device: {hip_error}; and {emu_error}") from None
    raise NoDeviceError(f"unknown device kind {kind!r}; choose one of {', '.join(DEVICE_KINDS)}")
