"""Hand-edited kernels: an instruction-level diff against the original, and static checks.

Both sides are read from assembled code objects (LLVM's disassembly of what was really
encoded), so spelling differences in the hand-written .s never show up as changes. The diff
aligns per-label blocks (labels are ELF symbols, which survive reassembly; addresses do not
survive an inserted instruction), then diffs each block's instruction texts; branch targets
are written as labels (or `label+index` when the target has no symbol), so moving code does
not change the text of a branch.

The static checks compare what the instructions touch with what the kernel descriptor grants,
before anything runs: registers (AMDGPUUsage, "compute_pgm_rsrc1" GRANULATED_WORKITEM_VGPR_COUNT
and GRANULATED_WAVEFRONT_SGPR_COUNT, "compute_pgm_rsrc3 for GFX90A, GFX942" ACCUM_OFFSET), LDS
immediates (`ds_*` offset:) against the group segment size, and kernarg loads (`s_load_*` from
the kernarg segment pointer with an immediate offset) against the metadata's
kernarg_segment_size. Register numbers hidden in M0-relative indexing (s_set_gpr_idx_on) and
addresses computed at run time are beyond a static check; the emulator sees those.

The parts: `listing` (one kernel's instructions by label), `checks` (what instructions touch
against what the descriptor grants), `diff` (two listings compared) and `spec` (the config's
`edits:`); this module prepares an edit from them (assemble, find its original, diff, check)
and builds its pipeline variant.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from f4pipe.aiter.manifest import MANIFEST_NAME, KernelEntry, manifest_text, read_manifest
from f4pipe.codeobj.assemble import assemble
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.codeobj.toolchain import Toolchain
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import atomic_dir, write_json, write_text
from f4pipe.edits.checks import Finding, static_checks
from f4pipe.edits.diff import EditDiff, diff_listings
from f4pipe.edits.listing import read_listing
from f4pipe.edits.resources import FitReport, fit_and_assemble
from f4pipe.edits.verdict import StaticVerdict

# ---------------------------------------------------------------------------------------------
# Preparing an edit: assemble, find its original, diff, check


@dataclass
class PreparedEdit:
    """An assembled edit with its original, diff and static findings (nothing run yet)."""

    asm_path: Path
    co_path: Path  # the assembled edit
    entry: KernelEntry  # the original's manifest row
    original_co: Path
    diff: EditDiff
    findings: list[Finding]
    fit: FitReport | None = None  # what --fit-resources changed (None: assembled as written)


def prepare_edit(
    asm_path: str | Path,
    co_dir: str | Path,
    out_co: str | Path,
    toolchain: Toolchain,
    kernel: str | None = None,
    fit_resources: bool = False,
) -> PreparedEdit:
    """Assemble `asm_path` into `out_co` (with `fit_resources`, its descriptor and metadata
    sized to its code: f4pipe.edits.resources), match it to its original in `co_dir`'s manifest (by
    `kernel`, else by the kernel symbol the edit defines), diff and check it."""
    asm_path, out_co = Path(asm_path), Path(out_co)
    fit = fit_and_assemble(asm_path, out_co, toolchain) if fit_resources else None
    if fit is None:
        assemble(asm_path, out_co, toolchain)
    manifest = read_manifest(co_dir)
    defined = [k.name for k in CodeObject.read(out_co).kernel_symbols()]
    if kernel is not None:
        entry = manifest.get(kernel)
        if entry.symbol not in defined:
            raise InputError(
                f"{asm_path}: defines {', '.join(defined) or 'no kernel'}, not {entry.symbol} "
                f"(the kernel {kernel!r} names); pass the matching --kernel"
            )
    else:
        if len(defined) != 1:
            raise InputError(
                f"{asm_path}: defines {len(defined)} kernels ({', '.join(defined)}); "
                "name the one to try with --kernel"
            )
        entry = manifest.get(defined[0])
    original_co = manifest.co_path(entry)
    original = read_listing(original_co, toolchain, entry.symbol)
    edited = read_listing(out_co, toolchain, entry.symbol, asm_path=asm_path)
    return PreparedEdit(
        asm_path=asm_path,
        co_path=out_co,
        entry=entry,
        original_co=original_co,
        diff=diff_listings(original, edited),
        findings=static_checks(edited),
        fit=fit,
    )


def report_text(prepared: PreparedEdit, verdict: StaticVerdict) -> str:
    """The diff file: the full diff, then the static verdict with every finding (the lines
    the console shows first)."""
    return prepared.diff.render() + verdict.text()


def report_json(prepared: PreparedEdit, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "kernel": prepared.entry.name,
        "asm": str(prepared.asm_path),
        "diff": prepared.diff.as_json(),
        "static_findings": [f.__dict__ for f in prepared.findings],
        "static_ok": not prepared.findings,
    }


def build_edit_variant(
    asm_path: str | Path,
    co_dir: str | Path,
    kernel: str,
    out_dir: str | Path,
    toolchain: Toolchain,
    diff_path: str | Path,
    json_path: str | Path | None = None,
    name: str | None = None,
) -> PreparedEdit:
    """The pipeline's edit variant: a directory holding the assembled edit under the
    original's .co name plus a one-row manifest, so every GEMM stage treats it like aiter's
    directory. The diff file (and JSON) are always written; the directory only when the static
    checks pass (a kernel that oversteps its descriptor is not launched anywhere)."""
    with atomic_dir(out_dir) as tmp:
        manifest = read_manifest(co_dir, check_files=False)
        entry = manifest.get(kernel)
        prepared = prepare_edit(asm_path, co_dir, tmp / entry.co_name, toolchain, kernel)
        final_co = Path(out_dir) / entry.co_name  # where the report says the edit lives
        prepared.diff.edited = dataclasses.replace(prepared.diff.edited, path=final_co)
        verdict = StaticVerdict(
            tuple(prepared.findings),
            (),
            prepared.diff.edited.locator,
            timing_skipped="edit-variant leaves it to `f4pipe try`",
        )
        write_text(diff_path, report_text(prepared, verdict))
        if json_path is not None:
            write_json(json_path, report_json(prepared, name))
        if prepared.findings:
            raise StaticCheckError(
                f"{asm_path}: {len(prepared.findings)} static check finding(s), first: "
                f"{prepared.findings[0].render()} (all in {diff_path})"
            )
        (tmp / MANIFEST_NAME).write_text(manifest_text([prepared.entry]))
    prepared.co_path = final_co
    return prepared


class StaticCheckError(InputError):
    """An edit oversteps what its descriptor grants; it is not run."""
