"""`f4pipe aiter-id` and `f4pipe device`: the facts the workflow reads (f4pipe.pipeline.facts),
found by a job instead of while the Snakefile is parsed."""

from __future__ import annotations

import argparse
from pathlib import Path

from f4pipe.cli import EXIT_OK, command_help
from f4pipe.cli.fetchcmd import add_source_args, source_from_args
from f4pipe.core.layout import DEVICE_KINDS


def cmd_aiter_id(args: argparse.Namespace) -> int:
    from f4pipe.pipeline.facts import AITER_ID, aiter_id_fact, write_fact

    fact = aiter_id_fact(source_from_args(args))
    if args.output:
        write_fact(args.output, fact)
    print(fact[AITER_ID])
    return EXIT_OK


def cmd_device(args: argparse.Namespace) -> int:
    from f4pipe.pipeline.facts import TIMES_LAUNCHES, device_fact, write_fact

    fact = device_fact(args.device)
    if args.output:
        write_fact(args.output, fact)
    times = "times launches" if fact[TIMES_LAUNCHES] else "does not time launches"
    print(f"--device {args.device}: {times} here")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "aiter-id",
        help=command_help("aiter-id"),
        description="Print the aiter id a fetch of the source gives, without fetching: from "
        "the options for a PyPI version or a git commit, by asking the remote for a branch or "
        "tag, by hashing a local directory.",
    )
    add_source_args(p, default="pypi", places=False)
    p.add_argument("-o", "--output", type=Path, help="also write it as a JSON fact file")
    p.set_defaults(func=cmd_aiter_id)

    p = subparsers.add_parser(
        "device",
        help=command_help("device"),
        description="Say whether the device --device opens here times launches (auto: asks "
        "hip-python whether a gfx950 GPU answers), without launching anything.",
    )
    p.add_argument("--device", choices=DEVICE_KINDS, default="auto")
    p.add_argument("-o", "--output", type=Path, help="also write it as a JSON fact file")
    p.set_defaults(func=cmd_device)
