"""gfx950 (GFX9 family) encoding tables: instruction formats, opcode numbers, operand codes.

Data, no logic: the decoder (decode.py) reads fields with these tables, the display code
(disasm.py) prints LLVM's spelling, the executor (handlers.py) dispatches on the mnemonic.
Formats, field layouts and opcode numbers are the CDNA4 ISA manual's microcode tables
(chapter 13, "Microcode Formats"), field names its names in lower case; every entry is
cross-checked against llvm-objdump on the 35 f4gemm code objects (tests/test_emu_decode.py).
Opcodes not listed decode to an `unknown` instruction that raises EmulatorError when executed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SOP2 = {
    0: "s_add_u32",
    1: "s_sub_u32",
    2: "s_add_i32",
    3: "s_sub_i32",
    4: "s_addc_u32",
    5: "s_subb_u32",
    6: "s_min_i32",
    7: "s_min_u32",
    8: "s_max_i32",
    9: "s_max_u32",
    10: "s_cselect_b32",
    12: "s_and_b32",
    14: "s_or_b32",
    16: "s_xor_b32",
    28: "s_lshl_b32",
    30: "s_lshr_b32",
    32: "s_ashr_i32",
    36: "s_mul_i32",
    44: "s_mul_hi_u32",
}

SOP1 = {0: "s_mov_b32", 1: "s_mov_b64"}

SOPC = {
    0: "s_cmp_eq_i32",
    1: "s_cmp_lg_i32",
    2: "s_cmp_gt_i32",
    3: "s_cmp_ge_i32",
    4: "s_cmp_lt_i32",
    5: "s_cmp_le_i32",
    6: "s_cmp_eq_u32",
    7: "s_cmp_lg_u32",
    8: "s_cmp_gt_u32",
    9: "s_cmp_ge_u32",
    10: "s_cmp_lt_u32",
    11: "s_cmp_le_u32",
    17: "s_set_gpr_idx_on",
}

SOPK = {0: "s_movk_i32", 14: "s_addk_i32", 15: "s_mulk_i32"}

SOPP = {
    0: "s_nop",
    1: "s_endpgm",
    2: "s_branch",
    4: "s_cbranch_scc0",
    5: "s_cbranch_scc1",
    10: "s_barrier",
    12: "s_waitcnt",
    28: "s_set_gpr_idx_off",
}

SMEM = {0: "s_load_dword", 1: "s_load_dwordx2", 2: "s_load_dwordx4", 3: "s_load_dwordx8"}
#: Dwords loaded by each SMEM load.
SMEM_DWORDS = {"s_load_dword": 1, "s_load_dwordx2": 2, "s_load_dwordx4": 4, "s_load_dwordx8": 8}

VOP2 = {
    0: "v_cndmask_b32",
    5: "v_mul_f32",
    6: "v_mul_i32_i24",
    16: "v_lshrrev_b32",
    18: "v_lshlrev_b32",
    19: "v_and_b32",
    20: "v_or_b32",
    21: "v_xor_b32",
    52: "v_add_u32",
    53: "v_sub_u32",
    54: "v_subrev_u32",
}

VOP1 = {
    1: "v_mov_b32",
    2: "v_readfirstlane_b32",
    6: "v_cvt_f32_u32",
    7: "v_cvt_u32_f32",
    35: "v_rcp_iflag_f32",
    89: "v_permlane16_swap_b32",
}
#: VOP1 opcodes LLVM prints without the _e32 suffix (they have no VOP3 form).
VOP1_NO_SUFFIX = frozenset({"v_readfirstlane_b32"})

VOPC = {
    0xC1: "v_cmp_lt_i32",
    0xC2: "v_cmp_eq_i32",
    0xC3: "v_cmp_le_i32",
    0xC4: "v_cmp_gt_i32",
    0xC5: "v_cmp_ne_i32",
    0xC6: "v_cmp_ge_i32",
    0xC9: "v_cmp_lt_u32",
    0xCA: "v_cmp_eq_u32",
    0xCB: "v_cmp_le_u32",
    0xCC: "v_cmp_gt_u32",
    0xCD: "v_cmp_ne_u32",
    0xCE: "v_cmp_ge_u32",
}

#: VOP3-only opcodes (VOP3A); VOP1/VOP2/VOPC promoted to VOP3 live at 0x140+/0x100+/0x000+.
VOP3_ONLY = {
    0x268: "v_cvt_pk_bf16_f32",
    0x285: "v_mul_lo_u32",
    0x286: "v_mul_hi_u32",
    0x29C: "v_add_i32",
}
VOP3_VOP2_BASE = 0x100
VOP3_VOP1_BASE = 0x140

#: VOP3P opcodes. 0x2C is the "load scale" half of a 16-byte scaled MFMA; 0x2D its MFMA half.
VOP3P = {0x58: "v_accvgpr_read_b32", 0x59: "v_accvgpr_write_b32"}
VOP3P_LD_SCALE = 0x2C
VOP3P_SCALED_MFMA = {0x2D: "v_mfma_scale_f32_16x16x128_f8f6f4"}
#: Registers per lane of a scaled MFMA's A (by cbsz) or B (by blgp) operand: the format code
#: picks FP8 (0) / BF8 (1) 8 registers, FP6 (2) / BF6 (3) 6, FP4 (4) 4 (CDNA4 ISA, the
#: f8f6f4 MFMAs; 16x16x128 and 32x32x64 alike). Codes 5..7 are reserved.
F8F6F4_REGS = {0: 8, 1: 8, 2: 6, 3: 6, 4: 4}

DS = {
    0x0D: "ds_write_b32",
    0x36: "ds_read_b32",
    0x4D: "ds_write_b64",
    0x76: "ds_read_b64",
    0xDF: "ds_write_b128",
    0xFF: "ds_read_b128",
}
#: Dwords moved by each DS opcode.
DS_DWORDS = {
    "ds_write_b32": 1,
    "ds_read_b32": 1,
    "ds_write_b64": 2,
    "ds_read_b64": 2,
    "ds_write_b128": 4,
    "ds_read_b128": 4,
}

MUBUF = {
    0x14: "buffer_load_dword",
    0x15: "buffer_load_dwordx2",
    0x17: "buffer_load_dwordx4",
    0x1C: "buffer_store_dword",
    0x1D: "buffer_store_dwordx2",
    0x1F: "buffer_store_dwordx4",
    0x52: "buffer_atomic_pk_add_bf16",
}
MUBUF_DWORDS = {
    "buffer_load_dword": 1,
    "buffer_load_dwordx2": 2,
    "buffer_load_dwordx4": 4,
    "buffer_store_dword": 1,
    "buffer_store_dwordx2": 2,
    "buffer_store_dwordx4": 4,
    "buffer_atomic_pk_add_bf16": 1,
}

#: The VOP3 (e64) opcode space: VOPC at 0x000+, VOP2 at VOP3_VOP2_BASE+, VOP1 at
#: VOP3_VOP1_BASE+, then the VOP3-only opcodes. Opcode -> (name, the encoding it comes from,
#: whose operand shape it keeps: "VOP1", "VOP2", "VOPC" or "VOP3" for VOP3-only).
VOP3_OPCODES: dict[int, tuple[str, str]] = {
    **{op: (name, "VOPC") for op, name in VOPC.items()},
    **{VOP3_VOP2_BASE + op: (name, "VOP2") for op, name in VOP2.items()},
    **{VOP3_VOP1_BASE + op: (name, "VOP1") for op, name in VOP1.items()},
    **{op: (name, "VOP3") for op, name in VOP3_ONLY.items()},
}


# --- instruction formats -------------------------------------------------------------------


@dataclass(frozen=True)
class Format:
    """One microcode format: how dword 0 names it, its size, where its fields sit.

    The encoding is dword 0's bits `encoding_lo`..31, equal to `encoding`. Fields are
    (name, lo, hi) bit ranges, both ends included, over the instruction read as one
    little-endian integer (dword 1 holds bits 32..63), as the manual draws them. `signed`
    names the fields the manual defines as two's complement. `dwords` excludes a trailing
    literal; `opcodes` maps the op field to the operation names (VOP3: `VOP3_OPCODES`).
    """

    name: str
    encoding_lo: int
    encoding: int
    dwords: int
    fields: tuple[tuple[str, int, int], ...]
    opcodes: Mapping[int, str] | Mapping[int, tuple[str, str]]
    signed: frozenset[str] = frozenset()

    def matches(self, dword0: int) -> bool:
        return dword0 >> self.encoding_lo == self.encoding


_VOP3_SOURCES = (("src0", 32, 40), ("src1", 41, 49), ("src2", 50, 58))

SOP2_FORMAT = Format(
    "SOP2",
    30,
    0b10,
    1,
    (("ssrc0", 0, 7), ("ssrc1", 8, 15), ("sdst", 16, 22), ("op", 23, 29)),
    SOP2,
)
SOPK_FORMAT = Format(
    "SOPK",
    28,
    0b1011,
    1,
    (("simm16", 0, 15), ("sdst", 16, 22), ("op", 23, 27)),
    SOPK,
    signed=frozenset({"simm16"}),  # S_MOVK_I32, S_ADDK_I32, S_MULK_I32: signext(SIMM16)
)
SOP1_FORMAT = Format(
    "SOP1", 23, 0b101111101, 1, (("ssrc0", 0, 7), ("op", 8, 15), ("sdst", 16, 22)), SOP1
)
SOPC_FORMAT = Format(
    "SOPC", 23, 0b101111110, 1, (("ssrc0", 0, 7), ("ssrc1", 8, 15), ("op", 16, 22)), SOPC
)
#: SIMM16 is unsigned here except as a branch offset (decode.py sign-extends that use).
SOPP_FORMAT = Format("SOPP", 23, 0b101111111, 1, (("simm16", 0, 15), ("op", 16, 22)), SOPP)
SMEM_FORMAT = Format(
    "SMEM",
    26,
    0b110000,
    2,
    (
        ("sbase", 0, 5),  # in SGPR pairs
        ("sdata", 6, 12),
        ("soe", 14, 14),
        ("nv", 15, 15),
        ("glc", 16, 16),
        ("imm", 17, 17),
        ("op", 18, 25),
        ("offset", 32, 52),
        ("soffset", 57, 63),
    ),
    SMEM,
)
VOP2_FORMAT = Format(
    "VOP2",
    31,
    0b0,
    1,
    (("src0", 0, 8), ("vsrc1", 9, 16), ("vdst", 17, 24), ("op", 25, 30)),
    VOP2,
)
VOP1_FORMAT = Format(
    "VOP1", 25, 0b0111111, 1, (("src0", 0, 8), ("op", 9, 16), ("vdst", 17, 24)), VOP1
)
#: No VDST: the e32 compare writes VCC.
VOPC_FORMAT = Format(
    "VOPC", 25, 0b0111110, 1, (("src0", 0, 8), ("vsrc1", 9, 16), ("op", 17, 24)), VOPC
)
#: VOP3A (the VOP3B carry-out form is not used by these kernels).
VOP3_FORMAT = Format(
    "VOP3",
    26,
    0b110100,
    2,
    (
        ("vdst", 0, 7),
        ("abs", 8, 10),
        ("op_sel", 11, 14),
        ("clamp", 15, 15),
        ("op", 16, 25),
        *_VOP3_SOURCES,
        ("omod", 59, 60),
        ("neg", 61, 63),
    ),
    VOP3_OPCODES,
)
VOP3P_FORMAT = Format(
    "VOP3P",
    23,
    0b110100111,
    2,
    (
        ("vdst", 0, 7),
        ("neg_hi", 8, 10),
        ("op_sel", 11, 13),
        ("op_sel_hi2", 14, 14),
        ("clamp", 15, 15),
        ("op", 16, 22),
        *_VOP3_SOURCES,
        ("op_sel_hi", 59, 60),
        ("neg", 61, 63),
    ),
    VOP3P,
)
#: VOP3P-MAI: the same encoding as VOP3P with the matrix fields; here only the second half of
#: the 16-byte scaled MFMA, selected by the VOP3P_LD_SCALE opcode before it
#: (docs/reference/gfx950.md).
VOP3P_MAI_FORMAT = Format(
    "VOP3P",
    23,
    0b110100111,
    2,
    (
        ("vdst", 0, 7),
        ("cbsz", 8, 10),
        ("abid", 11, 14),
        ("acc_cd", 15, 15),
        ("op", 16, 22),
        *_VOP3_SOURCES,
        ("acc", 59, 60),
        ("blgp", 61, 63),
    ),
    VOP3P_SCALED_MFMA,
)
DS_FORMAT = Format(
    "DS",
    26,
    0b110110,
    2,
    (
        ("offset", 0, 15),  # OFFSET1:OFFSET0, one 16-bit offset for single-address opcodes
        ("gds", 16, 16),
        ("op", 17, 24),
        ("acc", 25, 25),
        ("addr", 32, 39),
        ("data0", 40, 47),
        ("data1", 48, 55),
        ("vdst", 56, 63),
    ),
    DS,
)
MUBUF_FORMAT = Format(
    "MUBUF",
    26,
    0b111000,
    2,
    (
        ("offset", 0, 11),
        ("offen", 12, 12),
        ("idxen", 13, 13),
        ("sc0", 14, 14),  # GLC before CDNA3
        ("sc1", 15, 15),
        ("lds", 16, 16),
        ("nt", 17, 17),  # SLC before CDNA3
        ("op", 18, 24),
        ("vaddr", 32, 39),
        ("vdata", 40, 47),
        ("srsrc", 48, 52),  # in groups of 4 SGPRs
        ("acc", 55, 55),
        ("soffset", 56, 63),
    ),
    MUBUF,
)

#: Every format the decoder recognises by dword 0. Encodings nest (SOP1, SOPC and SOPP inside
#: SOPK inside SOP2; VOP3P inside VOP3; VOP1 and VOPC inside VOP2): the longest match wins.
FORMATS = (
    SOP2_FORMAT,
    SOPK_FORMAT,
    SOP1_FORMAT,
    SOPC_FORMAT,
    SOPP_FORMAT,
    SMEM_FORMAT,
    VOP2_FORMAT,
    VOP1_FORMAT,
    VOPC_FORMAT,
    VOP3_FORMAT,
    VOP3P_FORMAT,
    DS_FORMAT,
    MUBUF_FORMAT,
)

#: Every operation name the decoder produces (the handler table's keys, handlers.py).
OPERATIONS = frozenset(
    entry if isinstance(entry, str) else entry[0]  # VOP3_OPCODES: (name, origin)
    for fmt in (*FORMATS, VOP3P_MAI_FORMAT)
    for entry in fmt.opcodes.values()
)


# --- operand codes (9-bit source field; SGPR fields use the low 8 bits) ----------------------

VCC_LO = 106
VCC_HI = 107
M0 = 124
EXEC_LO = 126
EXEC_HI = 127
LITERAL = 255
#: src0 codes of VOP1/VOP2/VOPC announcing an SDWA or DPP dword (not modelled: unknown_*).
SRC_SDWA = 249
SRC_DPP = 250
#: Operand codes that decode (listings) but that the executor does not model: the aperture
#: bases and limits, POPS_EXITING_WAVE_ID, SDWA, DPP, VCCZ, EXECZ, SCC, LDS_DIRECT.
UNMODELLED_OPERANDS = frozenset({235, 236, 237, 238, 239, 249, 250, 251, 252, 253, 254})
VGPR_BASE = 256
#: Register file index of a0 when VGPRs and AGPRs share one array (accum_offset 256).
AGPR_BASE = 256

SPECIAL_SGPR_NAMES = {
    102: "flat_scratch_lo",
    103: "flat_scratch_hi",
    104: "xnack_mask_lo",
    105: "xnack_mask_hi",
    106: "vcc_lo",
    107: "vcc_hi",
    124: "m0",
    126: "exec_lo",
    127: "exec_hi",
}
SPECIAL_SGPR_PAIR_NAMES = {102: "flat_scratch", 104: "xnack_mask", 106: "vcc", 126: "exec"}

#: Inline float constants (code -> (f32 bits, LLVM spelling)).
INLINE_FLOATS = {
    240: (0x3F000000, "0.5"),
    241: (0xBF000000, "-0.5"),
    242: (0x3F800000, "1.0"),
    243: (0xBF800000, "-1.0"),
    244: (0x40000000, "2.0"),
    245: (0xC0000000, "-2.0"),
    246: (0x40800000, "4.0"),
    247: (0xC0800000, "-4.0"),
    248: (0x3E22F983, "0.15915494"),
}


def inline_int(code: int) -> int | None:
    """The signed integer of an inline-constant code (128..208), or None."""
    if 128 <= code <= 192:
        return code - 128
    if 193 <= code <= 208:
        return 192 - code
    return None
