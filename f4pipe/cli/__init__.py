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
import os
import sys
import traceback
from collections.abc import Sequence

from f4pipe import __version__
from f4pipe.codeobj.images import shared_images
from f4pipe.core.cache import keeping_between_commands
from f4pipe.core.errors import F4PipeError

#: BLAS threads for the command's numpy (set before numpy loads; a value the user set wins).
#: f4pipe's matrix products are the emulator's many tiny MFMA tiles and one reference GEMM per
#: run, and a pipeline job already spreads its runs over one forked worker per core: extra
#: OpenBLAS threads only spin, about 10 % more CPU seconds for the same wall time on two cores
#: (benchmarks/profile_emu.py, docs/performance.md).
BLAS_THREADS = "1"
os.environ.setdefault("OPENBLAS_NUM_THREADS", BLAS_THREADS)

#: Every command, in `f4pipe --help` order: the module under f4pipe/cli that registers it
#: (register(subparsers); the command sets `func(args) -> int`) and its one-line help. A run
#: imports only its command's module, and each module imports numpy, pandas and pyarrow only
#: inside the functions that run a command, so parsing arguments stays light (every pipeline
#: job pays it; tests/test_cli_startup.py guards it, benchmarks/cli_startup.py measures it).
COMMANDS: dict[str, tuple[str, str]] = {
    "toolchain": ("codeobj", "find or provision an LLVM that knows gfx950"),
    "fetch": (
        "fetchcmd",
        "fetch aiter's f4gemm code objects (PyPI wheel, git revision or local directory)",
    ),
    "aiter-id": ("facts", "the aiter id a source gives (a branch resolved, a local tree hashed)"),
    "device": ("facts", "whether the device --device opens here times launches (no launch)"),
    "config-check": ("facts", "the config's architectures, edit kernels, tuned tables: there?"),
    "co2asm": ("codeobj", "code object -> reassemblable assembly"),
    "assemble": ("codeobj", "assembly -> code object (llvm-mc + ld.lld)"),
    "roundtrip": ("codeobj", "co2asm + assemble + equivalence proof"),
    "hazards": (
        "emu",
        "static timing check of a gfx950 code object (s_waitcnt counters, wait states)",
    ),
    "waits": (
        "waits",
        "the loosest correct s_waitcnt at every wait, and the waits and s_nop a kernel lacks",
    ),
    "kernels": ("codeobj", "manifest + code object headers -> kernels.parquet"),
    "architectures": ("codeobj", "kernels + round trip of every architecture beside gfx950"),
    "gemm": ("gemm", "run one MXFP4 GEMM like the seed driver (verify, time on hardware)"),
    "verify": ("gemm", "check kernels against the CPU reference over a shape matrix"),
    "splitk": ("gemm", "error vs K split count on the splitK kernels"),
    "bench": ("gemm", "throughput (us, TFLOP/s) on gfx950 hardware; skipped rows elsewhere"),
    "predict": (
        "predict",
        "predicted MI355X time of the kernels at a shape (cycle model; no GPU needed)",
    ),
    "try": ("edits", "assemble, diff, check and verify a hand-edited kernel in one go"),
    "asmdiff": ("edits", "instruction-level diff of two kernels (.s or .co), plus static checks"),
    "edit-variant": (
        "edits",
        "build the pipeline's edit-<name> variant directory from an edited .s",
    ),
    "safety": ("safety", "shape-edge sweep of the kernels on the emulator (the safety table)"),
    "audit-tuned": (
        "safety",
        "check aiter's tuned GEMM tables against the safety rules (emulating unsafe rows), or "
        "with --shapes say which kernel aiter runs for each shape of a model",
    ),
    "tune": (
        "tune",
        "a tuned a4w4 table in aiter's format for every shape of a model (predicted, safe picks)",
    ),
    "tuned-csv": ("safety", "copy one of aiter's tuned GEMM tables out of any aiter source"),
    "report": ("reports", "HTML + markdown report of one result set"),
    "archive": ("reports", "reproducible tarball of a result set, or --check one"),
    "compare": ("reports", "two result sets (directories or archives) side by side"),
    "changes": (
        "reports",
        "what changed since the newest archived set of another aiter id, as JSON for the report",
    ),
    "gather": ("codeobj", "concatenate per-job Parquet tables of one schema"),
    "rebuilt-dir": ("codeobj", "collect rebuilt objects + a manifest CSV"),
}


def command_help(name: str) -> str:
    """The one-line help of a command (COMMANDS), for its module's add_parser."""
    return COMMANDS[name][1]


EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_INTERNAL = 0, 1, 2, 3


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, just that command's module is imported and every
    other command is listed by name and help (what a run of `f4pipe ONLY ...` needs)."""
    parser = argparse.ArgumentParser(
        prog="f4pipe",
        description="Round-trip, verify and benchmark aiter's gfx950 MXFP4 GEMM code objects. "
        "Exit codes: 0 success or pass, 1 a verdict (not equivalent, failed, changed, unsafe), "
        "2 bad input or environment, 3 internal error (a bug; --debug shows the traceback).",
    )
    parser.add_argument("--version", action="version", version=f"f4pipe {__version__}")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = dict.fromkeys(module for module, _ in COMMANDS.values())
    if only is not None:
        modules = dict.fromkeys([COMMANDS[only][0]] if only in COMMANDS else [])
    for module in modules:
        importlib.import_module(f"f4pipe.cli.{module}").register(subparsers)
    for name, (_, text) in COMMANDS.items():
        if name not in subparsers.choices:  # listed only: its module is not needed for this run
            subparsers.add_parser(name, help=text)
    for sub in subparsers.choices.values():  # `f4pipe CMD ... --debug` works too
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


DEBUG_HELP = "on an internal error (exit 3), print the Python traceback"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # top-level options take no value, so the first other word is the command
    parser = build_parser(only=next((a for a in argv if not a.startswith("-")), ""))
    args = parser.parse_args(argv)  # a usage error exits 2 with argparse's one-line message
    prefix = f"f4pipe {args.command}"
    try:
        # each code object read and parsed once per command; what is found of a kernel's bytes
        # alone (its static findings) kept for the next command
        with shared_images(), keeping_between_commands():
            return int(args.func(args))
    except F4PipeError as exc:
        print(f"{prefix}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        return output_closed()
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


def output_closed() -> int:
    """stdout's reader went away (`f4pipe predict ... | head`): stop quietly with exit 0, as
    Unix filters do, and point stdout at /dev/null so that the interpreter's last flush cannot
    complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK


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
