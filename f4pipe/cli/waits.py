"""`f4pipe waits X.co | X.s`: the loosest correct s_waitcnt at every wait, the waits and s_nop a
kernel lacks, and the bookkeeping behind them (f4pipe.analysis.waits)."""

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
    toolchain_from_args,
)
from f4pipe.core.errors import InputError


def _program(args: argparse.Namespace, tmp: Path):
    """The kernel to analyse (an .s is assembled first) and the code object it lives in."""
    from f4pipe.codeobj.codeobject import CodeObject
    from f4pipe.codeobj.program import Program

    path = code_object_of(Path(args.kernel_file), tmp, args)
    symbols = [s.name for s in CodeObject.read(path).kernel_symbols()]
    if args.kernel:
        symbols = [s for s in symbols if args.kernel in s]
    if len(symbols) != 1:
        raise InputError(
            f"{args.kernel_file}: {len(symbols)} kernels match ({', '.join(symbols) or 'none'}); "
            "pick one with --kernel"
        )
    return Program.load(path, symbols[0]), path


def _manifest_entry(args: argparse.Namespace, symbol: str):
    """The f4gemm manifest row of `symbol` (needed to launch it), or an InputError."""
    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.cli.locate import locate_co_dir
    from f4pipe.core.errors import ManifestError

    why = "--verify" if args.verify else "--loosen" if args.loosen else "--apply"
    why += " runs the kernel on the emulator through the f4gemm host code"
    try:
        manifest = read_manifest(locate_co_dir(args.co_dir).co_dir)
    except ManifestError as e:
        hint = "" if args.verify or args.loosen else " (or pass --static-only)"
        raise ManifestError(f"{why}, which needs its manifest{hint}: {e}") from None
    entry = next((e for e in manifest if e.symbol == symbol), None)
    if entry is None:
        raise InputError(
            f"{why}, and {symbol} is not in the manifest of {manifest.csv_path}: pass --co-dir "
            "with its f4gemm directory"
        )
    return entry


def _repairs(program) -> tuple[list[str], list[dict]]:
    """What the kernel lacks today, as the fewest insertions (f4pipe.analysis.waits.repairs): a wait
    before the first reader of each unretired load on each path, an s_nop before each
    instruction too close to its producer (lines, JSON rows)."""
    from f4pipe.analysis.waits import repairs
    from f4pipe.edits.waitfix import nops, waitcnt_text

    lines, rows = [], []
    for r in repairs(program):
        if r.wait is not None:
            text = waitcnt_text(*r.wait)
            lines.append(f"MISSING `{text}` before pc {r.before_pc:#x}: {r.why[0]}")
            rows.append(
                {
                    "kind": "wait",
                    "before_pc": r.before_pc,
                    "insert": text,
                    "findings": list(r.why),
                }
            )
        if r.wait_states:
            text = "; ".join(nops(r.wait_states))
            lines.append(f"MISSING `{text}` before pc {r.before_pc:#x}: {r.why_states[0]}")
            rows.append(
                {
                    "kind": "s_nop",
                    "before_pc": r.before_pc,
                    "insert": text,
                    "findings": list(r.why_states),
                }
            )
    return lines, rows


