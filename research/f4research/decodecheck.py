"""tinygrad's gfx950 ("cdna") decoder as an independent check of f4pipe's (docs/reference/gfx950.md,
"The decoder against tinygrad's").

f4pipe's decoder was written from the CDNA4 ISA guide and checked against llvm-objdump's text.
tinygrad's encoding tables are generated from AMD's machine-readable ISA specification by people
who never read f4pipe, so decoding the same bytes with both and comparing the structured result
(not text) is a second, independent reading: the opcode, the size, every operand f4pipe models
with its register file, first register and width, and the modifier fields (offsets,
offen/idxen, lds, cache bits, op_sel, cbsz/blgp/abid, the scale sources).

tinygrad is a test dependency (pinned in pyproject's `test` extra); nothing of it is copied
here, only called. The register file of an operand comes from tinygrad's own operand-type
table (e.g. an AccVGPR-only field, or VGPR-or-AccVGPR chosen by the acc bit), so a file f4pipe
mis-chose would show. A disagreement is a fix in f4pipe, or a defect of tinygrad listed in
TINYGRAD_DEFECTS with the ISA guide's reason.

`f4research decodecheck [CO ...]` prints the tally for code objects (default: the pinned aiter's
35 f4gemm objects).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

from f4pipe.arch.decode import Instruction, Operand, decode_one
from f4pipe.core.errors import EmulatorError

#: Operand: (file, first register or constant code, registers) with file "s", "v", "a";
#: "c" for an inline constant (its code) and "lit" for a literal (its value).
Norm = tuple[str, int, int]

#: tinygrad's spelling of an opcode where LLVM's (f4pipe's) differs; same opcode number.
#: The ISA guide's own tables name these V_ACCVGPR_READ / V_ACCVGPR_WRITE; LLVM adds _b32.
SPELLINGS = {"v_accvgpr_read": "v_accvgpr_read_b32", "v_accvgpr_write": "v_accvgpr_write_b32"}

#: Known defects of tinygrad's decoder on these kernels: (mnemonic, field) -> why tinygrad is
#: wrong, with the ISA guide's section. Empty: none met.
TINYGRAD_DEFECTS: dict[tuple[str, str], str] = {}

_SALU_SOURCES = ("ssrc0", "ssrc1")


@dataclass
class Tally:
    """What one comparison found: instructions compared, by mnemonic, and every disagreement
    (where, mnemonic, field, f4pipe's reading, tinygrad's)."""

    compared: int = 0
    mnemonics: set[str] = field(default_factory=set)
    refused: dict[str, int] = field(default_factory=dict)
    seen: dict[bytes, list[tuple[str, object, object]]] = field(default_factory=dict, repr=False)
    disagreements: list[tuple[str, str, str, object, object]] = field(default_factory=list)
    defects: list[tuple[str, str, str]] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"{self.compared} instructions, {len(self.mnemonics)} mnemonics, "
            f"{len(self.disagreements)} disagreements, {len(self.defects)} known tinygrad defects",
        ]
        if self.refused:
            lines.append(f"  refused by f4pipe (decoded by tinygrad only): {self.refused}")
        lines += [
            f"  {where} {name}: {fld}: f4pipe {a!r} tinygrad {b!r}"
            for where, name, fld, a, b in self.disagreements[:20]
        ]
        return "\n".join(lines)


def _tiny_decode(data: bytes):
    from tinygrad.renderer.amd import decode_inst

    return decode_inst(data, "cdna")


def _f4_operand(op: Operand | None) -> Norm | None:
    if op is None:
        return None
    if op.kind == "imm":
        return ("lit", op.value, 1) if op.is_literal else ("c", op.code, 1)
    return (op.kind, op.index, op.count)


def _tiny_operand(inst, name: str, acc: bool) -> Norm:
    """tinygrad's operand `name` normalised, its register file from tinygrad's operand types."""
    from tinygrad.renderer.amd.dsl import VGPRField

    spec = inst.operands.get(name)
    optype = spec[2].name if spec else "OPR_SRC"
    count = max(1, inst.op_bits.get(name, 32) // 32)
    code = getattr(inst, name).offset
    eight_bit_vgpr = isinstance(dict(type(inst)._fields)[name], VGPRField)
    if eight_bit_vgpr and optype in ("OPR_SREG", "OPR_SDST", "OPR_SREG_NOVCC"):
        return ("s", code - 256, count)  # an SGPR in a VDST-shaped field (v_readfirstlane)
    if optype in ("OPR_ACCVGPR", "OPR_SRC_ACCVGPR"):
        return ("a", code - 256, count)
    if code >= 256:
        return ("a" if acc and "ACCVGPR" in optype else "v", code - 256, count)
    if code == 255:
        return ("lit", inst.literal, 1)
    if code < 128:
        return ("s", code, count)
    return ("c", code, 1)


def _name(inst) -> str:
    name = inst.op_name.lower().removesuffix("_e32").removesuffix("_e64")
    return SPELLINGS.get(name, name)


def _f4_name(inst: Instruction) -> str:
    return inst.text_name.removesuffix("_e32").removesuffix("_e64")


def _pairs(f4: Instruction, ti) -> dict[str, tuple[object, object]]:
    """(f4pipe's reading, tinygrad's) of every field f4pipe models in `f4`'s format."""
    fmt = f4.fmt
    out: dict[str, tuple[object, object]] = {}

    def operand(name: str, mine: Operand | None, acc: bool = False) -> None:
        out[name] = (_f4_operand(mine), _tiny_operand(ti, name, acc))

    def bits(name: str, mine: object, theirs: object | None = None) -> None:
        out[name] = (int(mine), int(getattr(ti, name) if theirs is None else theirs))

    if fmt in ("SOP1", "SOP2", "SOPC"):
        if f4.dst is not None:
            operand("sdst", f4.dst)
        if f4.name == "s_set_gpr_idx_on":  # SSRC1's raw bits are the enable mask
            operand("ssrc0", f4.srcs[0])
            bits("ssrc1", f4.imm, ti.ssrc1.offset & 0xF)
        else:
            for name, src in zip(_SALU_SOURCES, f4.srcs, strict=False):
                operand(name, src)
    elif fmt == "SOPK":
        operand("sdst", f4.dst)
        bits("simm16", f4.imm & 0xFFFF)
    elif fmt == "SOPP":
        bits("simm16", f4.imm)
    elif fmt == "SMEM":
        operand("sdata", f4.dst)
        operand("sbase", f4.srcs[0])
        bits("offset", f4.offset)
        bits("glc", f4.glc)
        bits("imm", 1)
        bits("soffset_en", 0)
    elif fmt in ("VOP1", "VOP2", "VOPC"):
        if f4.dst is not None:
            operand("vdst", f4.dst)
        operand("src0", f4.srcs[0])
        if len(f4.srcs) > 1:
            operand("vsrc1", f4.srcs[1])
    elif fmt == "VOP3":
        operand("vdst", f4.dst if f4.dst is not None else f4.sdst)
        for name, src in zip(("src0", "src1", "src2"), f4.srcs, strict=False):
            operand(name, src)
        bits("abs", f4.abs_)
        bits("neg", f4.neg)
        bits("omod", f4.omod)
        bits("clmp", f4.clamp)
        bits("opsel", f4.op_sel)
    elif fmt == "VOP3P" and f4.size == 16:
        a, b, c, scale0, scale1 = f4.srcs
        operand("vdst", f4.dst, acc=bool(ti.acc_cd))
        operand("src0", a, acc=bool(ti.acc & 1))
        operand("src1", b, acc=bool(ti.acc & 2))
        operand("src2", c, acc=bool(ti.acc_cd))
        for name, mine in (("scale_src0", scale0), ("scale_src1", scale1)):
            out[name] = (_f4_operand(mine), _scale_operand(getattr(ti, name)))
        bits("opsel", f4.op_sel, ti.opsel & 3)  # op_sel index 2: don't-care (gfx950.md)
        bits("opsel_hi", f4.op_sel_hi)
        bits("cbsz", f4.cbsz)
        bits("blgp", f4.blgp)
        bits("abid", f4.extra["abid"])
    elif fmt == "VOP3P":
        operand("vdst", f4.dst)
        operand("src0", f4.srcs[0])
    elif fmt == "DS":
        acc = bool(ti.acc)
        if f4.dst is not None:
            operand("vdst", f4.dst, acc)
        operand("addr", f4.srcs[0])
        if len(f4.srcs) > 1:
            operand("data0", f4.srcs[1], acc)
        bits("offset", f4.offset, ti.offset0 | ti.offset1 << 8)
    elif fmt == "MUBUF":
        vaddr, vdata, srsrc, soffset = f4.srcs
        operand("vaddr", vaddr)
        operand("vdata", vdata, bool(ti.acc))
        operand("srsrc", srsrc)
        operand("soffset", soffset)
        for name, mine in (
            ("offset", f4.offset),
            ("offen", f4.offen),
            ("idxen", f4.idxen),
            ("lds", f4.lds),
            ("sc0", f4.glc),
            ("nt", f4.slc),
        ):
            bits(name, mine)
    return out


