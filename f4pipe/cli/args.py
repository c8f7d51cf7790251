"""Options several commands share, each defined once with one help text: where the code objects
are (`--co-dir`), the artifact keys (`--aiter-id`, `--toolchain-id` / `--toolchain-json`), the
LLVM to use, the device, the operand seeds, `--record`, `--json` and a table's `-o`.

Light on purpose (argparse and f4pipe.core.layout): every command's argument parsing
imports this, and what a helper needs to run (the toolchain search, the code-object lookup,
Parquet) is imported inside it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from f4pipe.core.errors import ConfigError
from f4pipe.core.layout import DEVICE_KINDS, SEED_A, SEED_B

if TYPE_CHECKING:
    import pyarrow as pa

    from f4pipe.codeobj.toolchain import Toolchain
    from f4pipe.host.benchprotocol import Protocol as BenchProtocol

#: The positional kernel of commands that read one (code_object_of resolves it).
KERNEL_FILE_HELP = (
    "a gfx950 code object (.co), assembly (.s) to assemble, or a kernel's name in the aiter "
    "directory (symbol, .co name, the report's short name, or a unique tile such as 32x128)"
)
#: How a command finds the code objects when --co-dir is not given (f4pipe.cli.locate's rules).
CO_DIR_LOOKUP = "default $AITER_ASM_DIR, else the aiter fetched under ./resources"
#: --seed S means A=S, B=S+SEED_B_OFFSET, so the default 1234 gives the seed driver's 5678.
SEED_B_OFFSET = SEED_B - SEED_A
#: numpy's Generator takes any non-negative integer; 2^63-1 keeps seeds in a Parquet int64.
MAX_SEED = (1 << 63) - 1


# --- code objects and artifact keys ----------------------------------------------------------


def add_co_dir(
    p: argparse.ArgumentParser, *, required: bool = False, what: str = "the code objects"
) -> None:
    """--co-dir: aiter's f4gemm directory (manifest CSV + .co files) or either AITER_ASM_DIR
    meaning; optional ones fall back to f4pipe.cli.locate's lookup."""
    lookup = "" if required else f"; {CO_DIR_LOOKUP}"
    p.add_argument(
        "--co-dir",
        required=required,
        help=f"{what}: an f4gemm directory (manifest CSV + .co files) or an AITER_ASM_DIR{lookup}",
    )


def co_dir_from(args: argparse.Namespace) -> str:
    """--co-dir, else $AITER_ASM_DIR, else the fetched aiter (f4pipe.cli.locate's rules)."""
    from f4pipe.cli.locate import locate_co_dir

    return str(locate_co_dir(getattr(args, "co_dir", None)).co_dir)


