"""Opening a launch device by kind: `hip` (a gfx950 GPU through hip-python), `emulator`, or
`auto`. Kept apart from f4pipe.core.device, which is only the protocol every device implements,
so the protocol imports neither device and neither device imports the other."""

from __future__ import annotations

from typing import Any

from f4pipe.arch.gfx950 import ARCH, NUM_CU
from f4pipe.core.device import Device, measures_throughput
from f4pipe.core.errors import HipVersionError, NoDeviceError
from f4pipe.core.layout import DEVICE_KINDS, EMULATOR_DEVICE_ID


def throughput_device_present() -> bool:
    """Whether `auto` would open a device that measures throughput (a gfx950 GPU). A HIP
    runtime that hip-python does not match counts as present, so the runs report that error
    instead of a silent "skipped"."""
    from f4pipe.devices.hipdevice import HipDevice

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
    A stage whose runs all come from the result store (f4pipe.pipeline.resultstore) never pays
    for it."""

    device_id = EMULATOR_DEVICE_ID
    arch = ARCH
    num_cu = NUM_CU
    can_time = False
    info = None  # no clocks, driver or PCI identity (the bench stage asks; it only predicts)

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
    from f4pipe.devices.hipdevice import HipDevice

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
