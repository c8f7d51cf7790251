"""Decode gfx950 machine code from the bytes of a code object's .text.

The emulator runs what was assembled: every instruction it executes comes from these bytes,
decoded once per code object (`Program` caches them by pc). Field layouts follow the CDNA4 ISA
manual, chapter 13 ("Microcode Formats"); LLVM's spelling of the result is in disasm.py.
Parsing never formats and never guesses: a word of no known format raises EmulatorError with
its pc; a known format with an opcode outside the tables decodes to an `unknown_*` instruction,
which the executor refuses to run (so a disassembly listing still works).

Table-driven: isa.FORMATS holds every format's encoding and field layout. One lookup on dword
0's top nine bits (all encodings lie within them) picks the format, one extractor reads its
fields by name, and one builder per format family (scalar ALU, VOP e32, VOP3, ...) turns them
into operands.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from f4pipe.arch import isa
from f4pipe.core.errors import EmulatorError


class Operand(NamedTuple):
    """One instruction operand (immutable; a NamedTuple because it is built twice as fast as a
    frozen dataclass, and a scaled MFMA has six).

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
    (with _e32/_e64 where LLVM prints one). `imm` is SOPK's SIMM16 sign-extended, SOPP's SIMM16
    as is, or s_set_gpr_idx_on's mode bits."""

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


Fields = dict[str, int]


def signed(value: int, bits: int) -> int:
    """The low `bits` bits of `value` as a two's complement integer."""
    sign = 1 << (bits - 1)
    return (value & (sign - 1)) - (value & sign)


class _Site:
    """Where an instruction sits: its bytes from `pos` of `text`, at address `pc`."""

    __slots__ = ("pc", "pos", "text")

    def __init__(self, text: bytes, pos: int, pc: int) -> None:
        self.text, self.pos, self.pc = text, pos, pc

    def dwords(self, first: int, count: int) -> int:
        """Dwords first..first+count-1 of the instruction as one little-endian integer."""
        start = self.pos + 4 * first
        end = start + 4 * count
        if end > len(self.text):
            raise EmulatorError(f"pc {self.pc:#x}: instruction runs past the end of .text")
        return int.from_bytes(self.text[start:end], "little")


Builder = Callable[[isa.Format, Fields, _Site], "Instruction"]


@dataclass(frozen=True, slots=True)
class _Decoder:
    """A format ready to decode: its fields as (name, shift, mask), its signed fields as
    (name, width), and its builder."""

    fmt: isa.Format
    layout: tuple[tuple[str, int, int], ...]
    signed: tuple[tuple[str, int], ...]
    build: Builder

    @classmethod
    def of(cls, fmt: isa.Format) -> _Decoder:
        layout = tuple((name, lo, (1 << (hi - lo + 1)) - 1) for name, lo, hi in fmt.fields)
        widths = tuple((name, hi - lo + 1) for name, lo, hi in fmt.fields if name in fmt.signed)
        return cls(fmt, layout, widths, BUILDERS[fmt.name])

    def fields(self, raw: int) -> Fields:
        """The fields of an instruction whose dwords, as one little-endian integer, are `raw`."""
        fields = {name: raw >> lo & mask for name, lo, mask in self.layout}
        for name, bits in self.signed:
            fields[name] = signed(fields[name], bits)
        return fields


def decode_one(text: bytes, pos: int, pc: int) -> Instruction:
    """Decode the instruction at byte `pos` of `text`, whose address is `pc`."""
    if pos + 4 > len(text):
        raise EmulatorError(f"pc {pc:#x}: instruction runs past the end of .text")
    w0 = int.from_bytes(text[pos : pos + 4], "little")
    decoder = _BY_TOP9[w0 >> 23]
    if decoder is None:
        raise EmulatorError(
            f"pc {pc:#x}: word {w0:#010x} is not an instruction format this emulator knows"
        )
    site = _Site(text, pos, pc)
    raw = w0 if decoder.fmt.dwords == 1 else site.dwords(0, decoder.fmt.dwords)
    return decoder.build(decoder.fmt, decoder.fields(raw), site)


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
    if code in isa.UNMODELLED_OPERANDS:
        return Operand("imm", code, 1, value=0, code=code)  # decoded; executor rejects it
    raise EmulatorError(f"reserved operand code {code}")


def _vsrc(code: int, count: int, literal: int | None, acc: bool = False) -> Operand:
    """A 9-bit vector source field: VGPR (256+), else as a scalar source."""
    if code >= isa.VGPR_BASE:
        return Operand("a" if acc else "v", code - isa.VGPR_BASE, count, code=code)
    return _sop_src(code, count, literal)


def _unknown(pc: int, size: int, fmt: str, op: int) -> Instruction:
    name = f"unknown_{fmt.lower()}_{op:#x}"
    return Instruction(pc, size, fmt, op, name, name)


