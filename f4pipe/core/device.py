"""The Device protocol: what the host-side GEMM code needs from whatever runs a kernel.

The same host code (operands, shuffles, kernarg, grid) drives a real gfx950 GPU through
hip-python or the gfx950 functional emulator; only the Device differs. Buffers are addressed by
integer device addresses because the kernarg block carries raw pointers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # the emulator is optional and heavy: only its report types are named here
    from collections.abc import Sequence

    from f4pipe.analysis.timing import HazardReport
    from f4pipe.emu.memory import RaceReport
    from f4pipe.host.benchprotocol import Protocol as BenchProtocol

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
        (f4pipe.host.benchstats): warm-up by count and time, then every launch between its own event
        pair, cycling through `kernargs` (one per operand copy; cold mode rotates them) with
        the matching `zero_before_each` buffer memset inside the pair (splitK). Hardware (and
        the HIP shim) only: other devices raise NoDeviceError."""
        ...

    def close(self) -> None: ...


def measures_throughput(device: Device) -> bool:
    """True only for a GPU: a device that can time launches and is not f4pipe's HIP shim
    (whose times are the host's wall clock around emulated launches)."""
    return device.can_time and device.device_id != HIP_SHIM_DEVICE_ID
