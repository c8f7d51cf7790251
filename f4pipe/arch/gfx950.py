"""gfx950's resource budgets and the occupancy they give a kernel: the one place for these facts.

Each number and its source is in docs/reference/gfx950.md, "Resources and occupancy". The
emulator's loader, the HIP shim's launch checks, `try`'s static checks and `--fit-resources`
all read them here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The architecture f4pipe serves: every f4gemm code object's, the emulator's and the GPU's a
#: stage launches on (the others a fetch takes are only round-tripped).
ARCH = "gfx950"
#: Compute units of an MI355X (and MI350X): 8 XCDs x 32 CUs (AMD CDNA4 whitepaper), aiter's
#: tuned tables' cu_num; the emulator reports it and the heuristic assumes it without a device.
NUM_CU = 256

WAVE_SIZE = 64
SIMDS_PER_CU = 4
#: Waves one SIMD can hold, whatever the registers allow.
MAX_WAVES_PER_SIMD = 8
#: The unified VGPR file: per SIMD lane, arch VGPRs and AGPRs together, allocated in granules.
VGPRS_PER_SIMD_LANE = 512
VGPR_ALLOC_GRANULE = 8
#: Operands name at most v0..v255 and a0..a255; accum_offset (where a0 starts) is a multiple
#: of 4 in 4..256.
MAX_VGPRS_PER_CLASS = 256
ACCUM_OFFSET_GRANULE = 4
#: Scalar registers: the file per SIMD, the allocation granule, and what a wave can address.
SGPRS_PER_SIMD = 800
SGPR_ALLOC_GRANULE = 16
MAX_ADDRESSABLE_SGPRS = 102
#: LDS per CU; one workgroup can have all of it (static plus dynamic).
LDS_BYTES_PER_CU = 160 * 1024
#: Workgroups of more than one wave a CU holds at once (one hardware barrier each).
MAX_BARRIER_WORKGROUPS_PER_CU = 16


@dataclass(frozen=True)
class Resources:
    """What one kernel's waves and workgroups take."""

    vgprs: int  # unified VGPRs per lane (arch + acc, as allocated)
    sgprs: int  # SGPRs per wave, VCC and the other extras included
    lds_bytes: int  # per workgroup (static)
    workgroup_size: int  # work-items


@dataclass(frozen=True)
class Occupancy:
    """How many waves per SIMD and workgroups per CU fit, and what limits them."""

    waves_per_simd: int  # of this kernel, with whole workgroups resident
    workgroups_per_cu: int
    limited_by: str  # vgprs | sgprs | lds | waves | barriers
    register_waves: int  # what the registers alone would allow per SIMD

    def render(self) -> str:
        return (
            f"{self.waves_per_simd} waves per SIMD (registers allow {self.register_waves}), "
            f"{self.workgroups_per_cu} workgroups per CU (limited by {self.limited_by})"
        )


def render_change(before: Occupancy, after: Occupancy) -> str:
    """Before -> after in one line, e.g. `1 -> 2 waves per SIMD (registers allow 1 -> 2), ...`."""
    return (
        f"{before.waves_per_simd} -> {after.waves_per_simd} waves per SIMD (registers allow "
        f"{before.register_waves} -> {after.register_waves}), {before.workgroups_per_cu} -> "
        f"{after.workgroups_per_cu} workgroups per CU (limited by {before.limited_by} -> "
        f"{after.limited_by})"
    )


def occupancy(r: Resources) -> Occupancy:
    """Waves per SIMD and workgroups per CU for `r`: each workgroup's waves spread over the
    CU's SIMDs, and a workgroup fits only whole (its waves and its LDS)."""
    vgprs = max(VGPR_ALLOC_GRANULE, math.ceil(r.vgprs / VGPR_ALLOC_GRANULE) * VGPR_ALLOC_GRANULE)
    sgprs = max(SGPR_ALLOC_GRANULE, math.ceil(r.sgprs / SGPR_ALLOC_GRANULE) * SGPR_ALLOC_GRANULE)
    by_regs = {
        "waves": MAX_WAVES_PER_SIMD,
        "vgprs": VGPRS_PER_SIMD_LANE // vgprs,
        "sgprs": SGPRS_PER_SIMD // sgprs,
    }
    waves_per_wg = max(1, math.ceil(r.workgroup_size / WAVE_SIZE))
    limits = {k: (SIMDS_PER_CU * v) // waves_per_wg for k, v in by_regs.items()}
    limits["lds"] = LDS_BYTES_PER_CU // r.lds_bytes if r.lds_bytes else math.inf  # type: ignore[assignment]
    if waves_per_wg > 1:
        limits["barriers"] = MAX_BARRIER_WORKGROUPS_PER_CU
    limited_by = min(limits, key=lambda k: (limits[k], k != "vgprs"))
    workgroups = int(limits[limited_by])
    register_waves = min(by_regs.values())
    waves = min(register_waves, math.ceil(workgroups * waves_per_wg / SIMDS_PER_CU))
    return Occupancy(waves, workgroups, limited_by, register_waves)
