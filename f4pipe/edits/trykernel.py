"""`f4pipe try`: the hand-editing loop in one command (assemble, diff, check, run, verdict).

An edit is assembled, diffed against its original, statically checked against its descriptor
and, only if that is clean, run at a few quick shapes chosen to exercise the code paths an edit
most easily breaks: a full tile next to an M edge tile (one valid row), two K steps, and for
splitK kernels a split launch. (No N edge: several unedited originals fail N % tile_n != 0 on
the emulator as of this writing, and the quick set must judge the edit, not that question;
`--shape` runs any shape, and a failing run says whether the original fails there too.)
Runs use the same host code as every other stage (f4pipe.host.gemm.run_gemm) on the emulator and,
when one answers, on a gfx950 GPU. A failing run
names its first wrong element (row, column, expected, got) by the verification criteria of
f4pipe.host.verify; a passing one also says whether the output is bit-identical to the original's
(an edit meant to keep semantics should be). On the emulator every run is also checked for
timing hazards (f4pipe.analysis.timing: s_waitcnt counters, LDS visibility between waves, wait
states): an edit whose values come out right only because the emulator completes memory at
issue fails as `hazard`, naming both instructions and the rule. Because a launch only covers
the path it takes, the edit's code is also checked statically over every path of its control
flow (f4pipe.analysis.hazards); a finding the original does not have fails the edit too.
"""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from f4pipe.aiter.manifest import KernelEntry
from f4pipe.arch.gfx950 import Occupancy
from f4pipe.codeobj.sourcemap import Locator
from f4pipe.codeobj.toolchain import Toolchain
from f4pipe.core.device import Device
from f4pipe.core.errors import DeviceError, EmulatorError, HipVersionError, NoDeviceError
from f4pipe.core.layout import EMULATOR_DEVICE_ID, SEED_A, SEED_B
from f4pipe.devices.opendevice import open_device
from f4pipe.edits import PreparedEdit, prepare_edit
from f4pipe.edits.baseline import has_original_output, original_findings, original_output
from f4pipe.edits.resources import FLAG as FIT_FLAG
from f4pipe.edits.resources import occupancy_of
from f4pipe.edits.verdict import (
    StaticVerdict,
    counts_legend,
    first_count,
    new_timing_findings,
    timing_findings,
)
from f4pipe.host.gemm import GemmRequest, GemmResult, run_gemm
from f4pipe.host.matrices import Case
from f4pipe.host.operands import generate_operand
from f4pipe.host.reference import reference_gemm
from f4pipe.host.verify import bad_mask

if TYPE_CHECKING:
    from f4pipe.perf.predict import PredictedChange

#: K of the quick shapes: four 256-wide K steps, so every body of the kernels' 4x-unrolled
#: main loops runs at least once (a timing fault in a body that never runs cannot show).
QUICK_K = 1024


def quick_cases(entry: KernelEntry) -> list[Case]:
    """The shapes `try` runs: M one past a tile (a full tile and a one-row edge tile), and for
    splitK kernels the same with a 2-way split of K."""
    cases = [Case(entry.tile_m + 1, entry.tile_n, QUICK_K, 0, entry.name)]
    if entry.splitk:
        cases.append(Case(entry.tile_m + 1, entry.tile_n, 2 * QUICK_K, 1, entry.name))
    return cases


def thorough_cases(entry: KernelEntry) -> list[Case]:
    """The quick shapes plus the seed driver's every-kernel shape and every shape of the
    shape-edge safety sweep (f4pipe.pipeline.edgesweep): what an edit that loosens the kernel's own
    synchronisation must survive (minutes per kernel on the emulator)."""
    from f4pipe.host.matrices import SEED_ALL_KERNELS
    from f4pipe.pipeline.edgesweep import edge_shapes

    cases = quick_cases(entry)
    cases += [Case(c.m, c.n, c.k, c.log2_k_split, entry.name) for c in SEED_ALL_KERNELS]
    cases += [Case(s.m, s.n, s.k, 0, entry.name) for s in edge_shapes(entry)]
    return cases


