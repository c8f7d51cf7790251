"""The round-trip stage: code object -> .s -> rebuilt code object -> equivalence verdict.

Per kernel it writes `<out>/<stem>.s`, `<out>/<stem>.co` (rebuilt) and `<out>/<stem>.diff.txt`
(the readable verdict), and returns one roundtrip.parquet row. For gfx950 objects the row also
carries the static timing check of the rebuilt object (f4pipe.emu.hazards: s_waitcnt counters
and wait states over every path), so an edit's round trip shows a hazard before anything runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from f4pipe.assemble import assemble
from f4pipe.co2asm import check_reassembles, co2asm_with_listing
from f4pipe.equivalence import Equivalence, compare
from f4pipe.errors import ToolchainError
from f4pipe.fsio import sha256_file, write_text
from f4pipe.schemas import ArtifactKeys
from f4pipe.toolchain import Toolchain


@dataclass
class RoundTrip:
    original: Path
    asm: Path
    rebuilt: Path
    diff: Path
    equivalence: Equivalence
    co2asm_seconds: float
    assemble_seconds: float
    check_seconds: float
    hazards: int | None = None  # static findings in the rebuilt object; None: not checked
    hazard_detail: str = ""

    def row(self, keys: ArtifactKeys) -> dict[str, Any]:
        eq = self.equivalence
        return {
            **keys.as_row(),
            "kernel": self.original.stem,
            "co_name": self.original.name,
            "equivalent": eq.equivalent,
            "header_ok": eq.header_ok,
            "descriptor_ok": eq.descriptor_ok,
            "text_disasm_ok": eq.text_disasm_ok,
            "notes_ok": eq.notes_ok,
            "symbols_ok": eq.symbols_ok,
            "sections_ok": eq.sections_ok,
            "text_bytes_differing": len(eq.byte_diffs),
            "text_bytes_explained": eq.explained,
            "text_bytes_unexplained": eq.unexplained,
            "num_instructions": eq.num_instructions,
            "original_size": self.original.stat().st_size,
            "rebuilt_size": self.rebuilt.stat().st_size,
            "original_sha256": sha256_file(self.original),
            "rebuilt_sha256": sha256_file(self.rebuilt),
            "co2asm_seconds": self.co2asm_seconds,
            "assemble_seconds": self.assemble_seconds,
            "check_seconds": self.check_seconds,
            "detail": "; ".join([*eq.problems, *(f"explained: {e}" for e in eq.explained_layout)]),
            "hazards": self.hazards,
            "hazard_detail": self.hazard_detail,
        }


def static_hazards(co_path: Path) -> tuple[int | None, str]:
    """(findings, first finding or why not checked) of every kernel in a code object."""
    from f4pipe.codeobject import CodeObject
    from f4pipe.emu.hazards import analyse
    from f4pipe.emu.program import Program
    from f4pipe.errors import F4PipeError

    try:
        co = CodeObject.read(co_path)
        if co.arch != "gfx950":
            return None, f"not checked: the hazard rules are gfx950's, this is {co.arch}"
        reports = [analyse(Program.load(co_path, k.name)) for k in co.kernel_symbols()]
    except F4PipeError as exc:
        return None, f"not checked: {exc}"
    findings = [f.hazard.message for r in reports for f in (*r.wait_states, *r.counters)]
    return len(findings), findings[0] if findings else ""


def roundtrip(co_path: str | Path, out_dir: str | Path, toolchain: Toolchain) -> RoundTrip:
    """Disassemble, reassemble and compare one code object."""
    co_path, out_dir = Path(co_path), Path(out_dir)
    stem = co_path.stem
    asm_path = out_dir / f"{stem}.s"
    rebuilt = out_dir / f"{stem}.co"
    diff_path = out_dir / f"{stem}.diff.txt"

    t0 = time.perf_counter()
    asm, original_insns = co2asm_with_listing(co_path, toolchain)
    write_text(asm_path, asm)
    try:
        t1 = time.perf_counter()
        try:
            assemble(asm_path, rebuilt, toolchain)
        except ToolchainError:
            check_reassembles(asm, co_path, toolchain)  # names the first line LLVM rejects
            raise
        t2 = time.perf_counter()
        eq = compare(co_path, rebuilt, toolchain, original_insns=original_insns)
        t3 = time.perf_counter()
    except BaseException:
        # a failed round trip leaves no half of its outputs behind
        for path in (asm_path, rebuilt, diff_path):
            path.unlink(missing_ok=True)
        raise
    hazards, hazard_detail = static_hazards(rebuilt)
    header = f"original: {co_path}\nrebuilt:  {rebuilt}\ntoolchain: {toolchain.toolchain_id}\n"
    write_text(diff_path, header + eq.summary())
    return RoundTrip(
        original=co_path,
        asm=asm_path,
        rebuilt=rebuilt,
        diff=diff_path,
        equivalence=eq,
        co2asm_seconds=t1 - t0,
        assemble_seconds=t2 - t1,
        check_seconds=t3 - t2,
        hazards=hazards,
        hazard_detail=hazard_detail,
    )