def _explain(program, pc: int) -> list[str]:
    """The in-order bookkeeping at one pc: outstanding ops per counter in every state a path
    reaches it in, oldest first, and (at an s_waitcnt) which later instruction needs which."""
    from f4pipe.analysis.cfg import build_cfg
    from f4pipe.analysis.waits import advise_wait, states_by_pc

    cfg = build_cfg(program)
    if pc not in cfg.succ:
        raise InputError(f"--explain {pc:#x}: no reachable instruction starts there")
    model, at = states_by_pc(program, cfg)
    lines = [f"pc {pc:#x} `{model.text(pc)}`: reached in {len(at[pc])} state(s)"]
    for n, sid in enumerate(sorted(at[pc]), start=1):
        s = model.states[sid]
        lines.append(f"  state {n}:")
        for name, queue in (("vmcnt", s.vm), ("lgkmcnt (DS)", s.lds), ("lgkmcnt (SMEM)", s.smem)):
            if not queue:
                continue
            lines.append(f"    {name}: {len(queue)} outstanding, oldest first")
            for i, op in enumerate(queue):
                what = "a store" if op < 0 else f"pc {op & 0xFFFFFFFF:#x} `{model.text(op)}`"
                lines.append(f"      [{len(queue) - 1 - i} younger] {what}")
    if model.effects(pc).wait is not None:
        advice = advise_wait(program, cfg, pc, (model, at))
        lines.append(f"  {advice.render()}")
        for need in sorted(set(advice.needs), key=lambda x: (x.counter, x.younger)):
            lines.append(
                f"    {need.counter}: pc {need.consumer_pc:#x} `{model.text(need.consumer_pc)}` "
                f"needs pc {need.op_pc:#x} `{model.text(need.op_pc)}` ({need.younger} younger "
                "at this wait)"
            )
    return lines


#: Rounds of emulated runs, each adding the waits its hazards call for or at most one s_barrier
#: (before the first unordered LDS access the run met: ordering it usually orders the ones after
#: it too). A run names at most MAX_HAZARDS distinct hazards, so a kernel with every wait
#: dropped takes several rounds (256x256: six).
MAX_BARRIER_ROUNDS = 16


def cmd_apply(args: argparse.Namespace, program, co_path: Path, tmp: Path) -> int:
    """--apply -o Y.s: write the repaired (and with --loosen, loosened) assembly, then prove it:
    the static check finds nothing, and for an f4gemm kernel the emulator runs it clean."""
    from f4pipe.analysis.hazards import analyse
    from f4pipe.analysis.waits import repairs
    from f4pipe.codeobj.co2asm import co2asm
    from f4pipe.codeobj.program import Program
    from f4pipe.core.fsio import write_text
    from f4pipe.edits.waitcheck import first_problem, loosen_in_turn
    from f4pipe.edits.waitfix import apply_repairs

    if args.output is None:
        raise InputError("--apply writes a new assembly file: give -o Y.s")
    tc = toolchain_from_args(args)
    source = Path(args.kernel_file)
    asm = source.read_text() if source.suffix == ".s" else co2asm(co_path, tc)
    fixes = repairs(program)
    entry = _entry_to_run(args, program)
    loosened: dict = {}
    if args.loosen:
        if fixes:
            raise InputError(
                "--loosen starts from a kernel that misses nothing: run --apply without "
                "--loosen first, then --loosen on its output"
            )
        from f4pipe.edits.trykernel import open_devices

        (device,) = open_devices("emulator", True)
        try:
            loosened, _ = loosen_in_turn(entry, co_path, device, _cases(args, entry), tmp)
        finally:
            device.close()
    if entry is not None and not args.loosen:
        fixes = _with_barriers(args, entry, asm, program, fixes, tc, tmp)
    lines, changes = apply_repairs(asm.splitlines(), program, fixes, loosened)
    text = "\n".join(lines) + "\n"
    check = assemble_text(text, tmp / "applied.s", tc)
    left = analyse(Program.load(check, program.symbol))
    ran = ""
    if entry is not None:
        from f4pipe.edits.trykernel import open_devices

        (device,) = open_devices("emulator", True)
        try:
            ran = first_problem(device, entry, check, _cases(args, entry))
        finally:
            device.close()
    if left.count or ran:
        problem = left.wait_states + left.counters
        why = problem[0].hazard.message if problem else ran
        print(f"f4pipe waits: the repaired kernel still fails ({why}); nothing written")
        return EXIT_FAILED
    write_text(args.output, text)
    for c in changes:
        print(f"  {c}")
    if entry is not None and changes:
        from f4pipe.perf.predict import predicted_change

        print(f"  {predicted_change(entry, co_path, check).render()}")
    extra = f" and {len(args.case)} --case shape(s)" if args.case else ""
    extra += ", the seed's every-kernel shape and the safety sweep's" if args.thorough else ""
    runs = f"; the emulator runs it clean at try's shapes{extra}" if entry is not None else ""
    if args.static_only:
        runs = f"; {STATIC_ONLY_NOTE}"
    print(
        f"f4pipe waits: {len(changes)} change(s) -> {args.output}: 0 static findings{runs}"
        + ("" if changes else " (nothing to change)")
    )
    return EXIT_OK


