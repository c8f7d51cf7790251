"""Prove a rebuilt code object equivalent to its original, and explain every byte that differs.

Checks, per pair: every ELF header field and every program header; kernel descriptor bytes;
.text as disassembly (address and text of every instruction); metadata notes; symbols as a
multiset; every section header (type, address, size, flags, alignment, link, info, entry size)
and the bytes of every section but .comment (which names the linker). One layout difference is
explained (see `relro_padding`): newer lld's `.relro_padding` section; any other is reported.
Then .text byte by byte: each differing byte is attributed to its instruction and classified.
The one known harmless difference: bits 13-14 of the first dword of v_mfma_scale_* (op_sel and
op_sel_hi of operand index 2, the accumulator, which the hardware ignores): aiter's binaries set
them, LLVM's assembler emits 0 and its disassembler does not print them. Anything else is
unexplained, and a pair with an unexplained byte or a failed check is not equivalent.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from f4pipe.codeobj.co2asm import Instruction, disassemble_text
from f4pipe.codeobj.codeobject import CodeObject, Section, Segment
from f4pipe.codeobj.descriptor import fields_at
from f4pipe.codeobj.toolchain import Toolchain

# Sections whose bytes may legitimately differ: the linker's identification string.
IGNORED_SECTIONS = frozenset({".comment"})
# Non-allocated sections follow .comment in the file, so only allocated ones keep their offsets.
_SHF_WRITE, _SHF_ALLOC = 0x1, 0x2
RELRO_PADDING = ".relro_padding"
EXPLAINED_RELRO_PADDING = (
    "rebuilt adds .relro_padding (lld >= 18): a NOBITS section over the rest of the RELRO page "
    "that the original's PT_GNU_RELRO already reserves; no file byte or address differs"
)

MFMA_SCALE_PREFIX = 0xD3AC  # first dword, bits 31:16, of v_mfma_scale_* (VOP3P-MAI "load scale")
MFMA_SCALE_DONT_CARE = 0x6000  # bits 13 (op_sel[2]) and 14 (op_sel_hi[2])
EXPLAINED_MFMA_SCALE = "v_mfma_scale op_sel/op_sel_hi of src2 (bits 13-14): don't-care"


@dataclass
class ByteDiff:
    offset: int  # within .text
    original: int
    rebuilt: int
    insn_addr: int
    insn_text: str
    reason: str | None  # None = unexplained


@dataclass
class Equivalence:
    """The verdict on one original/rebuilt pair, with every check and every differing byte."""

    header_ok: bool = True
    descriptor_ok: bool = True
    text_disasm_ok: bool = True
    notes_ok: bool = True
    symbols_ok: bool = True
    sections_ok: bool = True
    byte_diffs: list[ByteDiff] = field(default_factory=list)
    num_instructions: int = 0
    problems: list[str] = field(default_factory=list)
    explained_layout: list[str] = field(default_factory=list)  # layout differences, explained

    @property
    def explained(self) -> int:
        return sum(1 for d in self.byte_diffs if d.reason is not None)

    @property
    def unexplained(self) -> int:
        return sum(1 for d in self.byte_diffs if d.reason is None)

    @property
    def equivalent(self) -> bool:
        checks = (
            self.header_ok,
            self.descriptor_ok,
            self.text_disasm_ok,
            self.notes_ok,
            self.symbols_ok,
            self.sections_ok,
        )
        return all(checks) and self.unexplained == 0

    def summary(self) -> str:
        """A readable account: each check, then the differing bytes grouped by reason."""
        lines = [
            f"verdict: {'EQUIVALENT' if self.equivalent else 'NOT EQUIVALENT'}",
            f"ELF + program headers: {_ok(self.header_ok)}",
            f"kernel descriptors:    {_ok(self.descriptor_ok)}",
            f".text as disassembly:  {_ok(self.text_disasm_ok)} "
            f"({self.num_instructions} instructions)",
            f"metadata notes:        {_ok(self.notes_ok)}",
            f"symbol tables:         {_ok(self.symbols_ok)}",
            f"sections (not .comment): {_ok(self.sections_ok)}",
            f".text bytes differing: {len(self.byte_diffs)} "
            f"(explained {self.explained}, unexplained {self.unexplained})",
        ]
        reasons: dict[str, int] = {}
        for d in self.byte_diffs:
            key = d.reason or "UNEXPLAINED"
            reasons[key] = reasons.get(key, 0) + 1
        for reason, count in sorted(reasons.items()):
            lines.append(f"  {count:6d} bytes: {reason}")
        unexplained = [d for d in self.byte_diffs if d.reason is None]
        for d in unexplained[:50]:
            lines.append(
                f"  UNEXPLAINED .text+0x{d.offset:x}: 0x{d.original:02x} -> 0x{d.rebuilt:02x} in "
                f"`{d.insn_text}` @0x{d.insn_addr:x}"
            )
        if len(unexplained) > 50:
            lines.append(f"  ... {len(unexplained) - 50} more unexplained bytes")
        lines.extend(f"explained: {e}" for e in self.explained_layout)
        lines.extend(f"problem: {p}" for p in self.problems)
        return "\n".join(lines) + "\n"


def _ok(flag: bool) -> str:
    return "identical" if flag else "DIFFERENT"


def compare(
    original: Path,
    rebuilt: Path,
    toolchain: Toolchain,
    original_insns: list[Instruction] | None = None,
) -> Equivalence:
    """Compare two code objects; `original_insns` reuses a disassembly already made."""
    a, b = CodeObject.read(original), CodeObject.read(rebuilt)
    eq = Equivalence()
    pad = relro_padding(a, b)
    if pad is not None:
        eq.explained_layout.append(EXPLAINED_RELRO_PADDING)
    _compare_header(a, b, pad, eq)
    _compare_segments(a, b, pad, eq)
    _compare_descriptors(a, b, eq)
    _compare_notes(a, b, eq)
    _compare_symbols(a, b, eq)
    _compare_sections(a, b, pad, eq)
    insns_a = original_insns if original_insns is not None else disassemble_text(a, toolchain)
    insns_b = disassemble_text(b, toolchain)
    eq.num_instructions = len(insns_a)
    _compare_disassembly(insns_a, insns_b, eq)
    _classify_text_bytes(a, b, insns_a, eq)
    return eq


def _compare_header(a: CodeObject, b: CodeObject, pad: Section | None, eq: Equivalence) -> None:
    """Every ELF header field. Two are compared through what they mean rather than as numbers:
    e_shstrndx by the name of the section it names, and e_shnum allowing the one explained
    .relro_padding section. e_shoff is not compared: the section header table follows the
    non-allocated sections (.comment names the linker), so its offset moves with them."""
    ha, hb = a.header_fields(), b.header_fields()
    for name in sorted(set(ha) | set(hb)):
        va, vb = ha.get(name), hb.get(name)
        if name == "e_shoff":
            continue
        if name == "e_shnum" and pad is not None and isinstance(va, int):
            va += 1
        if name == "e_shstrndx":
            va, vb = _section_name_at(a, va), _section_name_at(b, vb)
        if va != vb:
            eq.header_ok = False
            eq.problems.append(f"ELF header {name}: {va} vs {vb}")


def _section_name_at(co: CodeObject, index: object) -> str:
    secs = co.section_list
    return secs[index].name if isinstance(index, int) and 0 <= index < len(secs) else f"#{index}"


def _compare_segments(a: CodeObject, b: CodeObject, pad: Section | None, eq: Equivalence) -> None:
    """Program headers field by field, in order; each must also lie within its file."""
    sa, sb = a.segments, b.segments
    for co, segs in ((a, sa), (b, sb)):
        for k, seg in enumerate(segs):
            if seg.type != "PT_NULL" and seg.offset + seg.filesz > len(co.data):
                eq.header_ok = False
                eq.problems.append(
                    f"{co.path.name}: program header {k} ({seg.type}) spans file bytes "
                    f"{seg.offset}..{seg.offset + seg.filesz} of {len(co.data)}"
                )
    if len(sa) != len(sb):
        eq.header_ok = False
        eq.problems.append(f"program headers: {[s.type for s in sa]} vs {[s.type for s in sb]}")
        return
    for k, (x, y) in enumerate(zip(sa, sb, strict=True)):
        if pad is not None and _loads_padding(y, pad):
            y = dataclasses.replace(y, memsz=y.memsz - pad.size)
        if x != y:
            eq.header_ok = False
            eq.problems.append(f"program header {k}: {_segment_text(x)} vs {_segment_text(y)}")


def _loads_padding(seg: Segment, pad: Section) -> bool:
    return seg.type == "PT_LOAD" and seg.vaddr + seg.memsz == pad.addr + pad.size


def _segment_text(s: Segment) -> str:
    return (
        f"{s.type} off 0x{s.offset:x} vaddr 0x{s.vaddr:x} paddr 0x{s.paddr:x} "
        f"filesz 0x{s.filesz:x} memsz 0x{s.memsz:x} flags {s.flags} align 0x{s.align:x}"
    )


def relro_padding(a: CodeObject, b: CodeObject) -> Section | None:
    """The rebuilt object's `.relro_padding` section, if it is the one explained layout change.

    lld 18 and newer end the RELRO region with a `.relro_padding` SHT_NOBITS section that runs
    from the end of the last RELRO section (.dynamic) to the next page boundary, and extend the
    read-write PT_LOAD's p_memsz over it. Older lld (aiter's "AMD LLD 17") reserves the same
    range through PT_GNU_RELRO's p_memsz alone. The section has no file bytes; it is explained
    only if it is the sole extra section, is NOBITS with flags W+A, starts where the section
    before it ends, and ends exactly where both objects' PT_GNU_RELRO ends. The rest (e_shnum,
    the name in .shstrtab, the PT_LOAD's p_memsz) is then checked against exactly that.
    `-z norelro` would drop the padding but also PT_GNU_RELRO and shift every address, so
    rebuilding with another lld option cannot reproduce the old layout.
    """
    names_a = [s.name for s in a.section_list]
    names_b = [s.name for s in b.section_list]
    if RELRO_PADDING in names_a or names_b.count(RELRO_PADDING) != 1:
        return None
    k = names_b.index(RELRO_PADDING)
    if names_b[:k] + names_b[k + 1 :] != names_a or k == 0:
        return None
    pad, before = b.section_list[k], b.section_list[k - 1]
    if pad.type != "SHT_NOBITS" or pad.flags != _SHF_WRITE | _SHF_ALLOC:
        return None
    if pad.addr != before.addr + before.size:
        return None
    end = pad.addr + pad.size
    if any(_relro_end(co) != end for co in (a, b)):
        return None
    return pad


def _relro_end(co: CodeObject) -> int | None:
    relro = [s for s in co.segments if s.type == "PT_GNU_RELRO"]
    return relro[0].vaddr + relro[0].memsz if len(relro) == 1 else None


def _compare_descriptors(a: CodeObject, b: CodeObject, eq: Equivalence) -> None:
    ka = [k.name for k in a.kernel_symbols()]
    kb = [k.name for k in b.kernel_symbols()]
    if ka != kb:
        eq.descriptor_ok = False
        eq.problems.append(f"kernels differ: {ka} vs {kb}")
        return
    for name in ka:
        da, db = a.kernel_descriptor(name), b.kernel_descriptor(name)
        if da != db:
            eq.descriptor_ok = False
            diff = [i for i in range(len(da)) if da[i] != db[i]]
            eq.problems.append(
                f"descriptor of {name} differs at bytes {diff} ({', '.join(fields_at(diff))})"
            )


def _compare_notes(a: CodeObject, b: CodeObject, eq: Equivalence) -> None:
    if a.notes == b.notes:
        return
    eq.notes_ok = False
    ma, mb = a.metadata(), b.metadata()
    if ma == mb:
        eq.problems.append("metadata notes encode the same values in different bytes")
    else:
        eq.problems.append("metadata notes differ in content")


def _symbol_key(co: CodeObject) -> Counter[tuple[object, ...]]:
    """Symbols as a multiset: a symbol defined twice is not the same as one defined once."""
    return Counter(
        (s.name, s.value, s.size, s.type, s.bind, s.visibility, s.section) for s in co.symbols
    )


def _compare_symbols(a: CodeObject, b: CodeObject, eq: Equivalence) -> None:
    sa, sb = _symbol_key(a), _symbol_key(b)
    if sa != sb:
        eq.symbols_ok = False
        only_a = sorted((sa - sb).elements(), key=str)[:5]
        only_b = sorted((sb - sa).elements(), key=str)[:5]
        eq.problems.append(f"symbols only in original: {only_a}; only in rebuilt: {only_b}")


def _compare_sections(a: CodeObject, b: CodeObject, pad: Section | None, eq: Equivalence) -> None:
    """Section headers pairwise in file order (type, address, size, flags, alignment, link by
    name, info, entry size), file offsets of allocated sections, and the bytes of all but
    .comment (the linker's name) and .text (compared instruction by instruction)."""
    la = a.section_list
    lb = [s for s in b.section_list if pad is None or s is not pad]
    if [s.name for s in la] != [s.name for s in lb]:
        eq.sections_ok = False
        eq.problems.append(_section_list_problem(la, b.section_list))
        return
    for sa, sb in zip(la, lb, strict=True):
        if sa.name in IGNORED_SECTIONS:
            continue
        layout_a, layout_b = _layout(sa), _layout(sb)
        if pad is not None and sa.name == ".shstrtab":  # its size is checked by _same_bytes
            layout_a, layout_b = layout_a[:2] + layout_a[3:], layout_b[:2] + layout_b[3:]
        if layout_a != layout_b:
            eq.sections_ok = False
            eq.problems.append(f"section {sa.name} {_LAYOUT_FIELDS}: {layout_a} vs {layout_b}")
            continue
        if sa.flags & _SHF_ALLOC and sa.offset != sb.offset:
            eq.sections_ok = False
            eq.problems.append(f"section {sa.name} file offset: 0x{sa.offset:x} vs 0x{sb.offset:x}")
        if sa.name != ".text" and not _same_bytes(a, sa, b, sb, pad):
            eq.sections_ok = False
            eq.problems.append(f"section {sa.name} bytes differ")


def _section_list_problem(la: list[Section], lb: list[Section]) -> str:
    """Name the difference; DWARF sections only in the original get their own sentence."""
    names_a, names_b = [s.name for s in la], [s.name for s in lb]
    only_a = [n for n in names_a if n not in names_b]
    only_b = [n for n in names_b if n not in names_a]
    if only_a and not only_b and all(n.startswith(".debug_") for n in only_a):
        return (
            f"the original carries DWARF debug sections {only_a}, which co2asm does not "
            "reproduce (llvm-objdump prints no source-level debug info to reassemble)"
        )
    return (
        f"section lists differ: only in original {only_a}, only in rebuilt {only_b}: "
        f"{names_a} vs {names_b}"
    )


_LAYOUT_FIELDS = "(type, addr, size, flags, align, link, info, entsize)"


def _layout(s: Section) -> tuple[object, ...]:
    return (s.type, s.addr, s.size, s.flags, s.align, s.link, s.info, s.entsize)


def _same_bytes(
    a: CodeObject, sa: Section, b: CodeObject, sb: Section, pad: Section | None
) -> bool:
    ba, bb = a.bytes_of(sa), b.bytes_of(sb)
    if ba == bb:
        return True
    if pad is None or sa.type != "SHT_STRTAB" or sa.name != ".shstrtab":
        return False
    # With the explained padding, .shstrtab holds the same names plus ".relro_padding".
    names_a, names_b = Counter(ba.split(b"\0")), Counter(bb.split(b"\0"))
    names_b[RELRO_PADDING.encode()] -= 1
    return +names_a == +names_b and len(bb) - len(ba) == len(RELRO_PADDING) + 1


def _compare_disassembly(ia: list[Instruction], ib: list[Instruction], eq: Equivalence) -> None:
    ta = [(i.addr, i.text) for i in ia]
    tb = [(i.addr, i.text) for i in ib]
    if ta == tb:
        return
    eq.text_disasm_ok = False
    first = next(
        (k for k, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), min(len(ta), len(tb))
    )
    shown_a = ta[first] if first < len(ta) else "<end>"
    shown_b = tb[first] if first < len(tb) else "<end>"
    eq.problems.append(
        f".text disassembly differs from instruction {first}: {shown_a} vs {shown_b} "
        f"({len(ta)} vs {len(tb)} instructions)"
    )


def _classify_text_bytes(
    a: CodeObject, b: CodeObject, insns: list[Instruction], eq: Equivalence
) -> None:
    ta, tb = a.section_bytes(".text"), b.section_bytes(".text")
    base = a.sections[".text"].addr
    if len(ta) != len(tb):
        eq.problems.append(f".text sizes differ: {len(ta)} vs {len(tb)} bytes")
        eq.text_disasm_ok = False
    starts = [i.addr - base for i in insns]
    k = 0
    for off in range(min(len(ta), len(tb))):
        if ta[off] == tb[off]:
            continue
        while k + 1 < len(starts) and starts[k + 1] <= off:
            k += 1
        insn = insns[k] if insns else Instruction(base, "<none>", ())
        eq.byte_diffs.append(
            ByteDiff(
                offset=off,
                original=ta[off],
                rebuilt=tb[off],
                insn_addr=insn.addr,
                insn_text=insn.text,
                reason=_explain(ta, tb, insn, base),
            )
        )


def _explain(ta: bytes, tb: bytes, insn: Instruction, base: int) -> str | None:
    """Why a byte of `insn` differs, or None if no known don't-care covers the difference."""
    start = insn.addr - base
    if not insn.text.startswith("v_mfma_scale_") or len(insn.words) < 2:
        return None
    wa = int.from_bytes(ta[start : start + 4], "little")
    wb = int.from_bytes(tb[start : start + 4], "little")
    if wa >> 16 != MFMA_SCALE_PREFIX or wb >> 16 != MFMA_SCALE_PREFIX:
        return None
    if (wa ^ wb) & ~MFMA_SCALE_DONT_CARE:
        return None
    # The rest of the instruction must match byte for byte.
    if ta[start + 4 : start + insn.size] != tb[start + 4 : start + insn.size]:
        return None
    return EXPLAINED_MFMA_SCALE
