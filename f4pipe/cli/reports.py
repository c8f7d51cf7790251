"""`f4pipe report | archive | compare | changes`: read result sets, never run kernels.

Exit codes: `archive --check` 1 when a member does not match SHA256SUMS (naming it); `compare`
1 when anything a verdict depends on changed (kernels, manifest, code objects, round trip,
verification, splitK, safety, audit), 0 when only provenance or throughput moved; `changes` 0
when its record is written, whatever changed (the report judges it); 2 on an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from f4pipe.cli import EXIT_FAILED, EXIT_OK, command_help
from f4pipe.cli.args import add_json_flag
from f4pipe.core.errors import InputError


def cmd_report(args: argparse.Namespace) -> int:
    from f4pipe.report import build_report
    from f4pipe.report.render import card_title

    report = build_report(
        args.result_dir,
        args.output,
        config=args.config,
        aiter_provenance=args.aiter_provenance,
        changes=args.changes,
    )
    for section in report.sections:
        print(f"{card_title(section)}: {section.verdict}")
    print(f"wrote {report.index} and {report.summary.name}, {len(report.plots)} plot(s)")
    return EXIT_OK


def cmd_archive(args: argparse.Namespace) -> int:
    from f4pipe.pipeline.archive import check_archive, create_archive

    if args.check:
        status = EXIT_OK
        for path in args.paths:
            result = check_archive(path)
            print(result.summary())
            status = status if result.ok else EXIT_FAILED
        return status
    if args.output is None:
        raise InputError("archive: give -o DIR (where the tarball goes), e.g. -o results/archives")
    for path in args.paths:
        print(f"wrote {create_archive(path, args.output, aiter_provenance=args.aiter_provenance)}")
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from f4pipe.compare import compare_sets, open_result_set
    from f4pipe.compare.render import write_comparison

    with open_result_set(args.a) as a, open_result_set(args.b) as b:
        comparison = compare_sets(
            a, b, floor_pct=args.floor_pct, across_machines=args.across_machines
        )
        if args.json:
            print(json.dumps(comparison.as_json(), indent=2, sort_keys=True, default=str))
        else:
            print("\n".join(comparison.summary_lines()))
        if args.output:
            written = write_comparison(comparison, args.output) / "index.html"
            print(f"wrote {written}", file=sys.stderr if args.json else sys.stdout)
    return EXIT_FAILED if comparison.differs or comparison.regressions else EXIT_OK


def cmd_changes(args: argparse.Namespace) -> int:
    from f4pipe.compare.baseline import write_changes

    record = write_changes(args.result_dir, args.archives, args.output)
    baseline = record["baseline"]
    if baseline is None:
        print(f"first archived set: no archive of another aiter id in {args.archives}")
    else:
        changed = sum(record["verdict_changes"].values())
        print(
            f"since {baseline['archive']}: {changed} verdict inputs changed, "
            f"{record['newly_unsafe']} newly unsafe, {record['regressions']} runs slower"
        )
    print(f"wrote {args.output}")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help=command_help("report"),
        description="Write index.html, summary.md and PNG plots for results/<aiter_id>/: "
        "round-trip, verification matrix, splitK error, throughput, provenance.",
    )
    p.add_argument("result_dir", type=Path, help="results/<aiter_id>/")
    p.add_argument("-o", "--output", type=Path, help="report directory (default RESULT_DIR/report)")
    p.add_argument("--config", type=Path, help="the workflow config; its sha256 is recorded")
    p.add_argument(
        "--aiter-provenance",
        type=Path,
        help="resources/aiter/<aiter_id>/provenance.json (default: found beside results/)",
    )
    p.add_argument(
        "--changes",
        type=Path,
        help="what changed since the archived set (`f4pipe changes -o`; default "
        "RESULT_DIR/changes.json when there is one, else the card says 'not compared')",
    )
    p.set_defaults(func=cmd_report)

    p = subparsers.add_parser(
        "archive",
        help=command_help("archive"),
        description="Pack RESULT_DIR into <aiter_id>__<toolchain_id>__<device_id>.tar.gz with "
        "SHA256SUMS and provenance.json (same inputs, same bytes). With --check, verify "
        "tarballs: exit 1 naming every changed, missing or unlisted file.",
    )
    p.add_argument("paths", nargs="+", type=Path, help="result-set directories (or tarballs)")
    p.add_argument("-o", "--output", type=Path, help="directory for the tarball")
    p.add_argument("--check", action="store_true", help="verify tarballs against SHA256SUMS")
    p.add_argument("--aiter-provenance", type=Path, help="as for `f4pipe report`")
    p.set_defaults(func=cmd_archive)

    p = subparsers.add_parser(
        "compare",
        help=command_help("compare"),
        description="Name everything that changed from A to B: kernels added, removed or "
        "renamed; manifest attributes and header; per code object sha256, code object and ABI "
        "version, descriptor and metadata fields, an instruction-level summary; the aiter "
        "source and digests; round-trip, verification, splitK, safety and tuned-table audit "
        "verdicts (rows added, changed, newly unsafe); throughput, each measured run judged "
        "against its noise (a change is reported only when the two runs' 95 % intervals of the "
        "median separate and the change exceeds max(3 %, the larger relative IQR); "
        "f4pipe.host.benchstats). Exit 1 when anything a verdict depends on changed or a run got "
        "slower beyond the noise, 0 otherwise.",
    )
    p.add_argument("a", type=Path, help="baseline: result-set directory or archive")
    p.add_argument("b", type=Path, help="new: result-set directory or archive")
    p.add_argument("-o", "--output", type=Path, help="write index.html + summary.md here")
    add_json_flag(p, "the comparison")
    p.add_argument(
        "--floor-pct",
        type=float,
        default=None,
        help="smallest throughput change reported, in percent (default 3; the threshold is "
        "the larger of this and the runs' relative IQR)",
    )
    p.add_argument(
        "--across-machines",
        action="store_true",
        help="judge throughput between different devices or ROCm releases too (each such "
        "line is labelled); by default those runs are listed, not judged",
    )
    p.add_argument(
        "--exit-code",
        action="store_true",
        help="accepted for older scripts: compare always exits 1 when a verdict input changed",
    )
    p.set_defaults(func=cmd_compare)

    p = subparsers.add_parser(
        "changes",
        help=command_help("changes"),
        description="Compare RESULT_DIR with the newest archived set of another aiter id "
        "(DIR/<aiter-id>/*.tar.gz, newest by file time; none: 'first archived set') and write "
        "what changed as a small JSON for the report's first card: the baseline, whether a "
        "verdict input changed, the changes per kind, rows newly unsafe, runs slower and the "
        "first lines of `f4pipe compare`'s summary. Exit 0 when written, whatever changed; "
        "`f4pipe compare` lists every change.",
    )
    p.add_argument("result_dir", type=Path, help="results/<aiter_id>/")
    p.add_argument(
        "--archives",
        type=Path,
        required=True,
        help="the archives directory, e.g. results/archives (may not exist yet)",
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="the JSON to write")
    p.set_defaults(func=cmd_changes)