def _with_barriers(args, entry, asm: str, program, fixes: list, tc, tmp: Path) -> list:
    """`fixes` plus the fewest s_barrier (each after a wait) that order every LDS access the
    emulator finds unordered with another wave's (a dropped barrier: which words two waves
    share is data, so only a run shows it): one round at a time on the repaired kernel, a
    barrier before the first such access the run met, until a run finds none."""
    from f4pipe.codeobj.program import Program
    from f4pipe.edits.trykernel import open_devices
    from f4pipe.edits.waitcheck import lds_order_hazards
    from f4pipe.edits.waitfix import apply_repairs, original_pcs

    original = asm.splitlines()
    (device,) = open_devices("emulator", True)
    try:
        for step in range(MAX_BARRIER_ROUNDS):
            lines, _ = apply_repairs(original, program, fixes)
            path = tmp / f"barriers-{step}.s"
            co = assemble_text("\n".join(lines) + "\n", path, tc)
            hazards = lds_order_hazards(device, entry, co, _cases(args, entry))
            if not hazards:
                break
            ran = Program.load(co, program.symbol)
            to_pc = original_pcs(lines, ran, original, program)
            fixes = fixes + _next_lds_repairs(ran, hazards, program, to_pc.__getitem__)
    finally:
        device.close()
    return fixes


def _next_lds_repairs(ran, hazards: list, edited, to_pc) -> list:
    """One round's repairs, waits before new barriers: vmcnt waits before the wave's own DS
    accesses of its LDS DMA's bytes, and waits before the barrier another wave's op was not
    retired at; only when there are none, a new s_barrier before the first access still
    unordered."""
    from f4pipe.analysis.waits import barrier_repairs, barrier_wait_repairs, dma_wait_repairs

    waits = dma_wait_repairs(ran, hazards, to_pc) + barrier_wait_repairs(
        ran, hazards, edited, to_pc
    )
    return waits or barrier_repairs(ran, [h for h in hazards if h.across_waves][:1], to_pc)


def assemble_text(text: str, path: Path, tc) -> Path:
    from f4pipe.codeobj.assemble import assemble

    path.write_text(text)
    return assemble(path, path.with_suffix(".co"), tc)


def _cases(args: argparse.Namespace, entry) -> list:
    """The launches a loosening or repair must run clean: `try`'s quick shapes (with
    --thorough, also the seed's every-kernel shape and the safety sweep's), plus --case."""
    from f4pipe.edits.trykernel import quick_cases, thorough_cases
    from f4pipe.host.matrices import Case, parse_case

    cases = thorough_cases(entry) if args.thorough else quick_cases(entry)
    extra = [parse_case(text) for text in args.case]
    return cases + [Case(c.m, c.n, c.k, c.log2_k_split, entry.name) for c in extra]


#: What --static-only leaves unproven, said wherever such a repair is written.
STATIC_ONLY_NOTE = (
    "STATIC ONLY (--static-only): LDS visibility between waves was not checked (no emulated "
    "run); run again with --co-dir to check it"
)


def is_f4gemm_symbol(symbol: str) -> bool:
    """An f4gemm kernel by its name (plain or Itanium-mangled `aiter::f4gemm_...`): such a
    kernel shares LDS between waves, which only an emulated launch checks."""
    return symbol.startswith("f4gemm_") or ("aiter" in symbol and "f4gemm_" in symbol)


