"""Prove a rebuilt code object equivalent to its original, and explain every byte that differs.

Checks, per pair: ELF header (machine, flags, OS/ABI, ABI version, type); kernel descriptor
bytes; .text as disassembly (address and text of every instruction); metadata notes; symbol
tables; section layout and the bytes of every section but .comment (which names the linker).
Then .text byte by byte: each differing byte is attributed to its instruction and classified.
The one known harmless difference: bits 13-14 of the first dword of v_mfma_scale_* (op_sel and
op_sel_hi of operand index 2, the accumulator, which the hardware ignores): aiter's binaries set
them, LLVM's assembler emits 0 and its disassembler does not print them. Anything else is
unexplained, and a pair with an unexplained byte or a failed check is not equivalent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from f4pipe.co2asm import Instruction, disassemble_text
from f4pipe.codeobject import CodeObject
from f4pipe.toolchain import Toolchain

# Sections whose bytes may legitimately differ: the linker's identification string.
IGNORED_SECTIONS = frozenset({".comment"})
# Sections whose offsets depend on .comment's size (they follow it in the file).
_NON_ALLOC_FLAG = 0x2  # SHF_ALLOC

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
            f"ELF header:            {_ok(self.header_ok)}",
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
    _compare_header(a, b, eq)
    _compare_descriptors(a, b, eq)
    _compare_notes(a, b, eq)
    _compare_symbols(a, b, eq)
    _compare_sections(a, b, eq)
    insns_a = original_insns if original_insns is not None else disassemble_text(a, toolchain)
    insns_b = disassemble_text(b, toolchain)
    eq.num_instructions = len(insns_a)
    _compare_disassembly(insns_a, insns_b, eq)
    _classify_text_bytes(a, b, insns_a, eq)
    return eq


def _compare_header(a: CodeObject, b: CodeObject, eq: Equivalence) -> None:
    ha, hb = a._elf.header, b._elf.header
    fields = {
        "e_machine": (ha["e_machine"], hb["e_machine"]),
        "e_type": (ha["e_type"], hb["e_type"]),
        "e_flags": (a.e_flags, b.e_flags),
        "OS/ABI": (a.os_abi, b.os_abi),
        "ABI version": (a.abi_version, b.abi_version),
    }
    for name, (va, vb) in fields.items():
        if va != vb:
            eq.header_ok = False
            eq.problems.append(f"ELF header {name}: {va} vs {vb}")


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
            eq.problems.append(f"descriptor of {name} differs at bytes {diff}")


def _compare_notes(a: CodeObject, b: CodeObject, eq: Equivalence) -> None:
    if a.notes == b.notes:
        return
    eq.notes_ok = False
    ma, mb = a.metadata(), b.metadata()
    if ma == mb:
        eq.problems.append("metadata notes encode the same values in different bytes")
    else:
        eq.problems.append("metadata notes differ in content")


def _symbol_key(co: CodeObject) -> set[tuple[object, ...]]:
    return {(s.name, s.value, s.size, s.type, s.bind, s.visibility, s.section) for s in co.symbols}


def _compare_symbols(a: CodeObject, b: CodeObject, eq: Equivalence) -> None:
    sa, sb = _symbol_key(a), _symbol_key(b)
    if sa != sb:
        eq.symbols_ok = False
        only_a, only_b = sorted(sa - sb, key=str)[:5], sorted(sb - sa, key=str)[:5]
        eq.problems.append(f"symbols only in original: {only_a}; only in rebuilt: {only_b}")


def _compare_sections(a: CodeObject, b: CodeObject, eq: Equivalence) -> None:
    na, nb = list(a.sections), list(b.sections)
    if na != nb:
        eq.sections_ok = False
        eq.problems.append(f"section lists differ: {na} vs {nb}")
        return
    for name in na:
        if name in IGNORED_SECTIONS:
            continue
        sa, sb = a.sections[name], b.sections[name]
        layout_a = (sa.type, sa.addr, sa.size, sa.flags, sa.align)
        layout_b = (sb.type, sb.addr, sb.size, sb.flags, sb.align)
        if layout_a != layout_b:
            eq.sections_ok = False
            eq.problems.append(
                f"section {name} layout (type, addr, size, flags, align): {layout_a} vs {layout_b}"
            )
            continue
        if sa.flags & _NON_ALLOC_FLAG and sa.offset != sb.offset:
            eq.sections_ok = False
            eq.problems.append(f"section {name} file offset: 0x{sa.offset:x} vs 0x{sb.offset:x}")
        if name != ".text" and a.section_bytes(name) != b.section_bytes(name):
            eq.sections_ok = False
            eq.problems.append(f"section {name} bytes differ")


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