@dataclass(frozen=True)
class WrongElement:
    row: int
    col: int
    expected: float
    got: float

    def render(self) -> str:
        return f"D[{self.row},{self.col}] expected {self.expected:.6g}, got {self.got:.6g}"


@dataclass(frozen=True)
class TryRun:
    """One launch of the edit: its verdict and, when wrong, the first wrong element."""

    device_id: str
    case: Case
    status: str  # passed | failed | hazard | fault
    bad: int = 0
    elements: int = 0
    first_wrong: WrongElement | None = None
    message: str = ""  # the device's fault message
    identical: bool | None = None  # output bit-identical to the original's (None: not compared)
    original_fails: bool | None = None  # on a failed run: does the original fail here too?
    seconds: float = 0.0

    def render(self, where_in: Locator | None = None) -> str:
        """The run in one line; `where_in` renders the pcs a hazard names as .s lines."""
        if self.status == "hazard" and where_in is not None:
            return replace(self, message=where_in.locate(self.message)).render()
        where = f"{self.device_id} {self.case.label()}"
        also = " (the original fails here too: not the edit's doing)" if self.original_fails else ""
        if self.status == "fault":
            return f"{where}: device fault{also}: {self.message}"
        if self.status == "hazard":
            return f"{where}: {self.message}"
        if self.status == "failed":
            assert self.first_wrong is not None
            return (
                f"{where}: {self.bad} of {self.elements} elements wrong, first "
                f"{self.first_wrong.render()}{also}"
            )
        same = {True: ", bit-identical to the original", False: ", differs from the original"}
        return f"{where}: passed{same.get(self.identical, '')} ({self.seconds:.2f} s)"


