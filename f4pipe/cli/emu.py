"""`f4pipe hazards`: the static timing check of any gfx950 code object (f4pipe.analysis.hazards)."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from f4pipe.cli import EXIT_FAILED, EXIT_OK, command_help
from f4pipe.cli.args import (
    KERNEL_FILE_HELP,
    add_co_dir,
    add_json_flag,
    add_toolchain_args,
    code_object_of,
)
from f4pipe.core.errors import InputError


def rules_text() -> str:
    """The wait-state rule table, one block per rule (id, what, wait states, source, note)."""
    from f4pipe.arch.waitstates import RULES

    lines = []
    for r in RULES:
        lines.append(f"{r.rule:6s} {r.what}")
        lines.append(f"       source: {r.source}")
        if r.note:
            lines.append(f"       note: {r.note}")
    lines.append(
        "counters: vmcnt (buffer loads/stores/atomics, LDS DMA; in order), lgkmcnt (DS in "
        "order; SMEM out of order: only lgkmcnt(0) covers it); s_barrier waits for nothing; "
        "s_endpgm retires all (docs/reference/timing.md A1-A4)"
    )
    return "\n".join(lines)


def cmd_hazards(args: argparse.Namespace) -> int:
    from f4pipe.analysis.hazards import analyse
    from f4pipe.codeobj.codeobject import CodeObject
    from f4pipe.codeobj.program import Program
    from f4pipe.codeobj.sourcemap import locator

    if args.rules:
        print(rules_text())
        return EXIT_OK
    if args.code_object is None:
        raise InputError("give a gfx950 code object, or --rules to print the rule table")
    given = Path(args.code_object)
    with tempfile.TemporaryDirectory(prefix="f4pipe-hazards-") as tmp:
        path = code_object_of(given, Path(tmp), args)
        symbols = [s.name for s in CodeObject.read(path).kernel_symbols()]
        if args.kernel:
            symbols = [s for s in symbols if args.kernel in s]
        programs = [Program.load(path, s) for s in symbols]
        reports = [analyse(p) for p in programs]
        where = [locator(p, given if given.suffix == ".s" else path) for p in programs]
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "kernel": r.symbol,
                        "instructions": r.instructions,
                        "findings": [
                            {
                                "kind": kind,
                                "rule": f.hazard.rule,
                                "consumer_pc": f.hazard.consumer_pc,
                                "producer_pc": f.hazard.producer_pc,
                                "required": f.required,
                                "actual": f.actual,
                                "message": f.hazard.message,
                                "where": loc.where(f.hazard.consumer_pc),
                            }
                            for kind, found in (
                                ("wait-state", r.wait_states),
                                ("counter", r.counters),
                            )
                            for f in found
                        ],
                    }
                    for r, loc in zip(reports, where, strict=True)
                ],
                indent=1,
            )
        )
    else:
        for r, loc in zip(reports, where, strict=True):
            print(
                f"{given}:{r.symbol}: {r.instructions} reachable instructions, "
                f"{len(r.wait_states)} wait-state and {len(r.counters)} counter finding(s)"
            )
            for message in r.messages():
                print(f"  {loc.locate(message)}")
    return EXIT_FAILED if any(r.count for r in reports) else EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "hazards",
        help=command_help("hazards"),
        description="Check every kernel of a gfx950 code object, over all paths of its control "
        "flow (branches both ways), for reads of a load's registers before the s_waitcnt that "
        "retires it and for too few wait states between the producer/consumer pairs of the "
        "gfx950 rule table (`--rules` prints it, with sources). Conservative: a finding names a "
        "path the code allows, which a launch may not take; LDS ordering between waves depends "
        "on addresses and is checked only when the emulator runs the kernel (f4pipe gemm, try, "
        "verify). Exit 0 none, 1 findings, 2 error.",
    )
    p.add_argument("code_object", nargs="?", help=KERNEL_FILE_HELP)
    p.add_argument("--kernel", help="only kernels whose symbol contains this")
    add_json_flag(p, "the findings")
    p.add_argument("--rules", action="store_true", help="print the rule table and exit")
    add_co_dir(p, what="where a kernel named by name is found")
    add_toolchain_args(p)
    p.set_defaults(func=cmd_hazards)