def _scale_operand(code: int) -> Norm:
    """The scale sources are plain 9-bit source codes in tinygrad's VOP3PX2 layout."""
    if code >= 256:
        return ("v", code - 256, 1)
    return ("s", code, 1) if code < 128 else ("c", code, 1)


def compare_text(text: bytes, where: str, tally: Tally) -> None:
    """Decode `text` (a linear sweep of code) with both decoders and record what differs.

    An instruction f4pipe does not decode (an opcode outside its tables, which the emulator
    refuses to run) is counted in `refused` under tinygrad's name, and the sweep goes on by
    tinygrad's size: f4pipe failing closed is not a misreading."""
    pos = 0
    while pos < len(text):
        data = text[pos : pos + 16]
        try:
            f4: Instruction | None = decode_one(text, pos, pos)
        except EmulatorError:
            f4 = None
        if f4 is None or not f4.known:
            theirs = _tiny_decode(data)
            name = _name(theirs)
            tally.refused[name] = tally.refused.get(name, 0) + 1
            if f4 is not None and f4.size != theirs.size():
                site = f"{where}+{pos:#x}"
                tally.disagreements.append((site, name, "size", f4.size, theirs.size()))
            pos += theirs.size()
            continue
        tally.compared += 1
        key = text[pos : pos + f4.size]
        if key not in tally.seen:
            tally.seen[key] = differences(f4, data)
        mnemonic = _f4_name(f4)
        tally.mnemonics.add(mnemonic)
        for fld, mine, theirs in tally.seen[key]:
            site = f"{where}+{pos:#x}"
            if (mnemonic, fld) in TINYGRAD_DEFECTS:
                tally.defects.append((site, mnemonic, fld))
            else:
                tally.disagreements.append((site, mnemonic, fld, mine, theirs))
        pos += f4.size