def _literal_if(codes: tuple[int, ...], site: _Site, index: int) -> tuple[int | None, int]:
    """The literal dword after `index` fixed dwords if any source code asks for one, and the
    instruction's size in bytes."""
    if isa.LITERAL in codes:
        return site.dwords(index, 1), 4 * index + 4
    return None, 4 * index


def _unmodelled(*fields: tuple[str, int | bool]) -> dict[str, str]:
    """{"unmodelled": names} for fields set that the emulator does not model: the instruction
    still decodes (listings, diffs), and the executor refuses to run it (fail closed)."""
    names = [name for name, value in fields if value]
    return {"unmodelled": ", ".join(names)} if names else {}


# --- scalar formats -----------------------------------------------------------------------


def _salu(fmt: isa.Format, f: Fields, site: _Site) -> Instruction:
    """SOP1, SOP2 and SOPC: an optional SDST and one or two scalar sources."""
    op = f["op"]
    name = fmt.opcodes.get(op)
    codes = (f["ssrc0"], f["ssrc1"]) if "ssrc1" in f else (f["ssrc0"],)
    imm = 0
    if name == "s_set_gpr_idx_on":
        # SSRC1 is not a source: its raw bits are the enable mask (manual, S_SET_GPR_IDX_ON).
        codes, imm = codes[:1], codes[1] & 0xF
    lit, size = _literal_if(codes, site, 1)
    if name is None:
        return _unknown(site.pc, size, fmt.name, op)
    n = 2 if name.endswith("64") else 1
    dst = Operand("s", f["sdst"], n, code=f["sdst"]) if "sdst" in f else None
    srcs = tuple(_sop_src(code, n, lit) for code in codes)
    return Instruction(site.pc, size, fmt.name, op, name, name, dst=dst, srcs=srcs, imm=imm)


def _sopk(fmt: isa.Format, f: Fields, site: _Site) -> Instruction:
    op, sdst = f["op"], f["sdst"]
    name = fmt.opcodes.get(op)
    if name is None:
        return _unknown(site.pc, 4, fmt.name, op)
    dst = Operand("s", sdst, 1, code=sdst)
    return Instruction(site.pc, 4, fmt.name, op, name, name, dst=dst, imm=f["simm16"])


def _sopp(fmt: isa.Format, f: Fields, site: _Site) -> Instruction:
    op, simm = f["op"], f["simm16"]
    name = fmt.opcodes.get(op)
    if name is None:
        return _unknown(site.pc, 4, fmt.name, op)
    inst = Instruction(site.pc, 4, fmt.name, op, name, name, imm=simm)
    if name in ("s_branch", "s_cbranch_scc0", "s_cbranch_scc1"):
        inst.target = site.pc + 4 + 4 * signed(simm, 16)
    return inst


def _smem(fmt: isa.Format, f: Fields, site: _Site) -> Instruction:
    op = f["op"]
    name = fmt.opcodes.get(op)
    if name is None or not f["imm"] or f["soe"]:
        return _unknown(site.pc, 8, fmt.name, op)  # register offsets (imm=0 / soe): not used
    sdata, sbase = f["sdata"], f["sbase"] * 2
    return Instruction(
        site.pc,
        8,
        fmt.name,
        op,
        name,
        name,
        dst=Operand("s", sdata, isa.SMEM_DWORDS[name], code=sdata),
        srcs=(Operand("s", sbase, 2, code=sbase),),
        offset=f["offset"],
        glc=bool(f["glc"]),
        extra=_unmodelled(("glc (scalar cache coherence)", f["glc"])),
    )


# --- vector ALU formats -------------------------------------------------------------------


def _vop_e32(fmt: isa.Format, f: Fields, site: _Site) -> Instruction:
    """VOP1, VOP2 and VOPC: SRC0 (which may ask for a literal), VSRC1 where the format has
    one, and VDST, or VCC for VOPC, which has no VDST field."""
    op, src0 = f["op"], f["src0"]
    if src0 in (isa.SRC_SDWA, isa.SRC_DPP):
        kind = "SDWA" if src0 == isa.SRC_SDWA else "DPP"
        return _unknown(site.pc, 8, f"{fmt.name}_{kind}", op)
    lit, size = _literal_if((src0,), site, 1)
    name = fmt.opcodes.get(op)
    if name is None:
        return _unknown(site.pc, size, fmt.name, op)
    srcs: tuple[Operand, ...] = (_vsrc(src0, 1, lit),)
    if "vsrc1" in f:
        srcs += (Operand("v", f["vsrc1"], 1, code=isa.VGPR_BASE + f["vsrc1"]),)
    text = name if name in isa.VOP1_NO_SUFFIX else name + "_e32"
    inst = Instruction(site.pc, size, fmt.name, op, name, text, srcs=srcs)
    if "vdst" not in f:
        inst.sdst = Operand("s", isa.VCC_LO, 2, code=isa.VCC_LO)
    elif name == "v_readfirstlane_b32":
        inst.dst = Operand("s", f["vdst"], code=f["vdst"])
    else:
        inst.dst = Operand("v", f["vdst"])
    return inst


