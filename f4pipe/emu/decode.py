"""Decode gfx950 machine code from the bytes of a code object's .text.

The emulator runs what was assembled: every instruction it executes comes from these bytes,
decoded once per code object (`Program` caches them by pc). Field layouts follow the CDNA4 ISA
manual, chapter 13 ("Microcode Formats"); LLVM's spelling of the result is in disasm.py.
Parsing never formats and never guesses: a word of no known format raises EmulatorError with
its pc; a known format with an opcode outside the tables decodes to an `unknown_*` instruction,
which the executor refuses to run (so a disassembly listing still works).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from f4pipe.emu import isa
from f4pipe.errors import EmulatorError


@dataclass(frozen=True, slots=True)
class Operand:
    """One instruction operand.

    kind: "s" (SGPR or special scalar register; index is the operand code), "v" (VGPR index),
    "a" (AGPR index), "imm" (inline constant or literal; `value` holds its 32 bits).
    `count` consecutive registers are meant (s[4:5] has count 2). `code` is the raw field.
    """

    kind: str
    index: int
    count: int = 1
    value: int = 0
    code: int = 0

    @property
    def is_literal(self) -> bool:
        return self.kind == "imm" and self.code == isa.LITERAL


@dataclass(slots=True)
class Instruction:
    """A decoded instruction. `name` is the operation (handler key); `text_name` LLVM's mnemonic
    (with _e32/_e64 where LLVM prints one)."""

    pc: int
    size: int
    fmt: str
    op: int
    name: str
    text_name: str
    dst: Operand | None = None
    srcs: tuple[Operand, ...] = ()
    sdst: Operand | None = None
    imm: int = 0
    offset: int = 0
    offen: bool = False
    idxen: bool = False
    lds: bool = False
    glc: bool = False
    slc: bool = False
    clamp: bool = False
    neg: int = 0
    abs_: int = 0
    omod: int = 0
    op_sel: int = 0
    op_sel_hi: int = 0
    cbsz: int = 0
    blgp: int = 0
    target: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def known(self) -> bool:
        return not self.name.startswith("unknown")


def _sop_src(code: int, count: int, literal: int | None) -> Operand:
    """A scalar source field (8 bits): SGPR/special register, inline constant or literal."""
    if code <= 127:
        return Operand("s", code, count, code=code)
    return _const(code, literal)


def _const(code: int, literal: int | None) -> Operand:
    if code == isa.LITERAL:
        if literal is None:
            raise EmulatorError(f"literal operand without a literal dword (code {code})")
        return Operand("imm", code, 1, value=literal, code=code)
    iv = isa.inline_int(code)
    if iv is not None:
        return Operand("imm", code, 1, value=iv & 0xFFFFFFFF, code=code)
    if code in isa.INLINE_FLOATS:
        return Operand("imm", code, 1, value=isa.INLINE_FLOATS[code][0], code=code)
    if code in (235, 236, 237, 238, 239, 249, 250, 251, 252, 253, 254):
        return Operand("imm", code, 1, value=0, code=code)  # decoded; executor rejects it
    raise EmulatorError(f"reserved operand code {code}")


def _vsrc(code: int, count: int, literal: int | None, acc: bool = False) -> Operand:
    """A 9-bit vector source field: VGPR (256+), else as a scalar source."""
    if code >= isa.VGPR_BASE:
        return Operand("a" if acc else "v", code - isa.VGPR_BASE, count, code=code)
    return _sop_src(code, count, literal)


def _words(text: bytes, pos: int, n: int) -> tuple[int, ...]:
    return struct.unpack_from(f"<{n}I", text, pos)


def _unknown(pc: int, size: int, fmt: str, op: int) -> Instruction:
    name = f"unknown_{fmt.lower()}_{op:#x}"
    return Instruction(pc, size, fmt, op, name, name)


def decode_one(text: bytes, pos: int, pc: int) -> Instruction:
    """Decode the instruction at byte `pos` of `text`, whose address is `pc`."""
    if pos + 4 > len(text):
        raise EmulatorError(f"pc {pc:#x}: instruction runs past the end of .text")
    (w0,) = _words(text, pos, 1)

    def dword(i: int) -> int:
        if pos + 4 * i + 4 > len(text):
            raise EmulatorError(f"pc {pc:#x}: instruction runs past the end of .text")
        return _words(text, pos + 4 * i, 1)[0]

    top9 = w0 >> 23
    if top9 == 0x17D:
        return _decode_sop1(w0, pc, dword)
    if top9 == 0x17E:
        return _decode_sopc(w0, pc, dword)
    if top9 == 0x17F:
        return _decode_sopp(w0, pc)
    if w0 >> 28 == 0xB:
        return _decode_sopk(w0, pc)
    if w0 >> 30 == 0b10:
        return _decode_sop2(w0, pc, dword)
    if w0 >> 26 == 0b110000:
        return _decode_smem(w0, dword(1), pc)
    if w0 >> 25 == 0x3F:
        return _decode_vop1(w0, pc, dword)
    if w0 >> 25 == 0x3E:
        return _decode_vopc(w0, pc, dword)
    if w0 >> 31 == 0:
        return _decode_vop2(w0, pc, dword)
    if top9 == 0x1A7:
        return _decode_vop3p(w0, dword(1), pc, dword)
    if w0 >> 26 == 0b110100:
        return _decode_vop3(w0, dword(1), pc)
    if w0 >> 26 == 0b110110:
        return _decode_ds(w0, dword(1), pc)
    if w0 >> 26 == 0b111000:
        return _decode_mubuf(w0, dword(1), pc)
    raise EmulatorError(
        f"pc {pc:#x}: word {w0:#010x} is not an instruction format this emulator knows"
    )


def _literal_if(codes: tuple[int, ...], dword, index: int) -> tuple[int | None, int]:
    """The trailing literal dword if any source code asks for one, and the total size."""
    if isa.LITERAL in codes:
        return dword(index), 4 * index + 4
    return None, 4 * index


# --- scalar formats ---------------------------------------------------------------------


def _decode_sop2(w0: int, pc: int, dword) -> Instruction:
    op = (w0 >> 23) & 0x7F
    sdst, s1, s0 = (w0 >> 16) & 0x7F, (w0 >> 8) & 0xFF, w0 & 0xFF
    lit, size = _literal_if((s0, s1), dword, 1)
    name = isa.SOP2.get(op)
    if name is None:
        return _unknown(pc, size, "SOP2", op)
    n = 2 if name.endswith("64") else 1
    return Instruction(
        pc,
        size,
        "SOP2",
        op,
        name,
        name,
        dst=Operand("s", sdst, n, code=sdst),
        srcs=(_sop_src(s0, n, lit), _sop_src(s1, n, lit)),
    )


def _decode_sop1(w0: int, pc: int, dword) -> Instruction:
    sdst, op, s0 = (w0 >> 16) & 0x7F, (w0 >> 8) & 0xFF, w0 & 0xFF
    lit, size = _literal_if((s0,), dword, 1)
    name = isa.SOP1.get(op)
    if name is None:
        return _unknown(pc, size, "SOP1", op)
    n = 2 if name.endswith("64") else 1
    return Instruction(
        pc,
        size,
        "SOP1",
        op,
        name,
        name,
        dst=Operand("s", sdst, n, code=sdst),
        srcs=(_sop_src(s0, n, lit),),
    )


def _decode_sopc(w0: int, pc: int, dword) -> Instruction:
    op, s1, s0 = (w0 >> 16) & 0x7F, (w0 >> 8) & 0xFF, w0 & 0xFF
    name = isa.SOPC.get(op)
    if name == "s_set_gpr_idx_on":
        # SRC1 is not a source: its raw bits are the enable mask (manual, S_SET_GPR_IDX_ON).
        lit, size = _literal_if((s0,), dword, 1)
        return Instruction(
            pc, size, "SOPC", op, name, name, srcs=(_sop_src(s0, 1, lit),), imm=s1 & 0xF
        )
    lit, size = _literal_if((s0, s1), dword, 1)
    if name is None:
        return _unknown(pc, size, "SOPC", op)
    return Instruction(
        pc, size, "SOPC", op, name, name, srcs=(_sop_src(s0, 1, lit), _sop_src(s1, 1, lit))
    )


def _decode_sopk(w0: int, pc: int) -> Instruction:
    op, sdst, simm = (w0 >> 23) & 0x1F, (w0 >> 16) & 0x7F, w0 & 0xFFFF
    name = isa.SOPK.get(op)
    if name is None:
        return _unknown(pc, 4, "SOPK", op)
    return Instruction(
        pc, 4, "SOPK", op, name, name, dst=Operand("s", sdst, 1, code=sdst), imm=simm
    )


def _decode_sopp(w0: int, pc: int) -> Instruction:
    op, simm = (w0 >> 16) & 0x7F, w0 & 0xFFFF
    name = isa.SOPP.get(op)
    if name is None:
        return _unknown(pc, 4, "SOPP", op)
    inst = Instruction(pc, 4, "SOPP", op, name, name, imm=simm)
    if name in ("s_branch", "s_cbranch_scc0", "s_cbranch_scc1"):
        rel = simm - 0x10000 if simm & 0x8000 else simm
        inst.target = pc + 4 + 4 * rel
    return inst


def _decode_smem(w0: int, w1: int, pc: int) -> Instruction:
    op = (w0 >> 18) & 0xFF
    name = isa.SMEM.get(op)
    if name is None:
        return _unknown(pc, 8, "SMEM", op)
    if not (w0 >> 17) & 1 or (w0 >> 14) & 1:
        return _unknown(pc, 8, "SMEM", op)  # register offsets (imm=0 / soe) are not used here
    sdata, sbase = (w0 >> 6) & 0x7F, (w0 & 0x3F) * 2
    n = isa.SMEM_DWORDS[name]
    return Instruction(
        pc,
        8,
        "SMEM",
        op,
        name,
        name,
        dst=Operand("s", sdata, n, code=sdata),
        srcs=(Operand("s", sbase, 2, code=sbase),),
        offset=w1 & 0x1FFFFF,
        glc=bool((w0 >> 16) & 1),
        extra=_unmodelled(("glc (scalar cache coherence)", (w0 >> 16) & 1)),
    )


# --- vector ALU formats -------------------------------------------------------------------


def _reject_sdwa_dpp(code: int, pc: int, fmt: str, op: int) -> Instruction | None:
    if code in (0xF9, 0xFA):
        return _unknown(pc, 8, f"{fmt}_{'SDWA' if code == 0xF9 else 'DPP'}", op)
    return None


def _decode_vop2(w0: int, pc: int, dword) -> Instruction:
    op, vdst, vsrc1, src0 = (w0 >> 25) & 0x3F, (w0 >> 17) & 0xFF, (w0 >> 9) & 0xFF, w0 & 0x1FF
    bad = _reject_sdwa_dpp(src0, pc, "VOP2", op)
    if bad:
        return bad
    lit, size = _literal_if((src0,), dword, 1)
    name = isa.VOP2.get(op)
    if name is None:
        return _unknown(pc, size, "VOP2", op)
    srcs = (_vsrc(src0, 1, lit), Operand("v", vsrc1, 1, code=256 + vsrc1))
    return Instruction(pc, size, "VOP2", op, name, name + "_e32", dst=Operand("v", vdst), srcs=srcs)


def _decode_vop1(w0: int, pc: int, dword) -> Instruction:
    vdst, op, src0 = (w0 >> 17) & 0xFF, (w0 >> 9) & 0xFF, w0 & 0x1FF
    bad = _reject_sdwa_dpp(src0, pc, "VOP1", op)
    if bad:
        return bad
    lit, size = _literal_if((src0,), dword, 1)
    name = isa.VOP1.get(op)
    if name is None:
        return _unknown(pc, size, "VOP1", op)
    text = name if name in isa.VOP1_NO_SUFFIX else name + "_e32"
    dst = Operand("s", vdst, code=vdst) if name == "v_readfirstlane_b32" else Operand("v", vdst)
    return Instruction(pc, size, "VOP1", op, name, text, dst=dst, srcs=(_vsrc(src0, 1, lit),))


def _decode_vopc(w0: int, pc: int, dword) -> Instruction:
    op, vsrc1, src0 = (w0 >> 17) & 0xFF, (w0 >> 9) & 0xFF, w0 & 0x1FF
    bad = _reject_sdwa_dpp(src0, pc, "VOPC", op)
    if bad:
        return bad
    lit, size = _literal_if((src0,), dword, 1)
    name = isa.VOPC.get(op)
    if name is None:
        return _unknown(pc, size, "VOPC", op)
    srcs = (_vsrc(src0, 1, lit), Operand("v", vsrc1, 1, code=256 + vsrc1))
    return Instruction(
        pc,
        size,
        "VOPC",
        op,
        name,
        name + "_e32",
        sdst=Operand("s", isa.VCC_LO, 2, code=isa.VCC_LO),
        srcs=srcs,
    )


def _decode_vop3(w0: int, w1: int, pc: int) -> Instruction:
    op = (w0 >> 16) & 0x3FF
    vdst = w0 & 0xFF
    codes = (w1 & 0x1FF, (w1 >> 9) & 0x1FF, (w1 >> 18) & 0x1FF)
    if isa.LITERAL in codes:
        return _unknown(pc, 8, "VOP3_LITERAL", op)
    common = dict(
        clamp=bool((w0 >> 15) & 1),
        abs_=(w0 >> 8) & 7,
        op_sel=(w0 >> 11) & 0xF,
        omod=(w1 >> 27) & 3,
        neg=(w1 >> 29) & 7,
    )
    if op in isa.VOP3_ONLY:
        name = isa.VOP3_ONLY[op]
        srcs = tuple(_vsrc(c, 1, None) for c in codes[:2])
        return Instruction(
            pc, 8, "VOP3", op, name, name, dst=Operand("v", vdst), srcs=srcs, **common
        )
    if (
        isa.VOP3_VOP1_BASE <= op < isa.VOP3_VOP1_BASE + 0x80
        and (op - isa.VOP3_VOP1_BASE) in isa.VOP1
    ):
        name = isa.VOP1[op - isa.VOP3_VOP1_BASE]
        return Instruction(
            pc,
            8,
            "VOP3",
            op,
            name,
            name + "_e64",
            dst=Operand("v", vdst),
            srcs=(_vsrc(codes[0], 1, None),),
            **common,
        )
    if (
        isa.VOP3_VOP2_BASE <= op < isa.VOP3_VOP2_BASE + 0x40
        and (op - isa.VOP3_VOP2_BASE) in isa.VOP2
    ):
        name = isa.VOP2[op - isa.VOP3_VOP2_BASE]
        srcs = tuple(_vsrc(c, 1, None) for c in codes[:2])
        if name == "v_cndmask_b32":
            srcs = (*srcs, Operand("s", codes[2], 2, code=codes[2]))
        return Instruction(
            pc, 8, "VOP3", op, name, name + "_e64", dst=Operand("v", vdst), srcs=srcs, **common
        )
    if op in isa.VOPC:
        name = isa.VOPC[op]
        srcs = tuple(_vsrc(c, 1, None) for c in codes[:2])
        return Instruction(
            pc,
            8,
            "VOP3",
            op,
            name,
            name + "_e64",
            sdst=Operand("s", vdst, 2, code=vdst),
            srcs=srcs,
            **common,
        )
    return _unknown(pc, 8, "VOP3", op)


def _decode_vop3p(w0: int, w1: int, pc: int, dword) -> Instruction:
    op = (w0 >> 16) & 0x7F
    if op == isa.VOP3P_LD_SCALE:
        return _decode_scaled_mfma(w0, w1, dword(2), dword(3), pc)
    name = isa.VOP3P.get(op)
    if name is None:
        return _unknown(pc, 8, "VOP3P", op)
    # The register file is implied by the opcode (bits 59-60 hold op_sel_hi here, not acc).
    src0 = _vsrc(w1 & 0x1FF, 1, None, acc=name == "v_accvgpr_read_b32")
    if src0.is_literal:
        return _unknown(pc, 8, "VOP3P_LITERAL", op)
    vdst = w0 & 0xFF
    dst = Operand("a", vdst) if name == "v_accvgpr_write_b32" else Operand("v", vdst)
    return Instruction(pc, 8, "VOP3P", op, name, name, dst=dst, srcs=(src0,))


def _decode_scaled_mfma(w0: int, w1: int, w2: int, w3: int, pc: int) -> Instruction:
    """The 16-byte scaled MFMA: a load-scale VOP3P pair, then the MFMA pair (gfx950.md)."""
    op = (w2 >> 16) & 0x7F
    if w2 >> 23 != 0x1A7 or op not in isa.VOP3P_SCALED_MFMA:
        return _unknown(pc, 16, "VOP3P_SCALE", op)
    name = isa.VOP3P_SCALED_MFMA[op]
    scale0 = _vsrc(w1 & 0x1FF, 1, None)
    scale1 = _vsrc((w1 >> 9) & 0x1FF, 1, None)
    op_sel = (w0 >> 11) & 3  # index 2 (bit 13) is don't-care
    op_sel_hi = (w1 >> 27) & 3  # bits 59-60; index 2 (bit 14 of w0) is don't-care
    acc_cd = bool((w2 >> 15) & 1)
    acc = (w3 >> 27) & 3
    vdst = w2 & 0xFF
    a = _vsrc(w3 & 0x1FF, 4, None, acc=bool(acc & 1))
    b = _vsrc((w3 >> 9) & 0x1FF, 4, None, acc=bool(acc & 2))
    c_code = (w3 >> 18) & 0x1FF
    c = _vsrc(c_code, 4, None, acc=acc_cd) if c_code >= 256 else _vsrc(c_code, 1, None)
    if any(o.is_literal for o in (scale0, scale1, a, b, c)):
        return _unknown(pc, 16, "VOP3P_SCALE_LITERAL", op)
    unmodelled = _unmodelled(
        ("neg/neg_hi of the scale sources", w1 >> 29),
        ("clamp of the scale word", (w0 >> 15) & 1),
        # LLVM always encodes 1 here for the scaled MFMA (the round trip reproduces it)
        ("abid other than 1", ((w2 >> 11) & 0xF) != 1),
    )
    return Instruction(
        pc,
        16,
        "VOP3P",
        op,
        name,
        name,
        dst=Operand("a" if acc_cd else "v", vdst, 4),
        srcs=(a, b, c, scale0, scale1),
        op_sel=op_sel,
        op_sel_hi=op_sel_hi,
        cbsz=(w2 >> 8) & 7,
        blgp=(w3 >> 29) & 7,
        extra={"abid": (w2 >> 11) & 0xF, **unmodelled},
    )


# --- memory formats -----------------------------------------------------------------------


def _decode_ds(w0: int, w1: int, pc: int) -> Instruction:
    op = (w0 >> 17) & 0xFF
    name = isa.DS.get(op)
    if name is None or (w0 >> 16) & 1:  # gds
        return _unknown(pc, 8, "DS", op)
    acc = bool((w0 >> 25) & 1)
    n = isa.DS_DWORDS[name]
    addr = Operand("v", w1 & 0xFF)
    offset = w0 & 0xFFFF
    if name.startswith("ds_read"):
        dst = Operand("a" if acc else "v", (w1 >> 24) & 0xFF, n)
        return Instruction(pc, 8, "DS", op, name, name, dst=dst, srcs=(addr,), offset=offset)
    data = Operand("a" if acc else "v", (w1 >> 8) & 0xFF, n)
    return Instruction(pc, 8, "DS", op, name, name, srcs=(addr, data), offset=offset)


def _decode_mubuf(w0: int, w1: int, pc: int) -> Instruction:
    op = (w0 >> 18) & 0x7F
    name = isa.MUBUF.get(op)
    if name is None:
        return _unknown(pc, 8, "MUBUF", op)
    offen, idxen = bool((w0 >> 12) & 1), bool((w0 >> 13) & 1)
    lds = bool((w0 >> 16) & 1)
    acc = bool((w1 >> 23) & 1)
    n = isa.MUBUF_DWORDS[name]
    vaddr = Operand("v", w1 & 0xFF, 2 if (offen and idxen) else 1)
    vdata = Operand("a" if acc else "v", (w1 >> 8) & 0xFF, n)
    srsrc = Operand("s", ((w1 >> 16) & 0x1F) * 4, 4)
    soff_code = (w1 >> 24) & 0xFF
    if soff_code == isa.LITERAL:
        return _unknown(pc, 8, "MUBUF_LITERAL", op)
    soffset = _sop_src(soff_code, 1, None)
    coherence = "the emulator's memory is coherent and ordered, which these bits exist to change"
    returning_atomic = name.startswith("buffer_atomic") and (w0 >> 14) & 1
    unmodelled = _unmodelled(
        (f"glc/sc0 ({coherence})", (w0 >> 14) & 1 and not returning_atomic),
        (f"sc1 ({coherence})", (w0 >> 15) & 1),
        (f"slc/nt ({coherence})", (w0 >> 17) & 1),
    )
    return Instruction(
        pc,
        8,
        "MUBUF",
        op,
        name,
        name,
        srcs=(vaddr, vdata, srsrc, soffset),
        offset=w0 & 0xFFF,
        offen=offen,
        idxen=idxen,
        lds=lds,
        glc=bool((w0 >> 14) & 1),
        slc=bool((w0 >> 17) & 1),
        extra=unmodelled,
    )


def _unmodelled(*fields: tuple[str, int | bool]) -> dict[str, str]:
    """{"unmodelled": names} for fields set that the emulator does not model: the instruction
    still decodes (listings, diffs), and the executor refuses to run it (fail closed)."""
    names = [name for name, value in fields if value]
    return {"unmodelled": ", ".join(names)} if names else {}


def decode_all(text: bytes, base: int = 0) -> list[Instruction]:
    """Every instruction of `text` in order (a linear sweep: .text here holds only code)."""
    out = []
    pos = 0
    while pos < len(text):
        inst = decode_one(text, pos, base + pos)
        out.append(inst)
        pos += inst.size
    return out