@dataclass
class TryResult:
    """What `try` found. prepared.co_path exists afterwards only if `out_co` was given.

    static_hazards: timing findings of the edit over all paths (f4pipe.analysis.hazards) that the
    original does not have."""

    prepared: PreparedEdit
    runs: list[TryRun] = field(default_factory=list)
    seconds: float = 0.0
    static_hazards: list[str] = field(default_factory=list)
    predicted: PredictedChange | None = None  # the cycle model's before / after (f4pipe.perf)
    predicted_error: str = ""  # why there is no prediction
    hazards_checked: bool = True
    #: The waits `f4pipe waits --apply` would insert (static repairs), when timing failed.
    repair: list[str] = field(default_factory=list)
    #: Occupancy of the original and the edit, by their descriptors (the model sees neither).
    occupancy: tuple[Occupancy, Occupancy] | None = None

    @property
    def where(self) -> Locator:
        return self.prepared.diff.edited.locator

    def static_verdict(self) -> StaticVerdict:
        """The static verdict `try` prints and writes to its .diff.txt (f4pipe.edits.verdict)."""
        return StaticVerdict(
            tuple(self.prepared.findings),
            tuple(self.static_hazards),
            self.where,
            timing_skipped="" if self.hazards_checked else "--no-hazard-check",
        )

    @property
    def timing_failed(self) -> bool:
        return bool(self.static_hazards) or any(r.status == "hazard" for r in self.runs)

    def counts_line(self) -> str:
        """What the static check's, the run's and the repair's counts each answer (one line,
        only when they differ)."""
        run = [r.message for r in self.runs if r.status == "hazard"][:1]
        repair = "`, `".join(w for w in self.repair if w.startswith("s_waitcnt"))
        return counts_legend(first_count(self.static_hazards), first_count(run), repair)

    def speed_line(self) -> str:
        """The prediction; where the edit changes occupancy, which the cycle model does not
        see (it replays one workgroup's waves on one CU), that is said instead of a
        percentage that leaves it out."""
        if self.predicted is None:
            return self.predicted_error
        if self.occupancy is not None and self.occupancy[0] != self.occupancy[1]:
            (c0, c1), (b, a) = self.predicted.loop_cycles, self.occupancy
            return (
                "the cycle model does not see occupancy, which this edit changes ("
                f"{b.workgroups_per_cu} -> {a.workgroups_per_cu} workgroups per CU, "
                f"{b.waves_per_simd} -> {a.waves_per_simd} waves per SIMD): it replays one "
                f"workgroup's waves on a CU, so its main loop {c0:.0f} -> {c1:.0f} clk per 256 "
                "of K (PREDICTED) leaves that out; time it on an MI355X"
            )
        return self.predicted.render()

    @property
    def passed(self) -> bool:
        return (
            not self.prepared.findings
            and not self.static_hazards
            and all(r.status == "passed" for r in self.runs)
        )

    def verdict_line(self) -> str:
        p = self.prepared
        what = f"{p.asm_path.name} ({p.entry.name})"
        took = f"({self.seconds:.1f} s)"
        registers = list(dict.fromkeys(f.register for f in p.findings if f.register))
        if registers:
            first = next(f for f in p.findings if f.register)
            shown = ", ".join(registers[:8]) + (
                f" (+{len(registers) - 8} more)" * (len(registers) > 8)
            )
            return (
                f"FAIL {what}: registers beyond its descriptor: {shown} (first at "
                f"{first.where}); pass {FIT_FLAG} to size the descriptor and metadata to the "
                f"code -- not run {took}"
            )
        if p.findings:
            return (
                f"FAIL {what}: static checks: {len(p.findings)} finding(s), first: "
                f"{p.findings[0].render()} -- not run {took}"
            )
        bad = [r for r in self.runs if r.status != "passed"]
        if bad:
            return f"FAIL {what}: {bad[0].render(self.where)} {took}"
        if self.static_hazards:
            more = len(self.static_hazards) - 1
            return (
                f"FAIL {what}: on a path the runs did not take: "
                f"{self.where.locate(self.static_hazards[0])}"
                f"{f' (+{more} more)' if more else ''} {took}"
            )
        devices = ", ".join(dict.fromkeys(r.device_id for r in self.runs))
        ident = [r.identical for r in self.runs]
        same = (
            "; output bit-identical to the original"
            if ident and all(ident)
            else "; output differs from the original (within tolerance)"
            if any(i is False for i in ident)
            else ""
        )
        return (
            f"PASS {what}: {len(self.runs)}/{len(self.runs)} runs passed on {devices}{same} {took}"
        )


def open_devices(kind: str, check_hazards: bool = True) -> list[Device]:
    """`auto`: the emulator, plus a gfx950 GPU when one answers; else just the one asked for."""
    options = {"check_hazards": check_hazards}
    if kind != "auto":
        return [open_device(kind, **options)]
    devices = [open_device("emulator", **options)]
    try:
        devices.append(open_device("hip"))
    except HipVersionError:
        raise  # a HIP runtime that the installed hip-python does not match: fix the install
    except NoDeviceError:
        pass  # no GPU here: the emulator alone decides
    return devices


def first_wrong_element(
    result: GemmResult, request: GemmRequest
) -> tuple[int, WrongElement | None]:
    """(number of bad elements, the first in row-major order) by f4pipe.host.verify's criterion,
    against the reference recomputed from the same seeds."""
    a = generate_operand(request.m, request.k, request.seed_a, request.distribution)
    b = generate_operand(request.n, request.k, request.seed_b, request.distribution)
    ref = reference_gemm(a, b, request.alpha)
    mask = bad_mask(result.d, ref, result.gdz)
    where = np.argwhere(mask)
    if not len(where):
        return 0, None
    r, c = (int(x) for x in where[0])
    return int(mask.sum()), WrongElement(r, c, float(ref[r, c]), float(result.d[r, c]))


