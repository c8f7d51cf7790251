"""The s_waitcnt immediate of gfx950, decoded and encoded in one place (docs/reference/timing.md
A2): vmcnt in bits 3:0 and 15:14, expcnt in bits 6:4, lgkmcnt in bits 11:8. A field at its
maximum (all ones) does not wait on its counter.

The effects table, the disassembler, the timing check and the wait analysis all read waits
through here, so the bit layout cannot differ between what is checked and what is printed.
"""

from __future__ import annotations

#: The largest count of each field: a wait with it waits for nothing on that counter.
VM_MAX, EXP_MAX, LGKM_MAX = 63, 7, 15


def decode_waitcnt(simm16: int) -> tuple[int, int]:
    """(vmcnt, lgkmcnt) of an s_waitcnt immediate (the counters f4pipe's timing model keeps)."""
    return (simm16 & 0xF) | ((simm16 >> 14) & 0x3) << 4, (simm16 >> 8) & 0xF


def decode_expcnt(simm16: int) -> int:
    """expcnt of an s_waitcnt immediate (exports and GDS: printed, never modelled)."""
    return (simm16 >> 4) & EXP_MAX


def encode_waitcnt(simm16: int, vmcnt: int, lgkmcnt: int) -> int:
    """The s_waitcnt immediate with new vmcnt and lgkmcnt, expcnt and the other bits kept."""
    if not (0 <= vmcnt <= VM_MAX and 0 <= lgkmcnt <= LGKM_MAX):
        raise ValueError(f"vmcnt {vmcnt} / lgkmcnt {lgkmcnt} out of range")
    keep = simm16 & ~(0xF | 0xC000 | 0xF00) & 0xFFFF
    return keep | (vmcnt & 0xF) | ((vmcnt >> 4) & 0x3) << 14 | (lgkmcnt & 0xF) << 8


def waitcnt_text(simm16: int) -> str:
    """The immediate as LLVM prints it: the fields that wait, in order; "0" when none does."""
    vm, lgkm = decode_waitcnt(simm16)
    exp = decode_expcnt(simm16)
    parts = [
        f"vmcnt({vm})" if vm != VM_MAX else "",
        f"expcnt({exp})" if exp != EXP_MAX else "",
        f"lgkmcnt({lgkm})" if lgkm != LGKM_MAX else "",
    ]
    return " ".join(p for p in parts if p) or "0"
