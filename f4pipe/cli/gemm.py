"""`f4pipe gemm` (the seed driver's options) and the GEMM stages `f4pipe verify|splitk|bench`.

`gemm` runs one shape like the seed C++ driver: exit 0 if it passed (or ran with --no-verify),
1 if verification failed, 2 on an error (bad shape, missing kernel, no device). The stage
commands write one Parquet table each so Snakemake rules stay one line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from f4pipe.aiter.manifest import KernelEntry, Manifest, read_manifest
from f4pipe.cli import EXIT_ERROR, EXIT_FAILED, EXIT_OK, command_help
from f4pipe.cli.args import (
    add_artifact_keys,
    add_co_dir,
    add_device,
    add_json_flag,
    add_protocol,
    add_record,
    add_seed,
    add_store,
    add_table_output,
    add_workers,
    co_dir_from,
    parse_seed,
    protocol_from,
    write_if_asked,
)
from f4pipe.core.errors import ConfigError, HipVersionError, NoDeviceError
from f4pipe.core.fsio import check_writable, json_text
from f4pipe.core.layout import GEMM_STAGES, K_PADDINGS, NO_DEVICE, SCALE_PADDINGS
from f4pipe.host.benchprotocol import BENCH_ITERS
from f4pipe.host.matrices import MATRICES, STAGE_DEFAULT_MATRIX, get_matrix, parse_case
from f4pipe.pipeline.resultstore import open_store, reuse_line

if TYPE_CHECKING:
    from f4pipe.core.device import Device
    from f4pipe.host.gemm import GemmResult


PREFIX = "[f4gemm]"


# --- f4pipe gemm -------------------------------------------------------------------------------


def print_manifest(manifest: Manifest) -> None:
    print(f"{PREFIX} manifest {manifest.csv_path} ({len(manifest)} kernels)")
    print(f"{'tile_M':>6} {'tile_N':>6} {'splitK':>6} {'bpre':>4}  co_name / symbol")
    for e in manifest:
        print(
            f"{e.tile_m:>6} {e.tile_n:>6} {int(e.splitk):>6} {int(e.bpreshuffle):>4}  {e.co_name}"
        )
        print(f"{'':>27}{e.symbol}")


def edge_policy(args: argparse.Namespace) -> str:
    """--unsafe runs unsafe kernel/shape pairs as asked, --pad-output pads them; default
    refuse (f4pipe.aiter.shaperules)."""
    if args.unsafe and args.pad_output:
        raise ConfigError("--unsafe and --pad-output exclude each other")
    return "unsafe" if args.unsafe else "pad" if args.pad_output else "refuse"


def choose(
    manifest: Manifest, args: argparse.Namespace, num_cu: int
) -> tuple[KernelEntry, int, str]:
    """(kernel, log2_k_split, how it was chosen) as the seed driver does; the heuristic only
    considers kernels that are safe at the shape (or that --pad-output / --unsafe allow). A
    kernel named by --kernel is held against the shape by run_gemm (the one shape check)."""
    from f4pipe.aiter.heuristic import select_kernel

    policy = edge_policy(args)
    if args.kernel:
        entry = manifest.get(args.kernel)
        if args.splitk == -1 and entry.splitk:
            choice = select_kernel(
                [entry],
                args.m,
                args.n,
                k=args.k,
                bpreshuffle=entry.bpreshuffle,
                log2_k_split=-1,
                num_cu=num_cu,
                allow_unsafe=True,
            )
            return entry, choice.log2_k_split, "--kernel, split by heuristic"
        return entry, max(args.splitk, 0), "--kernel"
    choice = select_kernel(
        manifest,
        args.m,
        args.n,
        k=args.k,
        bpreshuffle=bool(args.bpreshuffle),
        log2_k_split=args.splitk,
        num_cu=num_cu,
        allow_unsafe=policy != "refuse",
    )
    return choice.entry, choice.log2_k_split, f"heuristic, num_cu={num_cu}"


def result_json(result: GemmResult) -> dict[str, Any]:
    v = result.verification
    return {
        "kernel": result.kernel,
        "M": result.m,
        "N": result.n,
        "K": result.k,
        "log2_k_split": result.log2_k_split,
        "gdz": result.gdz,
        "max_abs_err": None if v is None else v.max_abs_err,
        "max_rel_err": None if v is None else v.max_rel_err,
        "err_frac": None if v is None else v.err_frac,
        "passed": None if v is None else v.passed,
        "us": result.us,
        "tflops": result.tflops,
        "us_is_hardware": result.us_is_hardware,
        "device": result.device_id,
        "padding": result.padding,
        "races": result.races,
        "status": result.status,
        "hazards": result.hazards,
        "hazard": result.hazard_summary or None,
        "advisories": result.advisories,
    }


def timing_line(result: GemmResult) -> str:
    """The emulator's timing verdict in one line: hazards, else 'no hazards' (+ advisories)."""
    if result.hazards:
        return result.hazard_summary
    if result.advisories:
        return f"no hazards; {result.advisories} advisory: {result.advisory_summary}"
    return "no hazards (memory counters, LDS visibility, wait states)"


