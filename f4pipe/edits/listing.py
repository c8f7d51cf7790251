"""One kernel's instructions as LLVM disassembles them, grouped by label (labels are ELF
symbols, which survive reassembly; addresses do not survive an inserted instruction), with branch
targets written as labels so that moving code does not change a branch's text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from f4pipe.codeobj.assemble import MAX_ASM_BYTES
from f4pipe.codeobj.co2asm import Instruction, branch_target, disassemble_text
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.codeobj.sourcemap import Locator, source_locator
from f4pipe.codeobj.toolchain import Toolchain
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import read_input_text

_LABEL_SUFFIX = re.compile(r"^(?P<label>.+)\+(?P<index>\d+)$")

# ---------------------------------------------------------------------------------------------
# Listings: one kernel's instructions, grouped by label


@dataclass(frozen=True)
class Line:
    """One instruction as the diff and the checks see it."""

    block: str  # the label that starts its block (the kernel symbol for the first one)
    index: int  # position within the block
    addr: int
    text: str  # LLVM's text; branch targets as labels

    @property
    def where(self) -> str:
        return f"{self.block}+{self.index}"

    @property
    def mnemonic(self) -> str:
        return self.text.split(None, 1)[0] if self.text else ""


@dataclass(frozen=True)
class KernelListing:
    """A kernel read from a code object: instructions, descriptor, metadata."""

    path: Path
    symbol: str
    arch: str
    lines: tuple[Line, ...]
    descriptor: bytes
    metadata: dict[str, Any] = field(repr=False)  # the whole metadata note
    source_path: Path | None = None  # the .s the object was assembled from, when known

    def blocks(self) -> list[tuple[str, list[Line]]]:
        out: list[tuple[str, list[Line]]] = []
        for line in self.lines:
            if not out or out[-1][0] != line.block or line.index == 0:
                out.append((line.block, []))
            out[-1][1].append(line)
        return out

    def kernel_metadata(self) -> dict[str, Any]:
        """This kernel's entry of `amdhsa.kernels` ({} if the note has none)."""
        for k in self.metadata.get("amdhsa.kernels", []):
            if k.get(".name") == self.symbol or k.get(".symbol") == f"{self.symbol}.kd":
                return dict(k)
        return {}

    def source_of(self, line: Line) -> str:
        """Where an instruction is, as every finding says it (f4pipe.codeobj.sourcemap):
        `file.s:123 (pc 0x...)` when the .s line is known, else its pc and nearest label."""
        return self.locator.where(line.addr)

    @cached_property
    def locator(self) -> Locator:
        labels = tuple((line.addr, line.block) for line in self.lines if line.index == 0)
        if self.source_path is None:
            return Locator(str(self.path), {}, labels)
        asm = read_asm(self.source_path).splitlines()
        code = [(line.addr, line.mnemonic) for line in self.lines]
        return source_locator(self.source_path, asm, self.symbol, code, labels)


def pick_kernel(co: CodeObject, symbol: str | None) -> str:
    """The kernel to read: `symbol`, or the code object's only kernel."""
    names = [k.name for k in co.kernel_symbols()]
    if symbol is not None:
        if symbol not in names:
            raise InputError(f"{co.path}: has no kernel {symbol}; it has {', '.join(names)}")
        return symbol
    if len(names) != 1:
        raise InputError(
            f"{co.path}: holds {len(names)} kernels ({', '.join(names)}); name one with --kernel"
        )
    return names[0]


def read_listing(
    co_path: str | Path,
    toolchain: Toolchain,
    symbol: str | None = None,
    asm_path: str | Path | None = None,
) -> KernelListing:
    """Disassemble one kernel of a code object into label blocks.

    `asm_path` (the .s the object was assembled from) only adds .s line numbers to messages.
    """
    co = CodeObject.read(co_path)
    symbol = pick_kernel(co, symbol)
    insns = disassemble_text(co, toolchain)
    text = co.sections[".text"]
    starts = sorted(k.value for k in co.kernel_symbols())
    begin = next(s.value for s in co.kernel_symbols() if s.name == symbol)
    end = next((s for s in starts if s > begin), text.addr + text.size)
    mine = [i for i in insns if begin <= i.addr < end]
    labels: dict[int, str] = {}
    for sym in sorted(co.symbols, key=lambda s: s.name):
        if sym.section == ".text" and begin < sym.value < end and sym.name != "_DYNAMIC":
            labels.setdefault(sym.value, sym.name)
    labels[begin] = symbol
    place: dict[int, tuple[str, int]] = {}
    block, index = symbol, 0
    for insn in mine:
        if insn.addr in labels:
            block, index = labels[insn.addr], 0
        place[insn.addr] = (block, index)
        index += 1
    lines = tuple(
        Line(
            block=place[i.addr][0],
            index=place[i.addr][1],
            addr=i.addr,
            text=_text(i, labels, place),
        )
        for i in mine
    )
    return KernelListing(
        path=Path(co_path),
        symbol=symbol,
        arch=co.arch,
        lines=lines,
        descriptor=co.kernel_descriptor(symbol),
        metadata=co.metadata() or {},
        source_path=Path(asm_path) if asm_path else None,
    )


def _text(insn: Instruction, labels: dict[int, str], place: dict[int, tuple[str, int]]) -> str:
    """The instruction's text with branch targets named, and undecodable words as .long."""
    if insn.text.startswith("<unknown>") or insn.text.startswith(".long"):
        return "; ".join(f".long 0x{w:08x}" for w in insn.words)
    target = branch_target(insn)
    if target is None:
        return insn.text
    if target in labels:
        name = labels[target]
    elif target in place:
        name = "{}+{}".format(*place[target])
    else:
        name = f"<0x{target:x}>"  # outside this kernel
    return f"{insn.text.split(None, 1)[0]} {name}"


def read_asm(asm_path: Path) -> str:
    if not asm_path.exists() and not asm_path.is_symlink():
        raise InputError(f"{asm_path}: no such assembly file")
    return read_input_text(asm_path, "assembly file", MAX_ASM_BYTES)
