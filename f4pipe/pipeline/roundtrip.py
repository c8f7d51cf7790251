"""The round-trip stage: code object -> .s -> rebuilt code object -> equivalence verdict.

Per kernel it writes `<out>/<stem>.s`, `<out>/<stem>.co` (rebuilt) and `<out>/<stem>.diff.txt`
(the readable verdict), and returns one roundtrip.parquet row. For gfx950 objects the row also
carries the static timing check of the rebuilt object (f4pipe.analysis.hazards: s_waitcnt counters
and wait states over every path), so an edit's round trip shows a hazard before anything runs.

A round trip is a function of the code object's bytes (and name, which the assembly's header
names), the toolchain and f4pipe, so with a result store (f4pipe.pipeline.resultstore) a round trip
done before is reused: its row, and its .s, rebuilt .co and verdict text put back in `<out>` (the
verdict's header names this run's paths). `roundtrip_dir` runs every kernel of a manifest, over
forked worker processes (f4pipe.pipeline.parallel): the pipeline's one job per variant."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from f4pipe.aiter.manifest import read_manifest
from f4pipe.arch.gfx950 import ARCH
from f4pipe.codeobj.assemble import assemble
from f4pipe.codeobj.co2asm import check_reassembles, co2asm_with_listing
from f4pipe.codeobj.equivalence import Equivalence, compare
from f4pipe.codeobj.toolchain import Toolchain
from f4pipe.core.cache import f4pipe_identity
from f4pipe.core.errors import ToolchainError
from f4pipe.core.fsio import sha256_file, write_bytes, write_text
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.pipeline.parallel import map_ordered
from f4pipe.pipeline.resultstore import (
    REUSE_KEY,
    REUSED_FROM,
    ResultStore,
    Row,
    StoredFiles,
    reuse_or_run,
)

#: The result store's stage name for round trips, and the files an entry keeps.
STORE_STAGE = "roundtrip"
STORED_ASM, STORED_REBUILT, STORED_SUMMARY = "asm.s", "rebuilt.co", "summary.txt"


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
            # a round trip that ran, with no store (roundtrip_row marks stored ones)
            REUSED_FROM: None,
            REUSE_KEY: None,
        }


def static_hazards(co_path: Path) -> tuple[int | None, str]:
    """(findings, first finding or why not checked) of every kernel in a code object."""
    from f4pipe.analysis.hazards import analyse
    from f4pipe.codeobj.codeobject import CodeObject
    from f4pipe.codeobj.program import Program
    from f4pipe.core.errors import F4PipeError

    try:
        co = CodeObject.read(co_path)
        if co.arch != ARCH:
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
    write_text(diff_path, diff_header(co_path, rebuilt, toolchain.toolchain_id) + eq.summary())
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


def diff_header(original: Path, rebuilt: Path, toolchain_id: str) -> str:
    """The lines of a verdict's text that name this run's files (the rest is the summary)."""
    return f"original: {original}\nrebuilt:  {rebuilt}\ntoolchain: {toolchain_id}\n"


def output_paths(co_path: Path, out_dir: Path) -> tuple[Path, Path, Path]:
    """(assembly, rebuilt object, verdict text) a round trip of `co_path` writes in `out_dir`."""
    stem = co_path.stem
    return out_dir / f"{stem}.s", out_dir / f"{stem}.co", out_dir / f"{stem}.diff.txt"


def roundtrip_row(
    co_path: str | Path,
    out_dir: str | Path,
    toolchain: Toolchain,
    keys: ArtifactKeys,
    store: ResultStore | None = None,
) -> Row:
    """The roundtrip row of one code object, its files written in `out_dir`: taken from
    `store` when it holds a round trip of the same bytes and name with the same toolchain and
    f4pipe, else run (and stored)."""
    co_path, out_dir = Path(co_path), Path(out_dir)
    asm, rebuilt, diff = output_paths(co_path, out_dir)
    header = diff_header(co_path, rebuilt, toolchain.toolchain_id)
    inputs: dict[str, str] = {}
    if store is not None:
        inputs = {
            "co_sha256": sha256_file(co_path),
            "co_name": co_path.name,
            "toolchain_id": toolchain.toolchain_id,
            "f4pipe": f4pipe_identity(),
        }

    def save() -> dict[str, bytes]:
        summary = diff.read_text().removeprefix(header)
        return {
            STORED_ASM: asm.read_bytes(),
            STORED_REBUILT: rebuilt.read_bytes(),
            STORED_SUMMARY: summary.encode(),
        }

    def restore(stored: Path) -> None:
        write_bytes(asm, (stored / STORED_ASM).read_bytes())
        write_bytes(rebuilt, (stored / STORED_REBUILT).read_bytes())
        write_text(diff, header + (stored / STORED_SUMMARY).read_text())

    (row,) = reuse_or_run(
        store,
        STORE_STAGE,
        inputs,
        {"aiter_id": keys.aiter_id},
        lambda: [roundtrip(co_path, out_dir, toolchain).row(keys)],
        files=StoredFiles(save=save, restore=restore),
    )
    return row


def roundtrip_dir(
    co_dir: str | Path,
    out_dir: str | Path,
    toolchain: Toolchain,
    keys: ArtifactKeys,
    store: ResultStore | None = None,
    workers: int = 1,
) -> list[Row]:
    """The roundtrip rows of every code object a manifest lists, in its order, the round trips
    spread over `workers` forked processes."""
    manifest = read_manifest(co_dir)
    if store is not None:
        f4pipe_identity()  # once, before the workers fork
    return map_ordered(
        lambda entry: roundtrip_row(manifest.co_path(entry), out_dir, toolchain, keys, store),
        list(manifest),
        workers=workers,
        label="roundtrip",
    )
