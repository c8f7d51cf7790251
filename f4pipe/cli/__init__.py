"""The `f4pipe` command line: one sub-command per pipeline stage.

One exit-code rule for every command, applied here and nowhere else:

- 0: success, or the check passed;
- 1: a verdict: not equivalent, verification failed, archive changed, unsafe (never an error);
- 2: bad input or environment: one line naming the thing and what to do (F4PipeError, an
  OSError that names its file, running out of memory);
- 3: an unexpected internal error, i.e. a bug: "internal error, please report", with the
  traceback only under --debug.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
import traceback
from collections.abc import Sequence

from f4pipe import __version__
from f4pipe.errors import F4PipeError
from f4pipe.toolchain import Toolchain, find_toolchain, read_toolchain_json

# Each module defines register(subparsers); a sub-command sets `func(args) -> int`.
COMMAND_MODULES = ["spine", "fetchcmd", "gemm", "safety", "emu", "reports", "edits"]

EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_INTERNAL = 0, 1, 2, 3


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
        description="Round-trip, verify and benchmark aiter's gfx950 MXFP4 GEMM code objects. "
        "Exit codes: 0 success or pass, 1 a verdict (not equivalent, failed, changed, unsafe), "
        "2 bad input or environment, 3 internal error (a bug; --debug shows the traceback).",
    )
    parser.add_argument("--version", action="version", version=f"f4pipe {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"f4pipe.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"f4pipe.cli.{name}":
                continue  # a command group not built yet
            raise
        module.register(subparsers)
    for sub in subparsers.choices.values():  # `f4pipe CMD ... --debug` works too
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


DEBUG_HELP = "on an internal error (exit 3), print the Python traceback"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # a usage error exits 2 with argparse's one-line message
    prefix = f"f4pipe {args.command}"
    try:
        return int(args.func(args))
    except F4PipeError as exc:
        print(f"{prefix}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print(
            f"{prefix}: error: out of memory: use a smaller shape or input, or a machine with "
            "more memory",
            file=sys.stderr,
        )
        return EXIT_ERROR
    except OSError as exc:
        if exc.filename is None and exc.errno not in ENVIRONMENT_ERRNOS:
            return internal_error(prefix, args)
        print(f"{prefix}: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except Exception:  # the one place a bug becomes exit 3
        return internal_error(prefix, args)


# OSErrors that are the environment's doing even when they name no file.
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EPIPE, errno.ENOMEM})


def describe_os_error(exc: OSError) -> str:
    """`PATH: Permission denied` (the file first, as cp and cat say it)."""
    what = exc.strerror or type(exc).__name__
    if exc.filename is None:
        return what
    where = f"{exc.filename} -> {exc.filename2}" if exc.filename2 is not None else exc.filename
    return f"{where}: {what}"


def internal_error(prefix: str, args: argparse.Namespace) -> int:
    exc_type, exc, _ = sys.exc_info()
    name = exc_type.__name__ if exc_type else "Exception"
    print(f"{prefix}: internal error, please report: {name}: {exc}", file=sys.stderr)
    if getattr(args, "debug", False):
        traceback.print_exc()
    else:
        print(f"{prefix}: run again with --debug for the traceback", file=sys.stderr)
    return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