def print_result(result: GemmResult, device: Device) -> None:
    from f4pipe.host.gemm import SHIM_TIME_NOTE

    v = result.verification
    if v is None:
        print(f"{PREFIX} verification skipped (--no-verify)")
    else:
        print(
            f"{PREFIX} max_abs_err={v.max_abs_err:.6g} max_rel_err={v.max_rel_err:.6f} "
            f"err_frac={v.err_frac:.4%}"
        )
        # the criterion is per element, so the verdict line states it with its count
        print(
            f"{PREFIX} {'PASSED' if v.passed else 'FAILED'}: {v.bad} element(s) outside "
            f"|D - ref| <= atol + rtol*|ref| (atol={v.atol:.6g}, rtol={v.rtol})"
        )
    if result.races is not None:
        print(f"{PREFIX} races: {result.race_summary}")
    if result.hazards is not None:
        print(f"{PREFIX} timing: {timing_line(result)}")
        if result.hazards:
            print(f"{PREFIX} HAZARD (the values are right only in the emulator's schedule)")
    if result.us is not None and result.us_is_hardware:
        print(f"{PREFIX} time: {result.us:.1f} us, {result.tflops:.1f} TFLOP/s")
    elif result.us is not None:
        print(f"{PREFIX} time: {result.us:.1f} us on {device.device_id}: {SHIM_TIME_NOTE}")
    elif not device.can_time:
        print(f"{PREFIX} time: not measured: no gfx950 device ({device.device_id})")
    else:
        print(f"{PREFIX} time: not measured ({result.not_timed_reason})")


def release_k_tail_note(f4gemm_dir: Path, entry: KernelEntry, m: int, n: int, k: int) -> str:
    """For a K tail, the verdict under the fetched release's own scale padding (its host
    facts) before the padding this run uses; "" without a K tail."""
    from f4pipe.aiter.aiterdir import AiterDir
    from f4pipe.aiter.shaperules import k_tail, release_k_tail

    if not k_tail(k):
        return ""
    holder = AiterDir.holding(f4gemm_dir)
    facts = holder.host_facts() if holder is not None else None
    return "K tail under this release's host code: " + release_k_tail(entry, m, n, k, facts)


def run_gemm_command(args: argparse.Namespace) -> int:
    from f4pipe.aiter.shaperules import check_shape
    from f4pipe.devices.opendevice import open_device
    from f4pipe.host.gemm import GemmRequest, check_alpha, run_gemm

    if args.list:
        print_manifest(read_manifest(co_dir_from(args)))
        return EXIT_OK
    if args.iters < 0:
        raise ConfigError(f"--iters {args.iters} must be >= 0")
    # the shape alone, before a device opens; run_gemm holds it against the kernel's rules
    pads = {"scale_pad": args.scale_padding, "k_pad": args.k_padding}
    check_shape(args.m, args.n, args.k, args.splitk, **pads, auto_split=True)
    check_alpha(args.alpha)
    if args.kernel is not None and not args.kernel.strip():
        raise ConfigError("--kernel '': name a kernel (symbol, .co name or stem; see --list)")
    seed_a, seed_b = parse_seed(args.seed)
    policy = edge_policy(args)
    device = open_device(args.device, **emulator_options(args))
    try:
        manifest = read_manifest(co_dir_from(args))
        entry, log2, how = choose(manifest, args, device.num_cu)
        check_trace_wave(args, entry, log2)
        request = GemmRequest(
            args.m,
            args.n,
            args.k,
            log2,
            seed_a,
            seed_b,
            args.alpha,
            verify=not args.no_verify,
            iters=args.iters,
            edge_policy=policy,
            check_memory=not args.no_memory_check,
            scale_pad=args.scale_padding,
            k_pad=args.k_padding,
        )
        ignored = alpha_ignored(manifest.co_path(entry), entry.symbol, args.alpha)
        if not args.json:
            print(f"{PREFIX} device: {device.device_id} ({device.arch}, {device.num_cu} CUs)")
            print(f"{PREFIX} kernel: {entry.name} (tile {entry.tile_m}x{entry.tile_n}; {how})")
            if ignored:
                print(f"{PREFIX} note: {ignored}")
            release = release_k_tail_note(manifest.directory, entry, args.m, args.n, args.k)
            if release:
                print(f"{PREFIX} {release}")
        result = run_gemm(device, entry, manifest.co_path(entry), request)
        if result.padding and not args.json:
            print(f"{PREFIX} padded output: {result.padding}; D[:M, :N] returned")
    finally:
        device.close()
    if args.json:
        print(json_text({**result_json(result), "alpha_ignored": ignored or None}))
    else:
        g = result.geometry
        print(
            f"{PREFIX} M={args.m} N={args.n} K={args.k} log2_k_split={result.log2_k_split} "
            f"grid=({g.grid[0]},{g.grid[1]},{g.grid[2]}) block={g.block[0]} "
            f"seeds={seed_a},{seed_b}"
        )
        print_result(result, device)
    if result.races:
        return EXIT_FAILED  # stores of two workgroups to one address: hardware order decides
    return EXIT_FAILED if result.status in ("failed", "hazard") else EXIT_OK