def differences(f4: Instruction, data: bytes) -> list[tuple[str, object, object]]:
    """(field, f4pipe's reading, tinygrad's) for every field of `f4` the two read differently;
    `data` is the instruction's bytes (and any after it)."""
    try:
        ti = _tiny_decode(data)
    except (ValueError, AssertionError) as err:
        return [("decode", f4.name, f"tinygrad refuses: {err}")]
    out: list[tuple[str, object, object]] = []
    checks = {
        "mnemonic": (_f4_name(f4), _name(ti)),
        "opcode": (f4.op, ti.op.value),
        "size": (f4.size, ti.size()),
        **_pairs(f4, ti),
    }
    for fld, (mine, theirs) in checks.items():
        if mine != theirs:
            out.append((fld, mine, theirs))
    return out


def compare_code_objects(paths: Iterable) -> Tally:
    from f4pipe.codeobj.codeobject import CodeObject

    tally = Tally()
    for path in paths:
        co = CodeObject.read(path)
        compare_text(co.section_bytes(".text"), path.name, tally)
    return tally


def main() -> int:
    from importlib.util import find_spec
    from pathlib import Path

    if find_spec("tinygrad") is None:
        print("f4research decodecheck: needs tinygrad (pip install -e '.[test]')", file=sys.stderr)
        return 2

    if len(sys.argv) > 1:
        paths = [Path(p) for p in sys.argv[1:]]
    else:
        from f4pipe.aiter.manifest import read_manifest
        from f4pipe.core.cache import cache_root
        from f4pipe.fetch import PypiSource, fetch_aiter

        f4gemm = fetch_aiter(PypiSource(), cache_root() / "test-resources").f4gemm_dir
        paths = [f4gemm / e.co_name for e in read_manifest(f4gemm)]
    tally = compare_code_objects(paths)
    print(tally.summary())
    return 1 if tally.disagreements else 0
