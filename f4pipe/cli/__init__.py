"""The `f4pipe` command line: one sub-command per pipeline stage.

Exit codes are uniform: 0 success, 1 a check failed (not equivalent, verification failed),
2 an error (bad input, missing tool or device) reported as one line without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from f4pipe import __version__
from f4pipe.errors import F4PipeError
from f4pipe.toolchain import Toolchain, find_toolchain, read_toolchain_json

# Each module defines register(subparsers); a sub-command sets `func(args) -> int`.
COMMAND_MODULES = ["spine", "fetchcmd", "gemm", "safety", "emu", "reports", "edits"]

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def add_toolchain_args(p: argparse.ArgumentParser) -> None:
    """--toolchain-bin / --toolchain-json, shared by every command that runs LLVM tools."""
    p.add_argument(
        "--toolchain-bin",
        metavar="DIR",
        help="LLVM bin directory to use (default: search ROCm, PATH, /usr/lib/llvm-N, "
        "then provision Debian's LLVM 22 into ~/.cache/f4pipe)",
    )
    p.add_argument("--toolchain-json", help="use the toolchain recorded in this toolchain.json")


def toolchain_from_args(args: argparse.Namespace) -> Toolchain:
    """The toolchain add_toolchain_args' options name (a recorded one is never re-provisioned)."""
    if getattr(args, "toolchain_json", None):
        return find_toolchain(read_toolchain_json(args.toolchain_json)["bin_dir"], provision=False)
    return find_toolchain(getattr(args, "toolchain_bin", None))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="f4pipe",
        description="Round-trip, verify and benchmark aiter's gfx950 MXFP4 GEMM code objects.",
    )
    parser.add_argument("--version", action="version", version=f"f4pipe {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"f4pipe.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"f4pipe.cli.{name}":
                continue  # a command group not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except F4PipeError as exc:
        print(f"f4pipe {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"f4pipe {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