def alpha_ignored(co_path: Path, symbol: str, alpha: float) -> str:
    """Why D cannot show an alpha other than 1 on this kernel ("" when it can or alpha is 1):
    most f4gemm kernels load the alpha kernarg and never read it (f4pipe.analysis.kernargs)."""
    if alpha == 1.0:
        return ""
    from f4pipe.analysis.kernargs import ignored_field
    from f4pipe.host.kernarg import KERNARG_BY_NAME

    offset = KERNARG_BY_NAME["alpha"].offset
    load = ignored_field(co_path, symbol, offset)
    if load is None:
        return ""
    return (
        f"this kernel ignores alpha: it loads kernarg {offset:#x} into {load.register} and no "
        f"instruction reads {load.register}, so D = A*B^T whatever --alpha says "
        "(aiter always passes 1.0); expect a failed verification at --alpha "
        f"{alpha:g}"
    )


def waves_per_workgroup() -> int:
    """Waves in one f4gemm workgroup (64 lanes each)."""
    from f4pipe.host.kernarg import BLOCK

    return BLOCK[0] // 64


def check_trace_wave(args: argparse.Namespace, entry: KernelEntry, log2_k_split: int) -> None:
    """--trace WAVE must name a wave of this launch, or the trace would be silently empty."""
    from f4pipe.host.kernarg import launch_geometry

    if args.trace is None:
        return
    grid = launch_geometry(entry.tile_m, entry.tile_n, args.m, args.n, args.k, log2_k_split).grid
    waves = grid[0] * grid[1] * grid[2] * waves_per_workgroup()
    if args.trace >= waves:
        raise ConfigError(
            f"--trace {args.trace}: this launch has {waves} waves (0..{waves - 1}) of "
            f"{entry.name} at M={args.m} N={args.n} K={args.k}"
        )