def _entry_to_run(args: argparse.Namespace, program):
    """The manifest row an --apply must run on the emulator, or None when it runs nothing:
    a kernel that is not an f4gemm one (nothing to launch it with), or --static-only. An f4gemm
    kernel with no manifest reachable is an InputError naming --co-dir: a repair written
    unchecked would claim what nobody checked."""
    if args.static_only:
        if args.loosen:
            raise InputError(
                "--loosen relaxes waits only as far as the emulator confirms, so it cannot be "
                "--static-only: drop --static-only and pass --co-dir with the f4gemm directory"
            )
        return None
    if args.loosen or is_f4gemm_symbol(program.symbol):
        return _manifest_entry(args, program.symbol)
    return None


def cmd_waits(args: argparse.Namespace) -> int:
    from f4pipe.analysis.hazards import analyse
    from f4pipe.analysis.waits import advise

    with tempfile.TemporaryDirectory(prefix="f4pipe-waits-") as tmp:
        if args.static_only and not args.apply:
            raise InputError("--static-only qualifies --apply: add --apply -o Y.s")
        program, co_path = _program(args, Path(tmp))
        if args.apply or args.loosen:
            return cmd_apply(args, program, co_path, Path(tmp))
        if args.explain is not None:
            print("\n".join(_explain(program, int(args.explain, 0))))
            return EXIT_OK
        missing, missing_rows = _repairs(program)
        findings = analyse(program).messages()
        advice = advise(program) if not missing else []
        verified: dict = {}
        predicted: dict = {}
        if args.verify and advice:
            from f4pipe.edits.trykernel import open_devices
            from f4pipe.edits.waitcheck import verify_loosening

            entry = _manifest_entry(args, program.symbol)
            (device,) = open_devices("emulator", True)
            try:
                for v in verify_loosening(entry, co_path, advice, device, _cases(args, entry)):
                    verified[v.pc] = v
            finally:
                device.close()
            predicted = _predicted_savings(entry, co_path, verified)
    if args.json:
        print(
            json.dumps(
                _json(program.symbol, findings, missing_rows, advice, verified, predicted),
                indent=1,
            )
        )
    else:
        _print(program.symbol, len(findings), missing, advice, verified, predicted, args.verify)
    return EXIT_FAILED if missing else EXIT_OK


def _predicted_savings(entry, co_path: Path, verified: dict) -> dict[int, tuple[float, float]]:
    """Per confirmed loosening, the cycle model's workgroup cycles at K=2048 before and after
    (f4pipe.perf; PREDICTED)."""
    from f4pipe.perf.predict import wait_change_cycles
    from f4pipe.perf.profile import KernelProfile

    profile = KernelProfile(entry, co_path)
    return {
        pc: wait_change_cycles(profile, {pc: v.confirmed})
        for pc, v in verified.items()
        if v.confirmed != v.actual
    }


def _json(symbol, findings, missing_rows, advice, verified, predicted) -> dict:
    return {
        "kernel": symbol,
        "findings": findings,
        "missing": missing_rows,
        "waits": [
            {
                "pc": a.pc,
                "text": a.text,
                "vmcnt": a.actual[0],
                "lgkmcnt": a.actual[1],
                "loosest_vmcnt": a.loosest[0],
                "loosest_lgkmcnt": a.loosest[1],
                "lds_dma_released": a.dma_released,
                "verified_vmcnt": verified[a.pc].confirmed[0] if a.pc in verified else None,
                "verified_lgkmcnt": verified[a.pc].confirmed[1] if a.pc in verified else None,
                "refused": verified[a.pc].refused if a.pc in verified else "",
                "predicted_cycles_k2048": list(predicted[a.pc]) if a.pc in predicted else None,
            }
            for a in advice
        ],
    }


