"""Wait changes confirmed by emulated launches: each looser `s_waitcnt` tried alone on the
emulator (the static analysis, f4pipe.analysis.waits, cannot see LDS order between waves), and
the first hazard or wrong result an edited kernel shows. `f4pipe waits --verify / --loosen /
--apply` ask these questions; the analysis itself runs no kernel."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from f4pipe.analysis.cfg import build_cfg
from f4pipe.analysis.timing import Hazard
from f4pipe.analysis.waits import (
    BARRIER_RULES,
    WaitAdvice,
    advise_wait,
    patch_waits,
    states_by_pc,
    wait_pcs,
)
from f4pipe.codeobj.program import Program
from f4pipe.core.errors import DeviceError
from f4pipe.host.gemm import GemmRequest, run_gemm

if TYPE_CHECKING:
    from f4pipe.aiter.manifest import KernelEntry
    from f4pipe.core.device import Device


@dataclass(frozen=True)
class Verified:
    """A wait's loosening as emulated launches confirmed it: the limits that ran clean, and
    why a looser one did not (the first hazard or wrong result, "" if none was refused)."""

    pc: int
    actual: tuple[int, int]
    confirmed: tuple[int, int]
    refused: str = ""


def verify_loosening(
    entry: KernelEntry, co_path: Path, advice: list[WaitAdvice], device: Device, cases
) -> list[Verified]:
    """Each looser wait alone, on emulated launches of `cases` (f4pipe.edits.trykernel.Case): the
    static limits when they run clean, else the loosest clean ones found by bisection on each
    counter (the emulator also checks LDS between waves, which the static analysis cannot)."""
    out = []
    tries = iter(range(1 << 30))
    with tempfile.TemporaryDirectory(prefix="f4pipe-waits-") as tmp:
        for a in advice:
            if a.loosest == a.actual or not a.stricter:
                continue

            def runs_clean(limits: tuple[int, int], a=a) -> str:
                # a new file each time: devices cache loaded kernels by path
                patched = Path(tmp) / f"{next(tries)}-{co_path.name}"
                patch_waits(co_path, patched, {a.pc: limits})
                return first_problem(device, entry, patched, cases)

            vm, lgkm = a.loosest
            why = runs_clean((vm, lgkm))
            if not why:
                out.append(Verified(a.pc, a.actual, a.loosest))
                continue
            vm = _bisect(a.actual[0], vm, lambda v, a=a: not runs_clean((v, a.actual[1])))
            lgkm = _bisect(a.actual[1], lgkm, lambda g, vm=vm: not runs_clean((vm, g)))
            out.append(Verified(a.pc, a.actual, (vm, lgkm), why))
    return out


def _bisect(lo: int, hi: int, clean) -> int:
    """The largest value in [lo, hi] for which clean() holds (clean(lo) is assumed)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if clean(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def first_problem(device: Device, entry: KernelEntry, co_path: Path, cases) -> str:
    for case in cases:
        request = GemmRequest(case.m, case.n, case.k, case.log2_k_split, edge_policy="pad")
        try:
            result = run_gemm(device, entry, co_path, request)
        except DeviceError as exc:
            return f"M={case.m} N={case.n} K={case.k}: fault: {exc}"
        if result.hazards:
            return f"M={case.m} N={case.n} K={case.k}: {result.hazard_summary}"
        if result.verification is not None and not result.verification.passed:
            return f"M={case.m} N={case.n} K={case.k}: D is wrong"
    return ""


def lds_order_hazards(device: Device, entry: KernelEntry, co_path: Path, cases) -> list[Hazard]:
    """The LDS ordering hazards emulated launches of `cases` report: between waves (a
    missing s_barrier) and within a wave (a DS access before its own LDS DMA landed)."""
    found: dict[tuple, Hazard] = {}
    for case in cases:
        request = GemmRequest(case.m, case.n, case.k, case.log2_k_split, edge_policy="pad")
        result = run_gemm(device, entry, co_path, request)
        report = result.launch.hazards if result.launch is not None else None
        for h in report.hazards if report is not None else []:
            if h.rule in BARRIER_RULES and not h.advisory:
                found.setdefault(h.key(), h)
    return list(found.values())


def loosen_in_turn(
    entry: KernelEntry, co_path: Path, device: Device, cases, work_dir: Path
) -> tuple[dict[int, tuple[int, int]], Path]:
    """Every wait loosened as far as the emulator confirms, one at a time in pc order, each
    on top of the ones before (loosening two waits at once is another question than loosening
    each): the new limits by pc, and the code object with all of them."""
    current = co_path
    done: dict[int, tuple[int, int]] = {}
    program = Program.load(current, entry.symbol)
    cfg = build_cfg(program)
    for step, pc in enumerate(wait_pcs(program, cfg)):
        program = Program.load(current, entry.symbol)
        advice = advise_wait(program, cfg, pc, states_by_pc(program, cfg))
        (v,) = verify_loosening(entry, current, [advice], device, cases) or [None]
        if v is None or v.confirmed == v.actual:
            continue
        nxt = work_dir / f"loosened-{step}-{co_path.name}"
        patch_waits(current, nxt, {pc: v.confirmed})
        current, done[pc] = nxt, v.confirmed
    return done, current