def emulator_options(args: argparse.Namespace) -> dict[str, Any]:
    """EmulatorDevice options from --trace / --trace-out / --workgroup-order."""
    if args.trace_out is not None and args.trace is None:
        raise ConfigError("--trace-out needs --trace WAVE")
    options: dict[str, Any] = {}
    if getattr(args, "no_hazard_check", False):
        options.update(check_hazards=False)
    if args.workgroup_order is not None:
        # one workgroup at a time, so that the order alone decides who stores last
        options.update(
            workgroup_order=args.workgroup_order, max_waves_per_batch=waves_per_workgroup()
        )
    if args.trace is not None:
        if args.device == "hip":
            raise ConfigError("--trace runs on the emulator only: use --device emulator")
        if args.trace < 0:
            raise ConfigError(f"--trace {args.trace}: a wave number is >= 0")
        if args.trace_out is not None:
            check_writable(args.trace_out, "--trace-out")
        options.update(trace_wave=args.trace, trace_out=args.trace_out or sys.stderr)
    return options


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Device, code objects, seeds and alpha: what `gemm` and the stage commands share."""
    add_device(p)
    add_co_dir(p)
    add_seed(p)
    p.add_argument("--alpha", type=float, default=1.0, help="output scale (default 1.0)")


def register_gemm(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "gemm",
        help=command_help("gemm"),
        description="Run one f4gemm kernel on a device: build random MXFP4 operands, launch, "
        "verify against the float64 CPU reference, and time on gfx950 hardware. On the "
        "emulator every launch is also checked for timing hazards (memory counters, LDS "
        "visibility, wait states). Exit 0 passed (or --no-verify), 1 verification failed or "
        "a hazard, 2 error.",
    )
    p.add_argument("-m", type=int, default=512, help="rows of A and D (default 512)")
    p.add_argument("-n", type=int, default=1024, help="rows of B, columns of D; N %% 16 == 0")
    p.add_argument(
        "-k",
        type=int,
        default=2048,
        help="reduction length; K %% 64 == 0 (K %% 256 != 0: see --scale-padding)",
    )
    p.add_argument(
        "--kernel", help="kernel by mangled symbol, .co name or stem (default: heuristic)"
    )
    p.add_argument(
        "--bpreshuffle",
        type=int,
        choices=(0, 1),
        default=1,
        help="heuristic picks among pre-shuffled-B (1, default) or plain-B (0) kernels",
    )
    p.add_argument(
        "--splitk",
        type=int,
        default=0,
        metavar="L",
        help="log2 of the K split (splitK kernels only; default 0); -1 lets the heuristic "
        "try 2/4/8/16",
    )
    p.add_argument(
        "--iters", type=int, default=50, help="timed launches on hardware (default 50; 0 = none)"
    )
    p.add_argument("--no-verify", action="store_true", help="skip the CPU reference check")
    p.add_argument("--list", action="store_true", help="print the manifest and exit")
    add_json_flag(p, "the result")
    p.add_argument(
        "--no-memory-check",
        action="store_true",
        help="run even if the buffers exceed the available host memory (default: refuse with "
        "the bytes needed and available)",
    )
    edge = p.add_argument_group("shape edges (f4pipe.aiter.shaperules; see `f4pipe safety`)")
    edge.add_argument(
        "--pad-output",
        action="store_true",
        help="run a kernel/shape pair the safety rules mark unsafe on padded buffers (padded "
        "N and D stride, D rows, slack after B) and return D[:M, :N]",
    )
    edge.add_argument(
        "--unsafe",
        action="store_true",
        help="run an unsafe kernel/shape pair as asked (to reproduce the safety table: wrong "
        "results, races or faults); exit 1 on a race the emulator records",
    )
    edge.add_argument(
        "--scale-padding",
        choices=SCALE_PADDINGS,
        default="driver",
        help="what the scale buffers' padding holds, read when K %% 256 != 0: driver = E8M0 "
        "1.0 (the C++ driver), zeros, arbitrary = uninitialised memory (aiter's torch.empty), "
        "modelled as seeded random bytes (default driver)",
    )
    edge.add_argument(
        "--k-padding",
        choices=K_PADDINGS,
        default="none",
        help="the A and B rows' own K padding: none = row stride K (the last K block reads "
        "the next row), zeros = rows padded with zeros to a multiple of 256 (default none)",
    )
    emu = p.add_argument_group("emulator")
    emu.add_argument(
        "--trace",
        type=int,
        metavar="WAVE",
        help="trace this wave (launch-order number) on the emulator: one line per instruction",
    )
    emu.add_argument(
        "--trace-out", type=Path, metavar="PATH", help="write the trace here (default stderr)"
    )
    emu.add_argument(
        "--no-hazard-check",
        action="store_true",
        help="skip the timing checks (s_waitcnt counters, LDS visibility, wait states) for "
        "speed: the verdict then covers values only",
    )
    emu.add_argument(
        "--workgroup-order",
        metavar="ORDER",
        help="run the emulator's workgroups one at a time in this order: in-order, reversed, "
        "shuffle:SEED (default: launch order, many workgroups in lockstep)",
    )
    add_run_args(p)
    p.set_defaults(func=run_gemm_command)


# --- f4pipe verify | splitk | bench ------------------------------------------------------------


def run_stage_command(args: argparse.Namespace) -> int:
    from f4pipe.cli.locate import artifact_keys, locate_co_dir
    from f4pipe.core.schemas import TABLE_SCHEMAS
    from f4pipe.devices.opendevice import open_device
    from f4pipe.host.gemm import check_alpha
    from f4pipe.pipeline.stages import NO_DEVICE_REASON, STAGES, StageSettings, gfx950_only

    check_alpha(args.alpha)  # before any row: a bad alpha is bad input, not an error row
    cases = tuple(parse_case(s) for s in args.shape) if args.shape else get_matrix(args.matrix)
    located = locate_co_dir(args.co_dir)
    manifest = read_manifest(located.co_dir)
    other_arch = gfx950_only(args.command, manifest)
    if other_arch is not None:
        print(other_arch)
        write_if_asked(args.output, [], TABLE_SCHEMAS[args.command])
        return EXIT_OK
    keys = artifact_keys(
        located,
        NO_DEVICE,
        aiter_id=args.aiter_id,
        toolchain_id=args.toolchain_id,
        toolchain_json=args.toolchain_json,
    )
    seed_a, seed_b = parse_seed(args.seed)
    device: Device | None
    reason = NO_DEVICE_REASON
    try:
        device = open_device(args.device, lazy=True)  # not imported if every run is reused
    except HipVersionError:
        raise  # a HIP runtime the installed hip-python does not match: fix the install (exit 2)
    except NoDeviceError as exc:
        detail = str(exc)
        reason = detail if detail.startswith(NO_DEVICE_REASON) else f"{NO_DEVICE_REASON}: {detail}"
        device = None
    protocol = None
    if args.command == "bench":
        protocol = protocol_from(args)
    settings = StageSettings(
        keys=keys,
        variant=args.variant,
        kernel=args.kernel,
        seed_a=seed_a,
        seed_b=seed_b,
        alpha=args.alpha,
        iters=args.iters,
        protocol=protocol,
        skip_reason=reason,
        store=open_store(getattr(args, "store", None)),
        workers=args.workers,
    )
    try:
        rows = STAGES[args.command](device, manifest, cases, settings)
    finally:
        if device is not None:
            device.close()
    written = write_if_asked(args.output, rows, TABLE_SCHEMAS[args.command])
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no runs"
    print(f"f4pipe {args.command}: {len(rows)} row(s){written} ({summary})")
    if settings.store is not None:
        print(reuse_line(args.command, rows, settings.store))
    for row in rows:
        if row["status"] in ("failed", "error"):
            print(
                f"  {row['status']}: {row['kernel']} M={row['m']} N={row['n']} K={row['k']} "
                f"log2_k_split={row['log2_k_split']} {row['reason']}"
            )
    if reason != NO_DEVICE_REASON:
        print(f"f4pipe {args.command}: {reason}", file=sys.stderr)
    if args.record:
        return EXIT_OK
    if counts.get("error"):
        # a case that could not be checked is no verdict: exit 2, the reasons are in the table
        print(
            f"f4pipe {args.command}: error: {counts['error']} case(s) could not run; their "
            f"reason column in {args.output} says why",
            file=sys.stderr,
        )
        return EXIT_ERROR
    return EXIT_FAILED if counts.get("failed") else EXIT_OK


def register_stage(subparsers: argparse._SubParsersAction, name: str) -> None:
    p = subparsers.add_parser(
        name,
        help=command_help(name),
        description=f"{command_help(name)}; writes one Parquet table (schema "
        f"f4pipe.core.schemas."
        f"{name.upper()}). Without a usable device every row is recorded as skipped with the "
        "reason. Exit 0 if every run passed or was skipped, 1 if one failed, 2 if one could "
        "not run (its row says why) or on bad input.",
    )
    p.add_argument(
        "--matrix",
        default=STAGE_DEFAULT_MATRIX[name],
        help=f"named shape matrix: {', '.join(MATRICES)} (default {STAGE_DEFAULT_MATRIX[name]})",
    )
    p.add_argument(
        "--shape",
        action="append",
        metavar="M,N,K[,L]",
        help="run these shapes (heuristic kernel) instead of --matrix; repeatable",
    )
    p.add_argument("--kernel", help="only runs of this kernel (symbol, .co name or stem)")
    p.add_argument("--variant", default="original", help="label: original, rebuilt, ...")
    add_artifact_keys(p)
    p.add_argument(
        "--iters",
        type=int,
        default=BENCH_ITERS,
        help=f"timed launches per case (bench; default {BENCH_ITERS})",
    )
    if name == "bench":
        add_protocol(p)
    add_record(p)
    add_table_output(p)
    if name != "bench":  # a throughput number is a measurement, never reused
        add_store(p)
    add_workers(p)
    add_run_args(p)
    p.set_defaults(func=run_stage_command)


def register(subparsers: argparse._SubParsersAction) -> None:
    register_gemm(subparsers)
    for name in GEMM_STAGES:
        register_stage(subparsers, name)