def _print(symbol, findings: int, missing, advice, verified, predicted, verify: bool) -> None:
    stricter = [a for a in advice if a.stricter]
    print(
        f"f4pipe waits: {symbol}: {findings} static finding(s) (those of `f4pipe hazards`); "
        f"{len(missing)} missing wait(s) or wait state(s); "
        f"{len(advice)} s_waitcnt, {len(stricter)} stricter than the registers need"
    )
    for line in missing:
        print(f"  {line}")
    for a in advice:
        print(f"  {a.render()}")
        v = verified.get(a.pc)
        if v is not None:
            looser = v.confirmed != v.actual
            what = (
                f"emulated: vmcnt({v.confirmed[0]}) lgkmcnt({v.confirmed[1]}) runs clean"
                if looser
                else "emulated: no looser wait runs clean"
            )
            print(f"    {what}" + (f"; looser: {v.refused}" if v.refused else ""))
        if a.pc in predicted:
            before, after = predicted[a.pc]
            print(
                f"    PREDICTED (cycle model, not measured): {before:.0f} -> {after:.0f} clk per "
                f"workgroup at K=2048 ({(after / before - 1) * 100:+.2f} %)"
            )
    if stricter and not verify:
        print(
            "f4pipe waits: the advice covers registers on every path; LDS written by LDS DMA "
            "and ds_write is read by other waves at addresses that are data: --verify runs "
            "each loosening on the emulator"
        )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "waits",
        help=command_help("waits"),
        description="For every s_waitcnt of a gfx950 kernel, the loosest vmcnt and lgkmcnt "
        "that keep every later read (or overwrite) of a load's registers correct on every path "
        "(counters retire in order; loops iterated to a fixed point; the kernel's other waits "
        "as they are), beside the actual counts; every wait and s_nop the kernel lacks. "
        "--verify runs each loosening on the emulator (f4gemm kernels), which also checks LDS "
        "between waves; --explain PC writes out the bookkeeping at one instruction. Exit 0 "
        "nothing missing, 1 a wait or wait state missing, 2 error.",
    )
    p.add_argument("kernel_file", help=KERNEL_FILE_HELP)
    p.add_argument("--kernel", help="the kernel whose symbol contains this (several in one file)")
    p.add_argument(
        "--verify",
        action="store_true",
        help="launch each loosening alone on the emulator at `try`'s quick shapes and keep the "
        "loosest that runs clean (needs the kernel's f4gemm manifest: --co-dir)",
    )
    p.add_argument(
        "--explain",
        metavar="PC",
        help="the outstanding ops at PC (hex or decimal), oldest first, in every state a path "
        "reaches it in, and at an s_waitcnt which later instruction needs which op",
    )
    p.add_argument(
        "--apply",
        action="store_true",
        help="write the kernel (-o Y.s) with every missing wait and wait state inserted right "
        "before the instruction that needs it (loosest counts, fewest s_nop; each line "
        "commented); it must pass the static check, and an f4gemm kernel the emulator too "
        "(its manifest: --co-dir), or nothing is written (--static-only: no emulator)",
    )
    p.add_argument(
        "--loosen",
        action="store_true",
        help="with --apply: also relax every wait, one at a time, to the loosest the emulator "
        "confirms (needs the f4gemm manifest: --co-dir)",
    )
    p.add_argument(
        "--static-only",
        action="store_true",
        help="with --apply on an f4gemm kernel: write the repair the static check passes "
        "without running the emulator (no manifest needed); LDS visibility between waves is "
        "then not checked, and the output says so",
    )
    p.add_argument("-o", "--output", type=Path, help="the .s --apply writes")
    p.add_argument(
        "--thorough",
        action="store_true",
        help="emulated checks also run the seed driver's every-kernel shape (M=300 N=2048 "
        "K=1024) and every shape of the shape-edge safety sweep (minutes per kernel)",
    )
    p.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="M,N,K[,L]",
        help="also launch this shape (L: log2 of the K split) when --verify, --loosen or "
        "--apply runs the kernel on the emulator (repeatable; default: try's quick shapes only)",
    )
    add_co_dir(p)
    add_toolchain_args(p)
    add_json_flag(p, "the advice")
    p.set_defaults(func=cmd_waits)
