"""`f4pipe aiter-id`, `f4pipe device` and `f4pipe config-check`: the facts the workflow reads
(f4pipe.pipeline.facts), found by a job instead of while the Snakefile is parsed."""

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


def cmd_config_check(args: argparse.Namespace) -> int:
    """The config's names that only the fetched aiter can confirm, each named by its config key:
    checked by a job of its own before any job that writes into a result set, so a mistake
    costs no earlier set's file (f4pipe.pipeline.facts)."""
    from f4pipe.aiter.aiterdir import AiterDir
    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.cli.codeobj import parse_architectures
    from f4pipe.cli.safety import chosen_tuned_tables
    from f4pipe.core.errors import ConfigError, InputError
    from f4pipe.pipeline.archs import chosen_architectures
    from f4pipe.pipeline.facts import write_fact

    aiter = AiterDir(args.aiter_dir)
    fact: dict[str, object] = {}
    try:
        fact["architectures"] = chosen_architectures(aiter, parse_architectures(args.architectures))
    except InputError as exc:
        raise ConfigError(f"architectures: {exc}") from None
    manifest = read_manifest(aiter.f4gemm, check_files=False)
    edits = {}
    for i, kernel in enumerate(args.edit_kernel or []):
        try:
            edits[kernel] = manifest.get(kernel).co_name
        except InputError as exc:
            raise ConfigError(f"edits[{i}].kernel: {exc}") from None
    fact["edit_kernels"] = edits
    try:
        fact["tuned_tables"] = sorted(chosen_tuned_tables(aiter.f4gemm, args.table))
    except InputError as exc:
        raise ConfigError(f"audit_tuned.tables: {exc}") from None
    if args.output:
        write_fact(args.output, fact)
    print(f"{aiter.path}: the config's architectures, edits and tuned tables are there")
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

    p = subparsers.add_parser(
        "config-check",
        help=command_help("config-check"),
        description="Check the config's names that only a fetched aiter can confirm (the "
        "architectures, each edit's kernel, the tuned tables to audit), each named by its "
        "config key.",
    )
    p.add_argument("--aiter-dir", type=Path, required=True, help="a fetched aiter")
    p.add_argument("--architectures", default="all", help="all, none or a comma list")
    p.add_argument("--edit-kernel", action="append", help="an edit's kernel, in config order")
    p.add_argument("--table", action="append", help="a tuned table to audit (below configs/)")
    p.add_argument("-o", "--output", type=Path, help="also write it as a JSON fact file")
    p.set_defaults(func=cmd_config_check)