def run_case(
    device: Device,
    prepared: PreparedEdit,
    case: Case,
    *,
    seed_a: int = SEED_A,
    seed_b: int = SEED_B,
    baseline: bool = True,
) -> TryRun:
    """Run the edit once; on a pass, optionally run the original for the bit-identity check.

    A quick shape that is an unsafe edge for the kernel (noBpreShuffle's M edge) runs on
    f4pipe.aiter.shaperules's padded buffers: `try` judges the edit's arithmetic, not the edge."""
    request = _request(case, seed_a, seed_b)
    start = time.perf_counter()
    try:
        result = run_gemm(device, prepared.entry, prepared.co_path, request)
    except DeviceError as exc:
        return TryRun(
            device.device_id,
            case,
            "fault",
            message=str(exc),
            original_fails=_original_fails(device, prepared, request) if baseline else None,
        )
    v = result.verification
    assert v is not None
    elements = case.m * case.n
    if not v.passed:
        bad, first = first_wrong_element(result, request)
        original_fails = _original_fails(device, prepared, request) if baseline else None
        return TryRun(
            device.device_id,
            case,
            "failed",
            bad=bad,
            elements=elements,
            first_wrong=first,
            original_fails=original_fails,
            seconds=time.perf_counter() - start,
        )
    if result.hazards:
        return TryRun(
            device.device_id,
            case,
            "hazard",
            elements=elements,
            message=result.hazard_summary,
            seconds=time.perf_counter() - start,
        )
    identical = None
    if baseline:
        original = _original_output(device, prepared, replace(request, verify=False))
        identical = bool(np.array_equal(result.d, original, equal_nan=True))
    return TryRun(
        device.device_id,
        case,
        "passed",
        elements=elements,
        identical=identical,
        seconds=time.perf_counter() - start,
    )


def _request(case: Case, seed_a: int, seed_b: int) -> GemmRequest:
    """A quick case's launch; an unsafe edge runs on padded buffers (see run_case)."""
    return GemmRequest(case.m, case.n, case.k, case.log2_k_split, seed_a, seed_b, edge_policy="pad")


def _baseline_ahead(
    prepared: PreparedEdit, cases: list[Case], device: str, options: dict
) -> multiprocessing.process.BaseProcess | None:
    """A forked process that computes the original's emulated outputs at `cases` into the
    baseline cache while this one checks the edit statically and predicts it (the first
    `try` on a kernel: the two take about as long, and a machine has a core to spare); None
    when they are kept already, no emulator runs or the platform cannot fork. Whatever it
    leaves undone the run computes itself."""
    if device not in ("auto", "emulator") or "fork" not in multiprocessing.get_all_start_methods():
        return None
    requests = [
        replace(_request(c, options["seed_a"], options["seed_b"]), verify=False) for c in cases
    ]
    symbol = prepared.entry.symbol
    if all(has_original_output(prepared.original_co, symbol, r) for r in requests):
        return None
    child = multiprocessing.get_context("fork").Process(
        target=_compute_baseline,
        args=(prepared, requests, options["check_hazards"]),
        daemon=True,
    )
    child.start()
    return child


def _compute_baseline(prepared: PreparedEdit, requests: list[GemmRequest], hazards: bool) -> None:
    """In the forked process: the original's outputs, kept; silent (the parent reports)."""
    try:
        device = open_device("emulator", check_hazards=hazards)
        try:
            for request in requests:
                _original_output(device, prepared, request)
        finally:
            device.close()
    except Exception:  # the parent runs what is missing and reports its errors
        pass


def new_static_hazards(prepared: PreparedEdit) -> list[str]:
    """Static timing findings of the edit (all paths), in `f4pipe hazards`' order, less those
    its original has (f4pipe.edits.verdict; the original's kept between commands)."""
    symbol = prepared.entry.symbol
    kept = original_findings(
        prepared.original_co, symbol, lambda: timing_findings(prepared.original_co, symbol)
    )
    return new_timing_findings(timing_findings(prepared.co_path, symbol), kept)


