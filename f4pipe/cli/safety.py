"""`f4pipe safety` (the shape-edge sweep), `f4pipe audit-tuned CSV` and `f4pipe tuned-csv`.

`safety` runs f4pipe.pipeline.edgesweep over the manifest's kernels on the emulator and writes the
SAFETY table; exit 1 if the emulator disagrees with f4pipe.aiter.shaperules's rules anywhere (the
rules
then need fixing before anyone relies on them), unless --record. `audit-tuned` holds aiter's
tuned GEMM table against those rules and emulates the rows that break them (AUDIT table; exit 1
if a row is unsafe, unless --record). `tuned-csv` copies the tuned table out of the pinned
aiter wheel.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from f4pipe.aiter.manifest import Manifest, read_manifest
from f4pipe.aiter.tables import CONFIGS_PATH
from f4pipe.arch.gfx950 import ARCH
from f4pipe.cli import EXIT_FAILED, EXIT_OK, command_help
from f4pipe.cli.args import (
    add_artifact_keys,
    add_co_dir,
    add_record,
    add_store,
    add_table_output,
    add_workers,
    write_if_asked,
)
from f4pipe.cli.fetchcmd import add_source_args, source_from_args
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import write_bytes
from f4pipe.core.layout import BASE_VARIANTS, SWEEP_ORDERS, TUNED_CSV_MEMBER
from f4pipe.fetch import extract_wheel_file, fetch_aiter
from f4pipe.pipeline.resultstore import open_store, reuse_line

if TYPE_CHECKING:
    from collections.abc import Sequence

    from f4pipe.aiter.lookup import KeyFinding
    from f4pipe.cli.locate import Located
    from f4pipe.core.schemas import ArtifactKeys


def _keys(args: argparse.Namespace, located: Located) -> ArtifactKeys:
    from f4pipe.cli.locate import artifact_keys

    return artifact_keys(
        located,
        "emulator",
        aiter_id=args.aiter_id,
        toolchain_id=args.toolchain_id,
        toolchain_json=args.toolchain_json,
    )


def run_safety(args: argparse.Namespace) -> int:
    from f4pipe.cli.locate import locate_co_dir
    from f4pipe.core.schemas import SAFETY
    from f4pipe.pipeline.edgesweep import DEFAULT_ORDERS, sweep
    from f4pipe.pipeline.stages import gfx950_only

    located = locate_co_dir(args.co_dir)
    manifest = read_manifest(located.co_dir)
    other_arch = gfx950_only("safety", manifest)
    if other_arch is not None:
        print(other_arch)
        write_if_asked(args.output, [], SAFETY)
        return EXIT_OK
    orders = tuple(args.order) if args.order else DEFAULT_ORDERS
    store = open_store(args.store)
    rows = sweep(
        manifest,
        _keys(args, located),
        kernels=args.kernel,
        orders=orders,
        store=store,
        workers=args.workers,
        variant=args.variant,
    )
    written = write_if_asked(args.output, rows, SAFETY)
    counts: dict[str, int] = {}
    for r in rows:
        if r["policy"] == "unsafe":
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    disagree = [r for r in rows if not r["agrees"]]
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    kernels = len({r["kernel"] for r in rows})
    print(f"f4pipe safety: {kernels} kernel(s), {len(rows)} row(s){written} ({summary})")
    if store is not None:
        print(reuse_line("safety", rows, store))
    for r in disagree:
        print(
            f"f4pipe safety: rules disagree with the emulator: {r['kernel']} {r['edge_class']} "
            f"M={r['m']} N={r['n']} K={r['k']} {r['policy']}: {r['verdict']} ({r['detail']})",
            file=sys.stderr,
        )
    return EXIT_OK if args.record or not disagree else EXIT_FAILED


def chosen_tuned_tables(co_dir: Path, wanted: list[str] | None) -> dict[str, Path]:
    """The tuned tables beside `co_dir`, only those `wanted` names (paths below aiter/configs)
    when given, each of which must be there (`--table`, config `audit_tuned.tables`)."""
    from f4pipe.aiter.aiterdir import tuned_tables_of

    tables = tuned_tables_of(co_dir)
    if not wanted:
        return tables
    names = {t.removeprefix(f"{CONFIGS_PATH}/") for t in wanted}
    missing = sorted(names - tables.keys())
    if missing:
        raise InputError(
            f"--table {missing}: not among the tuned tables of {co_dir.parent} "
            f"({sorted(tables) or 'none'})"
        )
    return {name: path for name, path in tables.items() if name in names}


def _audit_inputs(args: argparse.Namespace, located: Located) -> dict[str, Path]:
    """The tables to audit: the CSV files given, else the located aiter's tuned tables
    (only those named by --table, when given)."""
    if args.csv:
        return {path.name if len(args.csv) == 1 else str(path): path for path in args.csv}
    tables = chosen_tuned_tables(located.co_dir, args.table)
    if not tables and located.fetched is None:
        raise InputError(
            f"no tuned table given and none beside {located.co_dir} (no aiter/configs with a4w4 "
            "tuned tables): pass the CSV, e.g. aiter/configs/a4w4_blockscale_tuned_gemm.csv"
        )
    return tables


def findings_line(findings: Sequence[KeyFinding]) -> str:
    """The key findings counted per kind over the whole table, then over its asm rows alone:
    the audit table (and so the report) holds only the asm rows, f4pipe judges no CK kernel,
    so the asm counts are the ones the report shows."""

    def counts(found: Sequence[KeyFinding]) -> str:
        kinds = Counter(f.kind for f in found)
        return ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "none"

    from f4pipe.aiter.tuned import ASM_PREFIX

    if not findings:
        return "none"
    asm = [f for f in findings if f.row.kernel_name.startswith(ASM_PREFIX)]
    return f"{counts(findings)} (on asm rows, which the audit and the report hold: {counts(asm)})"


def run_coverage(
    args: argparse.Namespace, manifest: Manifest, tables: dict[str, Path], how: str
) -> int:
    """`audit-tuned --shapes/--shape`: what aiter runs for each shape, and the tables' key
    findings. Exit 1 if a shape runs an unsafe kernel or makes aiter raise."""
    from f4pipe.aiter.lookup import build_index, key_findings
    from f4pipe.aiter.traffic import (
        coverage_row,
        format_row,
        groups,
        parse_shape,
        predicted_shape,
        read_shapes,
    )
    from f4pipe.aiter.tuned import read_tuned
    from f4pipe.core.schemas import COVERAGE

    specs = [s for path in args.shapes for s in read_shapes(path)]
    specs += [parse_shape(text) for text in args.shape]
    index = build_index({name: read_tuned(path) for name, path in tables.items()})
    found = [
        g for spec in specs for g in groups(index, manifest, spec, cu_num=args.cu_num, gfx=args.gfx)
    ]
    rankings = {}
    predictor = None
    if args.predict:
        from f4pipe.perf.predict import Predictor

        predictor = Predictor(manifest)
        shapes = sorted({predicted_shape(g) for g in found if g.resolution.outcome != "error"})
        ranked = predictor.rank_shapes([(*shape, None) for shape in shapes])
        rankings = dict(zip(shapes, ranked, strict=True))
    rows = [coverage_row(g, rankings.get(predicted_shape(g))) for g in found]
    written = write_if_asked(args.output, rows, COVERAGE)
    findings = key_findings(index)
    print(
        f"f4pipe audit-tuned: {len(tables)} table(s) ({', '.join(tables) or 'none'}) with the "
        f"kernels of {how}, looked up as {index.rules.name} does on {args.gfx} with "
        f"{args.cu_num} CUs"
    )
    if index.error:
        print(f"f4pipe audit-tuned: aiter would not load these tables: {index.error}")
    print(f"f4pipe audit-tuned: key findings: {findings_line(findings)}")
    for f in findings if args.findings else []:
        print(f"  {f.kind}: {f.row.where()} M={f.row.m} N={f.row.n} K={f.row.k}: {f.detail}")
        print(f"    reproduce: {f.reproducer}")
    bad = [r for r in rows if r["outcome"] == "error" or r["safe"] is False]
    points = Counter()
    for r in rows:
        points[r["outcome"]] += r["m_hi"] - r["m_lo"] + 1
    print(
        f"f4pipe audit-tuned: {len(specs)} shape(s), {points.total()} (M, N, K) point(s): "
        f"{points['hit']} hit a tuned row, {points['miss']} fall through to the heuristic, "
        f"{points['error']} make aiter raise; {len(bad)} group(s) unsafe or failing{written}"
    )
    if predictor is not None:
        print(
            "f4pipe audit-tuned: times are PREDICTED by the cycle model (calibration "
            f"{predictor.calibration_id}; not measured), at each group's largest M"
        )
    for r in rows:
        print(f"  {format_row(r)}")
    return EXIT_FAILED if bad and not args.record else EXIT_OK


def run_audit(args: argparse.Namespace) -> int:
    from f4pipe.cli.locate import locate_co_dir
    from f4pipe.core.schemas import AUDIT
    from f4pipe.pipeline.audit import audit_tables, format_finding, retune_candidates, summarize
    from f4pipe.pipeline.stages import gfx950_only

    located = locate_co_dir(args.co_dir)
    manifest = read_manifest(located.co_dir)
    other_arch = gfx950_only("audit-tuned", manifest)
    if other_arch is not None:
        print(other_arch)
        write_if_asked(args.output, [], AUDIT)
        return EXIT_OK
    tables = _audit_inputs(args, located)
    if args.shapes or args.shape:
        return run_coverage(args, manifest, tables, located.how)
    hint = args.co_dir_hint or (str(located.co_dir) if not args.co_dir else args.co_dir)
    store = open_store(args.store)
    keys = _keys(args, located)
    predictor = None
    if args.predict:
        from f4pipe.perf.predict import Predictor

        predictor = Predictor(manifest)
    rows = audit_tables(
        tables,
        manifest,
        keys,
        emulate=not args.no_emulate,
        co_dir_hint=hint,
        store=store,
        predictor=predictor,
    )
    written = write_if_asked(args.output, rows, AUDIT)
    print(
        f"f4pipe audit-tuned: {len(tables)} table(s) ({', '.join(tables) or 'none'}) with the "
        f"kernels of {located.how}"
    )
    print(f"f4pipe audit-tuned: {summarize(rows)}{written}")
    if store is not None:
        emulated = [r for r in rows if r["reuse_key"]]
        print(reuse_line("audit-tuned", emulated, store, what="emulation(s)"))
    unsafe = [r for r in rows if r["status"] == "unsafe"]
    for r in unsafe:
        print(format_finding(r))
    if predictor is not None:
        lines = retune_candidates(rows, args.top)
        suspect = sum(1 for r in rows if r["suspect"])
        print(
            f"f4pipe audit-tuned: re-tune candidates, PREDICTED by the cycle model (calibration "
            f"{predictor.calibration_id}; not measured), {len(lines)} shown; {suspect} row(s) "
            "whose recorded time is suspect (column `suspect`):"
        )
        for line in lines:
            print(f"  {line}")
    return EXIT_OK if args.record or not unsafe else EXIT_FAILED


def run_tuned_csv(args: argparse.Namespace) -> int:
    """Copy a tuned table of any source kind (the pypi wheel without touching resources/)."""
    from f4pipe.cli.locate import fetched_aiter_dir

    member = args.member.removeprefix(f"{CONFIGS_PATH}/")
    if args.source is None and (args.package or args.version or args.sha256):
        args.source = "pypi"  # the options of the wheel name a pypi source
    source = source_from_args(args) if args.source else None
    if source is not None and source["kind"] == "pypi":
        out = extract_wheel_file(
            source, args.output, f"{CONFIGS_PATH}/{member}", cache_dir=args.cache_dir
        )
        print(f"f4pipe tuned-csv: {CONFIGS_PATH}/{member} -> {out}")
        return EXIT_OK
    if source is not None:
        fetched = fetch_aiter(source, args.resources, cache_dir=args.cache_dir).aiter
    else:
        found = fetched_aiter_dir(args.resources)
        if found is None:
            raise InputError(
                f"no aiter fetched under {args.resources}: give --source (pypi, git or local) "
                "or run `f4pipe fetch` first"
            )
        fetched = found
    tables = fetched.tuned_tables()
    if member not in tables:
        raise InputError(
            f"{fetched.path.name} has no tuned table {member!r}; it has {sorted(tables) or 'none'}"
        )
    write_bytes(args.output, tables[member].read_bytes())
    print(f"f4pipe tuned-csv: {fetched.path.name}:{CONFIGS_PATH}/{member} -> {args.output}")
    return EXIT_OK


def _common(p: argparse.ArgumentParser) -> None:
    add_co_dir(p)
    add_artifact_keys(p)
    add_table_output(p)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "safety",
        help=command_help("safety"),
        description="Run every kernel (or --kernel ones) at N, M and K edge shapes on the "
        "emulator, in several workgroup orders, with a canary-filled D and race detection; "
        "also run unsafe shapes with f4pipe's padded-output remedy. Writes the SAFETY table. "
        "Exit 1 if f4pipe.aiter.shaperules's rules disagree with the emulator anywhere.",
    )
    _common(p)
    add_store(p)
    add_workers(p)
    p.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    p.add_argument(
        "--variant",
        default=BASE_VARIANTS[0],
        help="the rows' variant: original (default) or an edit's edit-<name>",
    )
    p.add_argument(
        "--order",
        action="append",
        help=f"workgroup order (repeatable, at least two; default {', '.join(SWEEP_ORDERS)})",
    )
    add_record(p)
    p.set_defaults(func=run_safety)

    p = subparsers.add_parser(
        "audit-tuned",
        help=command_help("audit-tuned"),
        description="For every asm row (kernelName _ZN...) of aiter's a4w4 tuned GEMM tables "
        "(the CSVs given, else every one fetched with the code objects): the shape rules and "
        "f4pipe.aiter.shaperules's edge rules; rows that break an edge rule are emulated at their "
        "N with reduced M and K in two workgroup orders. Each finding prints aiter's recorded "
        "columns beside f4pipe's verdict, with a reproducer. Rows whose gfx column names "
        "another arch are skipped and counted. With -o, writes the AUDIT table. Exit 1 if a "
        "row is unsafe (0 with --record).",
    )
    p.add_argument(
        "csv",
        type=Path,
        nargs="*",
        help="tuned tables (default: every a4w4 tuned table fetched with the code objects)",
    )
    _common(p)
    p.add_argument(
        "--table",
        action="append",
        help="only this fetched table (its path below aiter/configs; repeatable)",
    )
    p.add_argument("--no-emulate", action="store_true", help="rules only, no emulator runs")
    p.add_argument(
        "--predict",
        action="store_true",
        help="add the cycle model's re-tune columns per row (predicted time of the recorded "
        "kernel, the predicted best safe kernel and gain, suspect recorded times) and list the "
        "largest predicted gains; the first run traces every kernel (about 2 CPU-minutes, "
        "cached after)",
    )
    p.add_argument("--top", type=int, default=20, help="re-tune candidates listed (default 20)")
    p.add_argument(
        "--shapes",
        type=Path,
        action="append",
        default=[],
        help="a shape list (CSV: M, N, K[, name]; M may be a range such as 1-8192): instead "
        "of auditing rows, say for each shape which row aiter's lookup hits (after padding M) "
        "or which kernels its fallback may run, and whether that is safe; with --predict, the "
        "predicted time against the predicted best safe kernel. Examples in config/shapes/. "
        "Exit 1 if a shape runs an unsafe kernel or makes aiter raise",
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="M,N,K",
        help="one shape, as --shapes (repeatable; M may be a range)",
    )
    p.add_argument(
        "--cu-num", type=int, default=256, help="the device's CU count for --shapes (default 256)"
    )
    p.add_argument("--gfx", default=ARCH, help=f"the device's arch for --shapes (default {ARCH})")
    p.add_argument(
        "--findings",
        action="store_true",
        help="with --shapes: list every key finding with its reproducer, not only the counts",
    )
    add_store(p)
    p.add_argument(
        "--co-dir-hint",
        help="the --co-dir to write into reproducer commands (default: the one used)",
    )
    add_record(p)
    p.set_defaults(func=run_audit)

    p = subparsers.add_parser(
        "tuned-csv",
        help=command_help("tuned-csv"),
        description=f"Copy {TUNED_CSV_MEMBER} (or --member) to OUTPUT: from the pinned "
        "amd-aiter wheel (--source pypi or --package/--version: cached, sha256-checked), from a "
        "git revision or local directory (--source git|local: fetched into --resources first), "
        "or, with no source option, from the aiter fetched under --resources.",
    )
    add_source_args(p, default=None)
    p.add_argument(
        "--member", default=TUNED_CSV_MEMBER, help=f"the table's path (default {TUNED_CSV_MEMBER})"
    )
    p.add_argument("-o", "--output", type=Path, required=True)
    p.set_defaults(func=run_tuned_csv)