def _vop3(fmt: isa.Format, f: Fields, site: _Site) -> Instruction:
    """VOP3A: the e64 form of a VOP1/VOP2/VOPC operation (same operands, plus modifiers;
    VOPC's lane mask goes to the SGPR pair in VDST) or a VOP3-only one (two sources)."""
    op, vdst = f["op"], f["vdst"]
    codes = (f["src0"], f["src1"], f["src2"])
    if isa.LITERAL in codes:
        return _unknown(site.pc, 8, "VOP3_LITERAL", op)
    entry = fmt.opcodes.get(op)
    if entry is None:
        return _unknown(site.pc, 8, fmt.name, op)
    name, origin = entry
    text = name if origin == "VOP3" else name + "_e64"
    srcs = tuple(_vsrc(c, 1, None) for c in codes[: 1 if origin == "VOP1" else 2])
    inst = Instruction(
        site.pc,
        8,
        fmt.name,
        op,
        name,
        text,
        srcs=srcs,
        clamp=bool(f["clamp"]),
        abs_=f["abs"],
        op_sel=f["op_sel"],
        omod=f["omod"],
        neg=f["neg"],
    )
    if origin == "VOPC":
        inst.sdst = Operand("s", vdst, 2, code=vdst)
        return inst
    if name == "v_cndmask_b32":
        inst.srcs = (*srcs, Operand("s", codes[2], 2, code=codes[2]))
    inst.dst = Operand("v", vdst)
    return inst


def _vop3p(fmt: isa.Format, f: Fields, site: _Site) -> Instruction:
    op = f["op"]
    if op == isa.VOP3P_LD_SCALE:
        return _scaled_mfma(f, site)
    name = fmt.opcodes.get(op)
    if name is None:
        return _unknown(site.pc, 8, fmt.name, op)
    # The register file is implied by the opcode (bits 59-60 hold op_sel_hi here, not acc).
    src0 = _vsrc(f["src0"], 1, None, acc=name == "v_accvgpr_read_b32")
    if src0.is_literal:
        return _unknown(site.pc, 8, "VOP3P_LITERAL", op)
    vdst = f["vdst"]
    dst = Operand("a", vdst) if name == "v_accvgpr_write_b32" else Operand("v", vdst)
    return Instruction(site.pc, 8, fmt.name, op, name, name, dst=dst, srcs=(src0,))


def _scaled_mfma(scale: Fields, site: _Site) -> Instruction:
    """The 16-byte scaled MFMA: a load-scale VOP3P pair (`scale`), then the MFMA pair in the
    VOP3P-MAI layout (docs/reference/gfx950.md)."""
    mai_fmt = isa.VOP3P_MAI_FORMAT
    raw = site.dwords(2, 2)
    mai = _MAI.fields(raw)
    op = mai["op"]
    name = mai_fmt.opcodes.get(op)
    if not mai_fmt.matches(raw & 0xFFFFFFFF) or name is None:
        return _unknown(site.pc, 16, "VOP3P_SCALE", op)
    scale0 = _vsrc(scale["src0"], 1, None)
    scale1 = _vsrc(scale["src1"], 1, None)
    acc_cd = bool(mai["acc_cd"])
    a_regs = isa.F8F6F4_REGS.get(mai["cbsz"])
    b_regs = isa.F8F6F4_REGS.get(mai["blgp"])
    if a_regs is None or b_regs is None:  # a reserved format code
        return _unknown(site.pc, 16, "VOP3P_SCALE_FORMAT", op)
    # the operand widths follow the formats: an FP8 MFMA reads 8 registers of A, not 4
    a = _vsrc(mai["src0"], a_regs, None, acc=bool(mai["acc"] & 1))
    b = _vsrc(mai["src1"], b_regs, None, acc=bool(mai["acc"] & 2))
    c_code = mai["src2"]
    c = _vsrc(c_code, 4, None, acc=acc_cd) if c_code >= isa.VGPR_BASE else _vsrc(c_code, 1, None)
    if any(o.is_literal for o in (scale0, scale1, a, b, c)):
        return _unknown(site.pc, 16, "VOP3P_SCALE_LITERAL", op)
    unmodelled = _unmodelled(
        ("neg/neg_hi of the scale sources", scale["neg"] | scale["neg_hi"]),
        ("clamp of the scale word", scale["clamp"]),
        # LLVM always encodes 1 here for the scaled MFMA (the round trip reproduces it)
        ("abid other than 1", mai["abid"] != 1),
    )
    return Instruction(
        site.pc,
        16,
        "VOP3P",
        op,
        name,
        name,
        dst=Operand("a" if acc_cd else "v", mai["vdst"], 4),
        srcs=(a, b, c, scale0, scale1),
        op_sel=scale["op_sel"] & 3,  # index 2 is don't-care
        op_sel_hi=scale["op_sel_hi"],  # index 2 (op_sel_hi2) is don't-care
        cbsz=mai["cbsz"],
        blgp=mai["blgp"],
        extra={"abid": mai["abid"], **unmodelled},
    )


