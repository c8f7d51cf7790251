"""Where an instruction is, in the engineer's terms: `FILE.s:LINE (pc 0x3364)` when the kernel
came from a `.s`, `pc 0x3364 (label_01D8+0x4)` when it came from a code object.

The static checks, the emulator and the repairs all name instructions by pc, but a co2asm `.s`
has no addresses: every command that points into a kernel renders its pcs through one Locator
(`Locator.locate` rewrites each `pc 0x...` of a finding's message), so `try`, `hazards`,
`waits`, `asmdiff` and the reproducers name the same line for the same instruction.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from f4pipe.codeobj.assemble import MAX_ASM_BYTES
from f4pipe.codeobj.program import Program
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import read_input_text

#: A pc as the analyses write it, with the `(label+0x...)` a Locator may have added already.
_PC = re.compile(r"\bpc (0x[0-9a-fA-F]+)\b(?: \([\w.$]+(?:\+0x[0-9a-f]+)?\))?")


def pc_lines(
    asm: list[str], symbol: str, code: Sequence[tuple[int, str]], *, strict: bool = True
) -> dict[int, int]:
    """pc -> index of its line in `asm` (co2asm's layout: the text after the kernel's label,
    one instruction or data word per line, in pc order, up to the first blank line), for the
    kernel's instructions `code` ((pc, mnemonic) in pc order), each line's mnemonic checked
    against its instruction's. A line that does not match raises an InputError, or with
    `strict=False` ends the map there (no guessing)."""
    label = f"{symbol}:"
    start = next((i for i, line in enumerate(asm) if line.strip() == label), None)
    if start is None:
        if not strict:
            return {}
        raise InputError(f"no label {label} in the assembly")
    out: dict[int, int] = {}
    todo = iter(code)
    for i in range(start + 1, len(asm)):
        text = asm[i].split("//", 1)[0].strip()
        if not asm[i].strip():
            break
        if not text or text.endswith(":"):
            continue
        pc, mnemonic = next(todo, (None, ""))
        if pc is None:
            break
        word = text.split()[0]
        if not word.startswith(".") and word != mnemonic:
            if not strict:
                return out
            raise InputError(
                f"line {i + 1} `{text}` is not the instruction at pc {pc:#x} "
                f"({mnemonic}): the assembly does not match its code object"
            )
        out[pc] = i
    return out


def program_code(program: Program) -> list[tuple[int, str]]:
    """(pc, mnemonic) of the kernel's instructions from its entry on, for pc_lines."""
    return [(i.pc, i.text_name) for i in program.instructions() if i.pc >= program.entry]


@dataclass(frozen=True)
class Locator:
    """Renders a pc of one kernel as the place the user can open: `name:LINE (pc ...)` for a
    pc the `.s` has a line for, else the pc and the nearest label at or before it."""

    name: str  # the file as the user named it
    lines: Mapping[int, int] = field(default_factory=dict)  # pc -> 1-based line of `name`
    labels: tuple[tuple[int, str], ...] = ()  # (address, name), sorted by address

    def where(self, pc: int) -> str:
        line = self.lines.get(pc)
        if line is not None:
            return f"{self.name}:{line} (pc {pc:#x})"
        label = self.label_of(pc)
        return f"pc {pc:#x} ({label})" if label else f"pc {pc:#x}"

    def label_of(self, pc: int) -> str:
        """`label+0xOFFSET` of the nearest label at or before `pc` ('' if none)."""
        i = bisect.bisect_right(self.labels, (pc, "\uffff")) - 1
        if i < 0:
            return ""
        addr, name = self.labels[i]
        return name if addr == pc else f"{name}+{pc - addr:#x}"

    def locate(self, message: str) -> str:
        """`message` with every `pc 0x...` it names rendered by `where`."""
        return _PC.sub(lambda m: self.where(int(m.group(1), 16)), message)


def locator(program: Program, given: str | Path) -> Locator:
    """The Locator of `program`, which was read from `given` (a `.s` assembled, or a code
    object): a `.s` whose lines match the code gives line numbers; any input gives labels."""
    given = Path(given)
    labels = tuple(sorted(program.labels.items()))
    if given.suffix != ".s" or not given.is_file():
        return Locator(str(given), {}, labels)
    asm = read_input_text(given, "assembly file", MAX_ASM_BYTES).splitlines()
    return source_locator(given, asm, program.symbol, program_code(program), labels)


def source_locator(
    given: Path,
    asm: list[str],
    symbol: str,
    code: Sequence[tuple[int, str]],
    labels: tuple[tuple[int, str], ...],
) -> Locator:
    """The Locator of a kernel read from the `.s` `given`, whose lines are `asm`."""
    lines = {pc: i + 1 for pc, i in pc_lines(asm, symbol, code, strict=False).items()}
    return Locator(str(given), lines, labels)


def launch_locate(co_path: Path, symbol: str, *reports: Any) -> Callable[[str], str]:
    """How a launch's reports (races, hazards: anything with a `count`) name places: each pc
    with its nearest label in the code object, so a verify or safety detail and its
    reproducer can be found in co2asm's .s; as is when they found nothing."""
    if not any(r is not None and r.count for r in reports):
        return str
    return locator(Program.load(co_path, symbol), co_path).locate
