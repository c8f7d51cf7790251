"""Where and under what conditions a throughput row was measured: the device's identity and
software stack, and its clocks, power and temperature around the run.

Identity comes from HIP (name, gcnArchName, CU count, PCI location, runtime and driver
versions) and the installed packages (hip-python, ROCm's .info/version); the device
fingerprint is a digest of name, arch and PCI location, so two rows from one GPU match and
rows from two GPUs (or a moved card) do not. Clocks, power and temperature come from AMD SMI
(the `amdsmi` Python package ROCm ships), sampled before and after each row; a row whose
engine clock fell by more than THROTTLE_FRACTION during its run is marked throttled. Without
amdsmi (or without a GPU) those columns are null and `clocks_note` says why.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: A row is `throttled` when its engine clock after the run is this much below before.
THROTTLE_FRACTION = 0.10


@dataclass(frozen=True)
class DeviceInfo:
    gpu_name: str
    gcn_arch: str
    cu_count: int
    device_fingerprint: str
    hip_runtime: str
    hip_driver: str
    rocm_version: str
    hip_python_version: str

    def fields(self) -> dict[str, Any]:
        return asdict(self)


def fingerprint(name: str, arch: str, pci: str) -> str:
    return hashlib.sha256(f"{name}|{arch}|{pci}".encode()).hexdigest()[:16]


def rocm_version() -> str:
    root = Path(os.environ.get("ROCM_PATH", "/opt/rocm"))
    try:
        return (root / ".info" / "version").read_text().strip()
    except OSError:
        return ""


def hip_python_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hip-python")
    except PackageNotFoundError:
        return ""


def version_text(v: int) -> str:
    """HIP's packed version (major * 10,000,000 + minor * 100,000 + patch) as text."""
    return f"{v // 10_000_000}.{v // 100_000 % 100}.{v % 100_000}"


@dataclass(frozen=True)
class ClockSample:
    sclk_mhz: float | None
    mclk_mhz: float | None
    power_w: float | None
    temp_c: float | None
    power_cap_w: float | None


class ClockSampler:
    """AMD SMI readings of one GPU; `note` says why there are none."""

    def __init__(self, device_index: int | None = 0) -> None:
        self.note = ""
        self._smi = None
        self._handle = None
        if device_index is None:
            self.note = "f4pipe's HIP shim has no clocks (emulated launches, host wall clock)"
            return
        try:
            import amdsmi  # ROCm's package; not on PyPI for every ROCm
        except ImportError:
            self.note = "amdsmi is not installed (ROCm's Python package): clocks not sampled"
            return
        try:
            amdsmi.amdsmi_init()
            handles = amdsmi.amdsmi_get_processor_handles()
            self._handle = handles[device_index]
            self._smi = amdsmi
        except Exception as exc:  # amdsmi raises its own AmdSmiException hierarchy
            self.note = f"amdsmi could not open GPU {device_index}: {exc}"

    def sample(self) -> ClockSample | None:
        if self._smi is None:
            return None
        smi, h = self._smi, self._handle

        def read(fn, *args, key=None):
            try:
                value = fn(h, *args)
            except Exception:
                return None
            return value.get(key) if key and isinstance(value, dict) else value

        gfx = read(smi.amdsmi_get_clock_info, smi.AmdSmiClkType.GFX, key="clk")
        mem = read(smi.amdsmi_get_clock_info, smi.AmdSmiClkType.MEM, key="clk")
        power = read(smi.amdsmi_get_power_info, key="current_socket_power")
        cap = read(smi.amdsmi_get_power_cap_info, key="power_cap")
        temp = read(
            smi.amdsmi_get_temp_metric,
            smi.AmdSmiTemperatureType.HOTSPOT,
            smi.AmdSmiTemperatureMetric.CURRENT,
        )
        return ClockSample(gfx, mem, power, temp, cap / 1e6 if cap else None)


#: The bench columns this module fills (null where unknown: DEVICE_FIELDS without a HIP
#: device, CLOCK_FIELDS without amdsmi).
DEVICE_FIELDS = (
    "gpu_name",
    "gcn_arch",
    "cu_count",
    "device_fingerprint",
    "hip_runtime",
    "hip_driver",
    "rocm_version",
    "hip_python_version",
)
CLOCK_FIELDS = (
    "sclk_before_mhz",
    "sclk_after_mhz",
    "mclk_before_mhz",
    "mclk_after_mhz",
    "power_before_w",
    "power_after_w",
    "temp_before_c",
    "temp_after_c",
    "power_cap_w",
    "throttled",
    "clocks_note",
)


def clock_fields(
    before: ClockSample | None, after: ClockSample | None, note: str
) -> dict[str, Any]:
    """A row's clock columns from the samples around its run."""
    if before is None or after is None:
        return {**dict.fromkeys(CLOCK_FIELDS), "clocks_note": note or "clocks not sampled"}
    throttled = None
    if before.sclk_mhz and after.sclk_mhz:
        throttled = after.sclk_mhz < before.sclk_mhz * (1 - THROTTLE_FRACTION)
    return {
        "sclk_before_mhz": before.sclk_mhz,
        "sclk_after_mhz": after.sclk_mhz,
        "mclk_before_mhz": before.mclk_mhz,
        "mclk_after_mhz": after.mclk_mhz,
        "power_before_w": before.power_w,
        "power_after_w": after.power_w,
        "temp_before_c": before.temp_c,
        "temp_after_c": after.temp_c,
        "power_cap_w": after.power_cap_w,
        "throttled": throttled,
        "clocks_note": "",
    }