def repair_waits(prepared: PreparedEdit) -> list[str]:
    """The lines `f4pipe waits --apply` inserts from the static analysis (before any emulated
    round), for saying what the repair's counts answer."""
    from f4pipe.analysis.waits import repairs
    from f4pipe.codeobj.program import Program
    from f4pipe.edits.waitfix import nops, waitcnt_text

    out: list[str] = []
    for r in repairs(Program.load(prepared.co_path, prepared.entry.symbol)):
        if r.wait is not None:
            out.append(waitcnt_text(*r.wait))
        out += nops(r.wait_states)
    return out


def _original_output(device: Device, prepared: PreparedEdit, request: GemmRequest) -> np.ndarray:
    """The unedited original's D at `request`; on the emulator kept between commands
    (f4pipe.edits.baseline): a repeated `try` runs only the edit."""

    def run() -> np.ndarray:
        return run_gemm(device, prepared.entry, prepared.original_co, request).d

    if device.device_id != EMULATOR_DEVICE_ID:
        return run()
    return original_output(prepared.original_co, prepared.entry.symbol, request, run)


def _original_fails(device: Device, prepared: PreparedEdit, request: GemmRequest) -> bool:
    """Whether the unedited original also fails (or faults) at this request."""
    try:
        return run_gemm(device, prepared.entry, prepared.original_co, request).passed is False
    except DeviceError:
        return True


def _predict(prepared: PreparedEdit) -> tuple[PredictedChange | None, str]:
    """The edit's predicted change; an edit the emulator cannot run has none (its runs say
    why)."""
    from f4pipe.perf.predict import predicted_change

    try:
        return predicted_change(prepared.entry, prepared.original_co, prepared.co_path), ""
    except EmulatorError as exc:
        return None, f"not predicted: {exc}"


def try_edit(
    asm_path: str | Path,
    co_dir: str | Path,
    toolchain: Toolchain,
    *,
    kernel: str | None = None,
    device: str = "auto",
    cases: list[Case] | None = None,
    out_co: str | Path | None = None,
    baseline: bool = True,
    seed_a: int = SEED_A,
    seed_b: int = SEED_B,
    check_hazards: bool = True,
    fit_resources: bool = False,
) -> TryResult:
    """Assemble, diff, check and (if the checks pass) run an edit; see the module docstring.

    `out_co` keeps the assembled object; by default it lives in a temporary directory.
    `fit_resources` sizes its descriptor and metadata to its code first (f4pipe.edits.resources).
    """
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="f4pipe-try-") as tmp:
        target = Path(out_co) if out_co is not None else Path(tmp) / f"{Path(asm_path).stem}.co"
        prepared = prepare_edit(asm_path, co_dir, target, toolchain, kernel, fit_resources)
        result = TryResult(prepared)
        todo = cases if cases is not None else quick_cases(prepared.entry)
        options = {"seed_a": seed_a, "seed_b": seed_b, "check_hazards": check_hazards}
        ahead = None
        if not prepared.findings and baseline and cases is None:  # quick shapes only: an
            # edit that fails early needs no original at the thorough ones
            ahead = _baseline_ahead(prepared, todo, device, options)
        result.hazards_checked = check_hazards
        result.occupancy = (
            occupancy_of(prepared.original_co, prepared.entry.symbol),
            occupancy_of(prepared.co_path, prepared.entry.symbol),
        )
        if not prepared.findings and check_hazards:
            result.static_hazards = new_static_hazards(prepared)
        if not prepared.findings:
            result.predicted, result.predicted_error = _predict(prepared)
        if ahead is not None:
            ahead.join()
        if not prepared.findings:
            devices = open_devices(device, check_hazards)
            try:
                for dev in devices:
                    for case in todo:
                        result.runs.append(
                            run_case(
                                dev, prepared, case, seed_a=seed_a, seed_b=seed_b, baseline=baseline
                            )
                        )
            finally:
                for dev in devices:
                    dev.close()
        if result.timing_failed:
            result.repair = repair_waits(prepared)
    result.seconds = time.perf_counter() - start
    return result