# --- memory formats -----------------------------------------------------------------------


def _ds(fmt: isa.Format, f: Fields, site: _Site) -> Instruction:
    op = f["op"]
    name = fmt.opcodes.get(op)
    if name is None or f["gds"]:
        return _unknown(site.pc, 8, fmt.name, op)
    kind = "a" if f["acc"] else "v"
    n = isa.DS_DWORDS[name]
    addr = Operand("v", f["addr"])
    if name.startswith("ds_read"):
        dst = Operand(kind, f["vdst"], n)
        return Instruction(
            site.pc, 8, fmt.name, op, name, name, dst=dst, srcs=(addr,), offset=f["offset"]
        )
    data = Operand(kind, f["data0"], n)
    return Instruction(site.pc, 8, fmt.name, op, name, name, srcs=(addr, data), offset=f["offset"])


def _mubuf(fmt: isa.Format, f: Fields, site: _Site) -> Instruction:
    op = f["op"]
    name = fmt.opcodes.get(op)
    if name is None:
        return _unknown(site.pc, 8, fmt.name, op)
    offen, idxen = bool(f["offen"]), bool(f["idxen"])
    vaddr = Operand("v", f["vaddr"], 2 if (offen and idxen) else 1)
    vdata = Operand("a" if f["acc"] else "v", f["vdata"], isa.MUBUF_DWORDS[name])
    srsrc = Operand("s", f["srsrc"] * 4, 4)
    if f["soffset"] == isa.LITERAL:
        return _unknown(site.pc, 8, "MUBUF_LITERAL", op)
    soffset = _sop_src(f["soffset"], 1, None)
    coherence = "the emulator's memory is coherent and ordered, which these bits exist to change"
    returning_atomic = name.startswith("buffer_atomic") and f["sc0"]
    unmodelled = _unmodelled(
        (f"glc/sc0 ({coherence})", f["sc0"] and not returning_atomic),
        (f"sc1 ({coherence})", f["sc1"]),
        (f"slc/nt ({coherence})", f["nt"]),
    )
    return Instruction(
        site.pc,
        8,
        fmt.name,
        op,
        name,
        name,
        srcs=(vaddr, vdata, srsrc, soffset),
        offset=f["offset"],
        offen=offen,
        idxen=idxen,
        lds=bool(f["lds"]),
        glc=bool(f["sc0"]),
        slc=bool(f["nt"]),
        extra=unmodelled,
    )


# --- the dispatch table -------------------------------------------------------------------

#: The builder of each format family (the layouts are isa.FORMATS).
BUILDERS: dict[str, Builder] = {
    "SOP2": _salu,
    "SOP1": _salu,
    "SOPC": _salu,
    "SOPK": _sopk,
    "SOPP": _sopp,
    "SMEM": _smem,
    "VOP1": _vop_e32,
    "VOP2": _vop_e32,
    "VOPC": _vop_e32,
    "VOP3": _vop3,
    "VOP3P": _vop3p,
    "DS": _ds,
    "MUBUF": _mubuf,
}


def _format_table() -> tuple[_Decoder | None, ...]:
    """The decoder for each value of dword 0's top nine bits: the format with the longest
    encoding that matches (None: no format)."""
    decoders = {fmt.name: _Decoder.of(fmt) for fmt in isa.FORMATS}
    table: list[_Decoder | None] = []
    for top9 in range(512):
        matching = [fmt for fmt in isa.FORMATS if fmt.matches(top9 << 23)]
        best = max(matching, key=lambda fmt: 32 - fmt.encoding_lo, default=None)
        table.append(None if best is None else decoders[best.name])
    return tuple(table)


_BY_TOP9 = _format_table()
_MAI = _Decoder.of(isa.VOP3P_MAI_FORMAT)


def decode_all(text: bytes, base: int = 0) -> list[Instruction]:
    """Every instruction of `text` in order (a linear sweep: .text here holds only code)."""
    out = []
    pos = 0
    while pos < len(text):
        inst = decode_one(text, pos, base + pos)
        out.append(inst)
        pos += inst.size
    return out
