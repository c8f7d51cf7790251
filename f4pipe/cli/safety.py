"""`f4pipe safety` (the shape-edge sweep), `f4pipe audit-tuned CSV` and `f4pipe tuned-csv`.

`safety` runs f4pipe.edgesweep over the manifest's kernels on the emulator and writes the
SAFETY table; exit 1 if the emulator disagrees with f4pipe.safety's rules anywhere (the rules
then need fixing before anyone relies on them), unless --record. `audit-tuned` holds aiter's
tuned GEMM table against those rules and emulates the rows that break them (AUDIT table; exit 1
if a row is unsafe, unless --record). `tuned-csv` copies the tuned table out of the pinned
aiter wheel.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from f4pipe.audit import audit_tuned, summarize
from f4pipe.cli import EXIT_FAILED, EXIT_OK
from f4pipe.cli.gemm import co_dir_from, toolchain_id_from
from f4pipe.edgesweep import DEFAULT_ORDERS, sweep
from f4pipe.fetch import TUNED_CSV_MEMBER, extract_wheel_file
from f4pipe.manifest import read_manifest
from f4pipe.schemas import AUDIT, SAFETY, ArtifactKeys, write_rows


def _keys(args: argparse.Namespace) -> ArtifactKeys:
    return ArtifactKeys(args.aiter_id, toolchain_id_from(args), "emulator")


def run_safety(args: argparse.Namespace) -> int:
    manifest = read_manifest(co_dir_from(args))
    orders = tuple(args.order) if args.order else DEFAULT_ORDERS
    rows = sweep(manifest, _keys(args), kernels=args.kernel, orders=orders)
    write_rows(args.output, rows, SAFETY)
    counts: dict[str, int] = {}
    for r in rows:
        if r["policy"] == "unsafe":
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    disagree = [r for r in rows if not r["agrees"]]
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    kernels = len({r["kernel"] for r in rows})
    print(f"f4pipe safety: {kernels} kernel(s), {len(rows)} row(s) -> {args.output} ({summary})")
    for r in disagree:
        print(
            f"f4pipe safety: rules disagree with the emulator: {r['kernel']} {r['edge_class']} "
            f"M={r['m']} N={r['n']} K={r['k']} {r['policy']}: {r['verdict']} ({r['detail']})",
            file=sys.stderr,
        )
    return EXIT_OK if args.record or not disagree else EXIT_FAILED


def run_audit(args: argparse.Namespace) -> int:
    manifest = read_manifest(co_dir_from(args))
    rows = audit_tuned(
        args.csv, manifest, _keys(args), emulate=not args.no_emulate, co_dir_hint=args.co_dir_hint
    )
    write_rows(args.output, rows, AUDIT)
    print(f"f4pipe audit-tuned: {summarize(rows)} -> {args.output}")
    unsafe = [r for r in rows if r["status"] == "unsafe"]
    for r in unsafe:
        print(
            f"  line {r['line']}: M={r['m']} N={r['n']} K={r['k']} {r['kernel']}: {r['reason']}"
            + (
                f"\n    emulated ({r['emu_m']}x{r['emu_n']}x{r['emu_k']}): {r['emulated']}"
                f"\n    reproduce: {r['reproducer']}"
                if r["emulated"]
                else ""
            )
        )
    return EXIT_OK if args.record or not unsafe else EXIT_FAILED


def run_tuned_csv(args: argparse.Namespace) -> int:
    source = {"kind": "pypi"}
    if args.package:
        source["package"] = args.package
    if args.version:
        source["version"] = args.version
    if args.sha256:
        source["sha256"] = args.sha256
    out = extract_wheel_file(source, args.output, args.member, cache_dir=args.cache_dir)
    print(f"f4pipe tuned-csv: {args.member} -> {out}")
    return EXIT_OK


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--co-dir", help="the f4gemm manifest and .co files (default $AITER_ASM_DIR)")
    p.add_argument("--aiter-id", required=True, help="artifact key: aiter version or git sha")
    tc = p.add_mutually_exclusive_group(required=True)
    tc.add_argument("--toolchain-id", help="artifact key: LLVM/ROCm version")
    tc.add_argument("--toolchain-json", type=Path, help="read the toolchain id from this file")
    p.add_argument("-o", "--output", type=Path, required=True, help="Parquet file to write")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "safety",
        help="shape-edge sweep of the kernels on the emulator (the safety table)",
        description="Run every kernel (or --kernel ones) at N, M and K edge shapes on the "
        "emulator, in several workgroup orders, with a canary-filled D and race detection; "
        "also run unsafe shapes with f4pipe's padded-output remedy. Writes the SAFETY table. "
        "Exit 1 if f4pipe.safety's rules disagree with the emulator anywhere.",
    )
    _common(p)
    p.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    p.add_argument(
        "--order",
        action="append",
        help=f"workgroup order (repeatable, at least two; default {', '.join(DEFAULT_ORDERS)})",
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="exit 0 once the table is written, even if the rules disagree (the report shows it)",
    )
    p.set_defaults(func=run_safety)

    p = subparsers.add_parser(
        "audit-tuned",
        help="check aiter's tuned GEMM CSV against the safety rules, emulating unsafe rows",
        description="For every asm row (kernelName _ZN...) of aiter's a4w4 tuned GEMM CSV: "
        "the shape rules and f4pipe.safety's edge rules; rows that break an edge rule are "
        "emulated at their N with reduced M and K and listed with a reproducer. Writes the "
        "AUDIT table. Exit 1 if a row is unsafe (0 with --record).",
    )
    p.add_argument("csv", type=Path, help="a4w4_blockscale_tuned_gemm.csv")
    _common(p)
    p.add_argument("--no-emulate", action="store_true", help="rules only, no emulator runs")
    p.add_argument(
        "--co-dir-hint",
        help="the --co-dir to write into reproducer commands (default $AITER_ASM_DIR)",
    )
    p.add_argument("--record", action="store_true", help="exit 0 once the table is written")
    p.set_defaults(func=run_audit)

    p = subparsers.add_parser(
        "tuned-csv",
        help="copy aiter's tuned GEMM CSV out of the pinned amd-aiter wheel",
        description=f"Extract {TUNED_CSV_MEMBER} (or --member) from the amd-aiter wheel "
        "(cached, sha256-checked) to OUTPUT.",
    )
    p.add_argument("--package", help="distribution name (default amd-aiter)")
    p.add_argument("--version", help="exact version (default the pinned one)")
    p.add_argument("--sha256", help="the wheel's sha256")
    p.add_argument("--member", default=TUNED_CSV_MEMBER, help="path inside the wheel")
    p.add_argument("--cache-dir", type=Path, help="wheel cache (default: <f4pipe cache>/wheels)")
    p.add_argument("-o", "--output", type=Path, required=True)
    p.set_defaults(func=run_tuned_csv)