def add_aiter_id(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    p.add_argument(
        "--aiter-id",
        required=required,
        help="artifact key: the aiter id" + ("" if required else " (default: the fetched aiter's)"),
    )


def add_artifact_keys(p: argparse.ArgumentParser) -> None:
    """--aiter-id and --toolchain-id / --toolchain-json: the keys a command's rows carry."""
    add_aiter_id(p)
    tc = p.add_mutually_exclusive_group()
    tc.add_argument("--toolchain-id", help="artifact key: the LLVM/ROCm version")
    tc.add_argument(
        "--toolchain-json",
        type=Path,
        help="read the toolchain id from this toolchain.json (default results/<aiter-id>/"
        "toolchain.json, else the toolchain f4pipe finds)",
    )


# --- the LLVM toolchain ----------------------------------------------------------------------


def add_toolchain_args(p: argparse.ArgumentParser) -> None:
    """--toolchain-bin / --toolchain-json, for every command that runs LLVM tools."""
    p.add_argument(
        "--toolchain-bin",
        metavar="DIR",
        help="LLVM bin directory to use (default: search ROCm, PATH, /usr/lib/llvm-N, "
        "then provision Debian's LLVM 22 into ~/.cache/f4pipe)",
    )
    p.add_argument("--toolchain-json", help="use the toolchain recorded in this toolchain.json")


def toolchain_from_args(args: argparse.Namespace) -> Toolchain:
    """The toolchain add_toolchain_args' options name (a recorded one is never re-provisioned)."""
    from f4pipe.codeobj.toolchain import find_toolchain, read_toolchain_json

    if getattr(args, "toolchain_json", None):
        return find_toolchain(read_toolchain_json(args.toolchain_json)["bin_dir"], provision=False)
    return find_toolchain(getattr(args, "toolchain_bin", None))


def code_object_of(path: Path, tmp: Path, args: argparse.Namespace) -> Path:
    """`path` itself; for an .s, the code object it assembles to (in `tmp`, with the toolchain
    `args` names); for a name that is no file, the code object of the kernel it names in the
    aiter directory (`--co-dir`, else f4pipe.cli.locate's rules), by any name the manifest
    takes (symbol, .co name, the report's short name, a unique tile): every command that reads
    a kernel takes a .co, a .s or a kernel's name."""
    if path.suffix == ".s":
        from f4pipe.codeobj.assemble import assemble

        return assemble(path, tmp / f"{path.stem}.co", toolchain_from_args(args))
    if path.exists() or path.suffix == ".co" or len(path.parts) > 1:
        return path
    return named_code_object(str(path), getattr(args, "co_dir", None))


def named_code_object(name: str, co_dir: str | None) -> Path:
    """The code object of the kernel `name` in the located aiter directory; InputError when it
    names none (or several: the matches are listed)."""
    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.cli.locate import locate_co_dir
    from f4pipe.core.errors import InputError, ManifestError

    try:
        located = locate_co_dir(co_dir)
        manifest = read_manifest(located.co_dir)
        return manifest.co_path(manifest.get(name))
    except ManifestError as exc:
        raise InputError(
            f"{name}: no such file, nor a kernel name f4pipe can resolve: {exc}"
        ) from None


# --- running kernels -------------------------------------------------------------------------

#: What `--device auto` means for commands that run on one device.
AUTO_ONE_DEVICE = "hip when a gfx950 GPU answers, else the emulator"


def add_device(p: argparse.ArgumentParser, *, auto: str = AUTO_ONE_DEVICE) -> None:
    """--device auto|hip|emulator; `auto` says what auto means for this command."""
    p.add_argument(
        "--device",
        choices=DEVICE_KINDS,
        default="auto",
        help=f"hip: a gfx950 GPU via hip-python; emulator: f4pipe's gfx950 emulator; "
        f"auto: {auto} (default)",
    )


def add_seed(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--seed",
        default=str(SEED_A),
        help=f"operand seeds: S (A=S, B=S+{SEED_B_OFFSET}) or A,B (default {SEED_A} -> "
        f"{SEED_A},{SEED_B}, the seed driver's)",
    )


def parse_seed(text: str) -> tuple[int, int]:
    """'S' -> (S, S + SEED_B_OFFSET); 'A,B' -> (A, B)."""
    try:
        parts = [int(p) for p in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) == 1:
        parts.append(parts[0] + SEED_B_OFFSET)
    if len(parts) != 2:
        raise ConfigError(f"--seed {text!r}: expected S or A,B (integers)")
    if not all(0 <= p <= MAX_SEED for p in parts):
        raise ConfigError(
            f"--seed {text!r}: seeds must be in 0..{MAX_SEED} (B = S + {SEED_B_OFFSET})"
        )
    return parts[0], parts[1]


# --- outputs and exit codes ------------------------------------------------------------------


def add_record(p: argparse.ArgumentParser, written: str = "the table") -> None:
    """--record: the pipeline records verdicts instead of stopping on them."""
    p.add_argument(
        "--record",
        action="store_true",
        help=f"exit 0 once {written} is written, whatever the verdicts (the pipeline reports "
        "them instead of stopping); errors still exit 2",
    )


def add_store(p: argparse.ArgumentParser) -> None:
    """--store: reuse rows by content (f4pipe.pipeline.resultstore); never for bench, whose rows are
    measurements."""
    p.add_argument(
        "--store",
        type=Path,
        help="result store directory (f4pipe.pipeline.resultstore): take a run's rows from it "
        "when it holds the same kernel bytes, parameters, device, toolchain and f4pipe, and add "
        "the rows that ran; the pipeline passes <results_dir>/store (default: no reuse)",
    )


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def add_workers(p: argparse.ArgumentParser) -> None:
    """--workers: emulated runs spread over forked processes (f4pipe.pipeline.parallel)."""
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="processes for the emulator's runs (default 1; the pipeline passes the job's "
        "threads); a GPU always runs one at a time",
    )


def add_json_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as one JSON object")


def add_table_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", type=Path, help="write the Parquet table here")


def write_if_asked(output: Path | None, rows: list[dict[str, Any]], schema: pa.Schema) -> str:
    """Write the Parquet table only when -o names one; the suffix for the summary line."""
    if output is None:
        return ""
    from f4pipe.core.schemas import write_rows

    write_rows(output, rows, schema)
    return f" -> {output}"


def add_fit_resources(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fit-resources",
        action="store_true",
        help="size the kernel descriptor and metadata note to what the code uses (VGPRs, "
        "AGPRs and accum_offset, SGPRs, LDS where its addresses are static), print the "
        "occupancy before and after, and refuse (exit 2) an edit gfx950 cannot hold; the .s is "
        "not modified",
    )


# --- timing ----------------------------------------------------------------------------------


def add_protocol(p: argparse.ArgumentParser) -> None:
    """The bench protocol's options beyond --iters (f4pipe.host.benchprotocol.Protocol)."""
    from f4pipe.host.benchprotocol import COLD_ROTATE_BYTES, Protocol

    p.add_argument(
        "--repeats",
        type=int,
        default=Protocol.repeats,
        help=f"the timed launches come in this many repeats (default {Protocol.repeats})",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=Protocol.warmup,
        help=f"at least this many warm-up launches ({Protocol.warmup})",
    )
    p.add_argument(
        "--warmup-ms",
        type=float,
        default=Protocol.warmup_ms,
        help=f"... and at least this long ({Protocol.warmup_ms:g} ms)",
    )
    p.add_argument(
        "--hot",
        action="store_true",
        help="reuse one operand set (warm caches; default: cold, rotating copies)",
    )
    p.add_argument(
        "--rotate-mib",
        type=int,
        default=COLD_ROTATE_BYTES >> 20,
        help=f"cold mode: MiB of operand copies to rotate through (default "
        f"{COLD_ROTATE_BYTES >> 20}: more than the L2s and Infinity Cache of an MI355X)",
    )


def protocol_from(args: argparse.Namespace) -> BenchProtocol:
    """The protocol add_protocol's options (and --iters) ask for."""
    from f4pipe.pipeline.stages import bench_protocol

    return bench_protocol(
        args.iters,
        repeats=args.repeats,
        warmup=args.warmup,
        warmup_ms=args.warmup_ms,
        cold=not args.hot,
        rotate_bytes=args.rotate_mib << 20,
    )
