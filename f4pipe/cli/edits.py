"""Hand-edited kernels: `f4pipe try`, `f4pipe asmdiff` and `f4pipe edit-variant`.

`try` is the editing loop in one command (exit 0 pass, 1 fail, 2 error); `asmdiff` shows an
instruction-level diff of two kernels (exit 1 if the second fails the static checks);
`edit-variant` builds the pipeline's `edit-<name>` variant directory (exit 1 if the edit fails
the static checks: it is then not run anywhere).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
from pathlib import Path

from f4pipe.cli import EXIT_FAILED, EXIT_OK, command_help
from f4pipe.cli.args import (
    add_co_dir,
    add_device,
    add_fit_resources,
    add_json_flag,
    add_seed,
    add_toolchain_args,
    co_dir_from,
    parse_seed,
    toolchain_from_args,
)
from f4pipe.codeobj.assemble import assemble
from f4pipe.codeobj.toolchain import Toolchain
from f4pipe.core.fsio import write_text
from f4pipe.host.matrices import parse_case

#: Instruction changes shown on the terminal; the diff file has them all.
TERMINAL_CHANGES = 20
TERMINAL_FINDINGS = 10


# --- f4pipe try --------------------------------------------------------------------------------


def cmd_try(args: argparse.Namespace) -> int:
    from f4pipe.edits import report_text
    from f4pipe.edits.trykernel import try_edit

    asm = Path(args.edit)
    seed_a, seed_b = parse_seed(args.seed)
    cases = [parse_case(s) for s in args.shape] if args.shape else None
    result = try_edit(
        asm,
        co_dir_from(args),
        toolchain_from_args(args),
        kernel=args.kernel,
        device=args.device,
        cases=cases,
        out_co=args.co,
        baseline=not args.no_baseline,
        seed_a=seed_a,
        seed_b=seed_b,
        check_hazards=not args.no_hazard_check,
        fit_resources=args.fit_resources,
    )
    p = result.prepared
    verdict = result.static_verdict()
    diff_path = Path(args.diff) if args.diff else asm.with_suffix(".diff.txt")
    write_text(diff_path, report_text(p, verdict))
    print(f"edit:   {asm} -> {p.entry.name} (original {p.original_co})")
    if p.fit is not None:
        print(p.fit.render())
    print(p.diff.render(max_changes=TERMINAL_CHANGES), end="")
    print(f"diff file: {diff_path}")
    if args.co:
        print(f"kept:   {p.co_path} (the assembled edit)")
    print(verdict.text(TERMINAL_FINDINGS), end="")
    for run in result.runs:
        print(f"run:    {run.render(result.where)}")
    counts = result.counts_line()
    if counts:
        print(counts)
    speed = result.speed_line()
    if speed:
        print(f"speed:  {speed}")
    print(result.verdict_line())
    if not result.passed:
        print(f"next:   {next_step(result, args)}")
    return EXIT_OK if result.passed else EXIT_FAILED


def next_step(result, args: argparse.Namespace) -> str:
    """The command to run after a failing `try`: the repair for a timing failure, the flag
    for a descriptor the code outgrew, the diff for wrong values."""
    p = result.prepared
    edit = args.edit
    co_dir = f" --co-dir {shlex.quote(args.co_dir)}" if args.co_dir else ""
    if p.findings:
        if any(f.check in FITTABLE_CHECKS for f in p.findings) and not args.fit_resources:
            return f"f4pipe try {shlex.quote(edit)} --fit-resources{co_dir}"
        return f"fix the line named above, then: f4pipe try {shlex.quote(edit)}{co_dir}"
    if result.timing_failed:
        fixed = shlex.quote(str(Path(edit).with_suffix(".fixed.s")))
        return (
            f"f4pipe waits {shlex.quote(edit)} --apply -o {fixed}{co_dir} (inserts the waits "
            f"it lacks), then: f4pipe try {fixed}{co_dir}"
        )
    return (
        f"f4pipe asmdiff {shlex.quote(str(p.original_co))} {shlex.quote(edit)} (every "
        "instruction the edit changes; the first wrong element is above)"
    )


#: Descriptor findings --fit-resources resolves (the registers and LDS the code needs).
FITTABLE_CHECKS = frozenset({"vgpr", "agpr", "sgpr", "lds"})


# --- f4pipe asmdiff ----------------------------------------------------------------------------


def _as_object(path: Path, tmp: Path, toolchain: Toolchain, tag: str) -> tuple[Path, Path | None]:
    """A code object for `path` (.s files are assembled into `tmp`) and the .s if any."""
    if path.suffix == ".s":
        return assemble(path, tmp / f"{tag}-{path.stem}.co", toolchain), path
    return path, None


def cmd_asmdiff(args: argparse.Namespace) -> int:
    from f4pipe.edits.checks import static_checks
    from f4pipe.edits.diff import diff_listings
    from f4pipe.edits.listing import read_listing
    from f4pipe.edits.verdict import StaticVerdict, new_timing_findings, timing_findings

    tc = toolchain_from_args(args)
    with tempfile.TemporaryDirectory(prefix="f4pipe-asmdiff-") as tmp:
        a_co, _ = _as_object(Path(args.a), Path(tmp), tc, "a")
        b_co, b_asm = _as_object(Path(args.b), Path(tmp), tc, "b")
        a = dataclasses.replace(read_listing(a_co, tc, args.kernel), path=Path(args.a))
        b = dataclasses.replace(
            read_listing(b_co, tc, args.kernel or a.symbol, asm_path=b_asm), path=Path(args.b)
        )
        diff = diff_listings(a, b)
        findings = static_checks(b)
        timing = ()
        if not findings:
            timing = tuple(
                new_timing_findings(
                    timing_findings(b_co, b.symbol), timing_findings(a_co, a.symbol)
                )
            )
    verdict = StaticVerdict(tuple(findings), timing, b.locator)
    text = diff.render() + verdict.text()
    if args.output:
        write_text(args.output, text)
    if args.json:
        print(json.dumps(diff.as_json(), sort_keys=True, default=str))
    else:
        print(text, end="")
    return EXIT_FAILED if verdict.count else EXIT_OK


# --- f4pipe edit-variant -----------------------------------------------------------------------


def cmd_edit_variant(args: argparse.Namespace) -> int:
    from f4pipe.edits import StaticCheckError, build_edit_variant

    try:
        prepared = build_edit_variant(
            args.asm,
            args.co_dir,
            args.kernel,
            args.output,
            toolchain_from_args(args),
            diff_path=args.diff,
            json_path=args.json,
            name=args.name,
        )
    except StaticCheckError as exc:
        print(f"f4pipe edit-variant: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"edit {args.name or args.asm}: {prepared.diff.summary()}")
    print(f"variant {args.output}: {prepared.entry.co_name} + manifest; diff -> {args.diff}")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "try",
        help=command_help("try"),
        description="Assemble EDIT.s, diff it against its original (aligned by label), check "
        "its registers, LDS offsets and kernarg reads against its descriptor, then verify it "
        "at quick shapes (an M edge, an N edge, a split for splitK kernels) on the emulator and "
        "on a gfx950 GPU when one answers; on the emulator every run is also checked for "
        "timing hazards (s_waitcnt counters, LDS visibility between waves, wait states). Prints "
        "one verdict line last, naming the first wrong element of a failing run or both "
        "instructions of a hazard. Exit 0 pass, 1 fail or hazard, 2 error.",
    )
    p.add_argument("edit", help="the edited assembly (a co2asm .s, edited)")
    p.add_argument(
        "--kernel",
        help="the original kernel (symbol, .co name or stem); default: the edit's kernel symbol",
    )
    add_co_dir(p, what="the original code objects")
    add_device(p, auto="the emulator, plus a gfx950 GPU when one answers")
    p.add_argument(
        "--shape",
        action="append",
        metavar="M,N,K[,L]",
        help="run these shapes instead of the quick set; repeatable",
    )
    add_seed(p)
    p.add_argument("--diff", help="write the full diff here (default: EDIT with .diff.txt)")
    p.add_argument("--co", help="keep the assembled edit here (default: a temporary file)")
    p.add_argument(
        "--no-baseline",
        action="store_true",
        help="do not run the original to check the edit's output is bit-identical to it",
    )
    p.add_argument(
        "--no-hazard-check",
        action="store_true",
        help="skip the emulator's timing checks (faster; the verdict then covers values only)",
    )
    add_fit_resources(p)
    add_toolchain_args(p)
    p.set_defaults(func=cmd_try)

    p = subparsers.add_parser(
        "asmdiff",
        help=command_help("asmdiff"),
        description="Diff B against A: added, removed, changed and moved instructions aligned "
        "by label, descriptor and metadata changes, register/LDS/kernarg usage; then the static "
        "checks of B, the same `try` runs (its descriptor, and the timing findings over every "
        "path that A lacks). Exit 0, 1 if B fails the static checks, 2 on an error.",
    )
    p.add_argument("a", help="the original: a .s (assembled first) or a code object")
    p.add_argument("b", help="the edit: a .s (assembled first) or a code object")
    p.add_argument("--kernel", help="kernel symbol, when the objects hold more than one")
    p.add_argument("-o", "--output", help="also write the diff to this file")
    add_json_flag(p, "the diff")
    add_toolchain_args(p)
    p.set_defaults(func=cmd_asmdiff)

    p = subparsers.add_parser(
        "edit-variant",
        help=command_help("edit-variant"),
        description="Assemble an edit into OUTPUT/<original .co name> with a one-row manifest, "
        "and write its diff against the original. Exit 1 (directory not written) if the edit "
        "fails the static checks.",
    )
    p.add_argument("--asm", required=True, help="the edited assembly")
    add_co_dir(p, required=True, what="the original code objects")
    p.add_argument("--kernel", required=True, help="the original kernel (symbol, .co or stem)")
    p.add_argument("--name", help="the edit's name (recorded in the JSON)")
    p.add_argument("-o", "--output", required=True, help="variant directory to write")
    p.add_argument("--diff", required=True, help="diff file to write")
    p.add_argument("--json", help="also write the diff as JSON here")
    add_toolchain_args(p)
    p.set_defaults(func=cmd_edit_variant)
