"""The kernel descriptor's fields: one table that every reader and writer of the 64 bytes uses.

The layout is AMDGPUUsage, "Kernel Descriptor for GFX6-GFX12", with the bit fields of
"compute_pgm_rsrc1 for GFX6-GFX12", "compute_pgm_rsrc2 for GFX6-GFX12", "compute_pgm_rsrc3 for
GFX90A, GFX942" and "Kernel Code Properties", as they apply to GFX9 (gfx950 is GFX9). Each bit
field names the `.amdhsa_*` directive that sets it, so the `--fit-resources` writer
(f4pipe.edits.resources) edits exactly the directives this table reads back, and code that needs a
field asks for it by name instead of shifting and masking words of its own.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from f4pipe.core.errors import CodeObjectError

KERNEL_DESCRIPTOR_SIZE = 64


@dataclass(frozen=True)
class Word:
    """A field of the descriptor at a byte offset (struct format: size and signedness)."""

    name: str
    offset: int
    fmt: str
    directive: str | None = None  # the .amdhsa_* directive that sets the whole field

    @property
    def size(self) -> int:
        return struct.calcsize(self.fmt)


@dataclass(frozen=True)
class BitField:
    """Bits lo..lo+width-1 of a word; `directive` is the .amdhsa_* directive that sets them
    (None: the assembler derives them, or they are reserved)."""

    name: str
    word: str
    lo: int
    width: int
    directive: str | None = None

    def get(self, value: int) -> int:
        return (value >> self.lo) & ((1 << self.width) - 1)

    def put(self, value: int, field: int) -> int:
        mask = ((1 << self.width) - 1) << self.lo
        if field >> self.width:
            raise CodeObjectError(f"{self.name} {field} does not fit in {self.width} bits")
        return (value & ~mask) | (field << self.lo)


WORDS: tuple[Word, ...] = (
    Word("group_segment_fixed_size", 0, "<I", ".amdhsa_group_segment_fixed_size"),
    Word("private_segment_fixed_size", 4, "<I", ".amdhsa_private_segment_fixed_size"),
    Word("kernarg_size", 8, "<I", ".amdhsa_kernarg_size"),
    Word("kernel_code_entry_byte_offset", 16, "<q"),
    Word("compute_pgm_rsrc3", 44, "<I"),
    Word("compute_pgm_rsrc1", 48, "<I"),
    Word("compute_pgm_rsrc2", 52, "<I"),
    Word("kernel_code_properties", 56, "<H"),
    Word("kernarg_preload", 58, "<H"),
)
#: Reserved byte ranges [lo, hi) of the descriptor.
RESERVED_BYTES = ((12, 16), (24, 44), (60, 64))

_R1, _R2, _R3, _KCP = (
    "compute_pgm_rsrc1",
    "compute_pgm_rsrc2",
    "compute_pgm_rsrc3",
    "kernel_code_properties",
)
BITS: tuple[BitField, ...] = (
    # The register granules are derived by the assembler from .amdhsa_next_free_vgpr/sgpr.
    BitField("granulated_workitem_vgpr_count", _R1, 0, 6),
    BitField("granulated_wavefront_sgpr_count", _R1, 6, 4),
    BitField("priority", _R1, 10, 2),
    BitField("float_round_mode_32", _R1, 12, 2, ".amdhsa_float_round_mode_32"),
    BitField("float_round_mode_16_64", _R1, 14, 2, ".amdhsa_float_round_mode_16_64"),
    BitField("float_denorm_mode_32", _R1, 16, 2, ".amdhsa_float_denorm_mode_32"),
    BitField("float_denorm_mode_16_64", _R1, 18, 2, ".amdhsa_float_denorm_mode_16_64"),
    BitField("priv", _R1, 20, 1),
    BitField("enable_dx10_clamp", _R1, 21, 1, ".amdhsa_dx10_clamp"),
    BitField("debug_mode", _R1, 22, 1),
    BitField("enable_ieee_mode", _R1, 23, 1, ".amdhsa_ieee_mode"),
    BitField("bulky", _R1, 24, 1),
    BitField("cdbg_user", _R1, 25, 1),
    BitField("fp16_ovfl", _R1, 26, 1, ".amdhsa_fp16_overflow"),
    BitField("enable_private_segment", _R2, 0, 1, ".amdhsa_enable_private_segment"),
    BitField("user_sgpr_count", _R2, 1, 5),
    BitField("enable_trap_handler", _R2, 6, 1),
    BitField("enable_sgpr_workgroup_id_x", _R2, 7, 1, ".amdhsa_system_sgpr_workgroup_id_x"),
    BitField("enable_sgpr_workgroup_id_y", _R2, 8, 1, ".amdhsa_system_sgpr_workgroup_id_y"),
    BitField("enable_sgpr_workgroup_id_z", _R2, 9, 1, ".amdhsa_system_sgpr_workgroup_id_z"),
    BitField("enable_sgpr_workgroup_info", _R2, 10, 1, ".amdhsa_system_sgpr_workgroup_info"),
    BitField("enable_vgpr_workitem_id", _R2, 11, 2, ".amdhsa_system_vgpr_workitem_id"),
    BitField("enable_exception_address_watch", _R2, 13, 1),
    BitField("enable_exception_memory", _R2, 14, 1),
    BitField("granulated_lds_size", _R2, 15, 9),
    BitField("enable_exceptions", _R2, 24, 7),
    # .amdhsa_accum_offset N stores N / 4 - 1.
    BitField("accum_offset", _R3, 0, 6),
    BitField("tg_split", _R3, 16, 1, ".amdhsa_tg_split"),
    BitField("enable_sgpr_private_segment_buffer", _KCP, 0, 1),
    BitField("enable_sgpr_dispatch_ptr", _KCP, 1, 1, ".amdhsa_user_sgpr_dispatch_ptr"),
    BitField("enable_sgpr_queue_ptr", _KCP, 2, 1, ".amdhsa_user_sgpr_queue_ptr"),
    BitField(
        "enable_sgpr_kernarg_segment_ptr", _KCP, 3, 1, ".amdhsa_user_sgpr_kernarg_segment_ptr"
    ),
    BitField("enable_sgpr_dispatch_id", _KCP, 4, 1, ".amdhsa_user_sgpr_dispatch_id"),
    BitField("enable_sgpr_flat_scratch_init", _KCP, 5, 1),
    BitField(
        "enable_sgpr_private_segment_size", _KCP, 6, 1, ".amdhsa_user_sgpr_private_segment_size"
    ),
    BitField("uses_dynamic_stack", _KCP, 11, 1, ".amdhsa_uses_dynamic_stack"),
)
WORD = {w.name: w for w in WORDS}
BIT = {b.name: b for b in BITS}

#: The directives through which registers and LDS are allocated (what --fit-resources writes).
NEXT_FREE_VGPR = ".amdhsa_next_free_vgpr"
NEXT_FREE_SGPR = ".amdhsa_next_free_sgpr"
ACCUM_OFFSET = ".amdhsa_accum_offset"
GROUP_SEGMENT = WORD["group_segment_fixed_size"].directive
#: kernel_code_properties bits that place user SGPRs before the kernarg segment pointer, in
#: order, with the SGPRs each takes (AMDGPUUsage, "Initial Kernel Execution State").
USER_SGPRS_BEFORE_KERNARG = (
    ("enable_sgpr_private_segment_buffer", 4),
    ("enable_sgpr_dispatch_ptr", 2),
    ("enable_sgpr_queue_ptr", 2),
)
#: VGPRs and SGPRs are granted in granules of 8 on GFX9 with a unified VGPR file (gfx90a+):
#: GRANULATED_WORKITEM_VGPR_COUNT = ceil(n / 8) - 1, GRANULATED_WAVEFRONT_SGPR_COUNT likewise.
VGPR_ENCODING_GRANULE = 8
SGPR_ENCODING_GRANULE = 8
ACCUM_OFFSET_GRANULE = 4


def descriptor_fields(kd: bytes) -> dict[str, int]:
    """Every word of the descriptor by name."""
    if len(kd) != KERNEL_DESCRIPTOR_SIZE:
        raise CodeObjectError(f"kernel descriptor is {len(kd)} bytes, expected 64")
    return {w.name: struct.unpack_from(w.fmt, kd, w.offset)[0] for w in WORDS}


def descriptor_bits(kd: bytes) -> dict[str, int]:
    """Every bit field of the descriptor by name."""
    words = descriptor_fields(kd)
    return {b.name: b.get(words[b.word]) for b in BITS}


def field(kd: bytes, name: str) -> int:
    """One word or bit field by name."""
    if name in WORD:
        return descriptor_fields(kd)[name]
    return BIT[name].get(descriptor_fields(kd)[BIT[name].word])


def with_fields(kd: bytes, **values: int) -> bytes:
    """`kd` with the named words or bit fields set (for writers and tests)."""
    out = bytearray(kd)
    for name, value in values.items():
        if name in WORD:
            w = WORD[name]
        else:
            b = BIT[name]
            w = WORD[b.word]
            value = b.put(struct.unpack_from(w.fmt, out, w.offset)[0], value)
        struct.pack_into(w.fmt, out, w.offset, value)
    return bytes(out)


def fields_at(offsets: list[int]) -> list[str]:
    """The names of the words covering byte offsets (reserved bytes as `reserved`)."""
    names: list[str] = []
    for off in offsets:
        w = next((w for w in WORDS if w.offset <= off < w.offset + w.size), None)
        name = w.name if w is not None else "reserved"
        if name not in names:
            names.append(name)
    return names


# ---------------------------------------------------------------------------------------------
# What the fields mean: granted registers (AMDGPUUsage, compute_pgm_rsrc1 / rsrc3)


def allocated_vgprs(kd: bytes) -> int:
    """Unified VGPRs (arch + acc) the descriptor grants each lane."""
    return (field(kd, "granulated_workitem_vgpr_count") + 1) * VGPR_ENCODING_GRANULE


def allocated_sgprs(kd: bytes) -> int:
    """SGPRs the descriptor grants a wave, VCC and the other extras included."""
    return (field(kd, "granulated_wavefront_sgpr_count") + 1) * SGPR_ENCODING_GRANULE


def accum_offset(kd: bytes) -> int:
    """The first unified VGPR that holds AGPRs (a0)."""
    return (field(kd, "accum_offset") + 1) * ACCUM_OFFSET_GRANULE


def kernarg_sgpr(kd: bytes) -> int | None:
    """The first SGPR of the kernarg segment pointer, or None when it is not enabled."""
    bits = descriptor_bits(kd)
    if not bits["enable_sgpr_kernarg_segment_ptr"]:
        return None
    return sum(n for name, n in USER_SGPRS_BEFORE_KERNARG if bits[name])


def system_sgprs(kd: bytes) -> int:
    """SGPRs the hardware fills after the user SGPRs (workgroup ids, workgroup info)."""
    bits = descriptor_bits(kd)
    names = ("x", "y", "z")
    return (
        sum(bits[f"enable_sgpr_workgroup_id_{d}"] for d in names)
        + bits["enable_sgpr_workgroup_info"]
    )


def granulated(count: int, granule: int) -> int:
    """The descriptor's encoding of `count` registers: ceil(count / granule) - 1 (at least 0)."""
    return max(1, math.ceil(count / granule)) - 1
