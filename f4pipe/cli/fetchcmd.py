"""`f4pipe fetch`: bring aiter's f4gemm code objects into resources/aiter/<aiter-id>/."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from f4pipe.aiter.aiterdir import OTHER_ARCHITECTURES
from f4pipe.cli import command_help
from f4pipe.cli.args import add_json_flag
from f4pipe.core.errors import ConfigError, FetchError
from f4pipe.core.fsio import json_text
from f4pipe.fetch import DEFAULT_PACKAGE, DEFAULT_VERSION, fetch_aiter


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "fetch",
        help=command_help("fetch"),
        description="Copy the f4gemm manifest and the code objects it lists into "
        "RESOURCES/aiter/<aiter-id>/ with a provenance.json; a re-run with nothing changed "
        "does nothing, and changed bytes are an error, never a silent refetch.",
    )
    add_source_args(p, default="pypi")
    add_json_flag(p, "the result")
    p.add_argument(
        "--expect-id",
        help="the aiter id the source gave earlier (the workflow's aiter-id job): a fetch that "
        "gives another one (a branch moved since) is an error",
    )
    p.set_defaults(func=run)


def add_source_args(
    p: argparse.ArgumentParser, default: str | None, *, places: bool = True
) -> None:
    """The aiter source options (shared by `fetch`, `tuned-csv` and `aiter-id`); `places`:
    also where a fetch goes (--resources, --cache-dir)."""
    p.add_argument("--source", choices=("pypi", "git", "local"), default=default)
    p.add_argument("--package", help=f"pypi: distribution name (default {DEFAULT_PACKAGE})")
    p.add_argument("--version", help=f"pypi: exact version (default {DEFAULT_VERSION})")
    p.add_argument("--sha256", help="pypi: the wheel's sha256; local: the content sha256")
    p.add_argument("--url", help="git: repository URL (file:// works)")
    p.add_argument("--rev", help="git: branch, tag or full 40-hex commit")
    p.add_argument("--path", help="local: f4gemm directory or AITER_ASM_DIR (either meaning)")
    if not places:
        return
    p.add_argument("--resources", type=Path, default=Path("resources"), help="default: resources")
    p.add_argument("--cache-dir", type=Path, help="wheel cache (default: <f4pipe cache>/wheels)")


_OPTIONS = {
    "pypi": ("package", "version", "sha256"),
    "git": ("url", "rev"),
    "local": ("path", "sha256"),
}


def source_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The source dict the options describe; an option of another source kind is an error."""
    given = {k for k in ("package", "version", "sha256", "url", "rev", "path") if getattr(args, k)}
    foreign = sorted(given - set(_OPTIONS[args.source]))
    if foreign:
        raise ConfigError(
            f"--source {args.source} takes {['--' + o for o in _OPTIONS[args.source]]}, "
            f"not {['--' + o for o in foreign]}"
        )
    source: dict[str, Any] = {"kind": args.source}
    assert args.source in _OPTIONS
    for key in _OPTIONS[args.source]:
        if getattr(args, key):
            source[key] = getattr(args, key)
    if args.source == "git" and not (args.url and args.rev):
        raise ConfigError("--source git needs --url and --rev")
    if args.source == "local" and not args.path:
        raise ConfigError("--source local needs --path")
    return source


def run(args: argparse.Namespace) -> int:
    result = fetch_aiter(source_from_args(args), args.resources, cache_dir=args.cache_dir)
    if args.expect_id and result.aiter_id != args.expect_id:
        raise FetchError(
            f"the source now gives aiter id {result.aiter_id}, not {args.expect_id} as it did at "
            "the start of this run (a branch moved, or the local directory changed); run again"
        )
    record = result.aiter.provenance()
    if args.json:
        out = {
            "aiter_id": result.aiter_id,
            "f4gemm_dir": str(result.f4gemm_dir),
            "provenance": str(result.provenance),
            "fetched": result.fetched,
            "source": record["source"],
            "content_sha256": record["content_sha256"],
            "architectures": {
                arch: str(result.aiter.arch_f4gemm(arch)) for arch in result.aiter.architectures()
            },
        }
        print(json_text(out, indent=2))
    else:
        state = "fetched" if result.fetched else "already present, verified"
        used = record["source"]["f4gemm_dir"]
        tables = record.get("tables", {})
        print(f"{result.aiter_id}\t{result.f4gemm_dir}\t({state}; from {used})")
        print(f"tuned tables: {len(tables)} ({', '.join(sorted(tables)) or 'none in the source'})")
        for arch, info in sorted(record.get(OTHER_ARCHITECTURES, {}).items()):
            objects = sum(name.endswith(".co") for name in info["files"])
            print(f"{arch}: {objects} code objects in {result.aiter.arch_f4gemm(arch)}")
    return 0
