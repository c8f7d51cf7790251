"""The pipeline's GEMM stages: verify, splitk, bench. Each turns (device, manifest, cases) into
rows of one Parquet schema (f4pipe.core.schemas VERIFY / SPLITK / BENCH).

A stage never pretends: with no device that can run the kernels every row is "skipped" with the
reason, and bench on anything but gfx950 hardware records "skipped" instead of a number. A
device error on one case is recorded as an "error" row and the stage goes on, so one bad kernel
does not hide the others' results.

Shape edges: the heuristic picks only kernels safe at the shape (f4pipe.aiter.shaperules); a case
that
names a kernel unsafe at its shape runs under StageSettings.edge_policy, by default "pad"
(f4pipe's remedy, noted in the row's reason) so that the stage verifies the kernel's
arithmetic; the unprotected behaviour is the safety table's business.

With StageSettings.store, a verify or splitk run that was done before with the same kernel
bytes, request, device, toolchain and f4pipe is taken from the result store
(f4pipe.pipeline.resultstore)
and marked as reused; bench never is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from f4pipe.aiter.heuristic import select_kernel
from f4pipe.aiter.manifest import KernelEntry, Manifest
from f4pipe.arch.gfx950 import ARCH, NUM_CU
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.core.cache import f4pipe_identity
from f4pipe.core.device import Device
from f4pipe.core.errors import ConfigError, DeviceError, EmulatorError, ShapeError
from f4pipe.core.layout import NO_DEVICE, SEED_A, SEED_B
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.core.verdicts import RUN_VERDICTS
from f4pipe.devices.devinfo import CLOCK_FIELDS, DEVICE_FIELDS, clock_fields
from f4pipe.emu.ops_memory import DEFAULT_ATOMIC_ROUNDING, atomic_rounding
from f4pipe.host.benchprotocol import BENCH_ITERS
from f4pipe.host.benchprotocol import Protocol as BenchProtocol
from f4pipe.host.gemm import (
    NOT_TIMED_NO_HARDWARE,
    SHIM_TIME_NOTE,
    GemmRequest,
    GemmResult,
    run_gemm,
)
from f4pipe.host.kernarg import launch_geometry
from f4pipe.host.matrices import Case, expand_case
from f4pipe.pipeline.parallel import map_ordered, workers_for
from f4pipe.pipeline.progress import track
from f4pipe.pipeline.resultstore import ResultStore, kernel_identity, reuse_or_run

if TYPE_CHECKING:
    from f4pipe.perf.predict import Predictor

NO_DEVICE_REASON = "no gfx950 device"
BENCH_NOT_HARDWARE_REASON = f"skipped: {NOT_TIMED_NO_HARDWARE}"
#: Bench status of a row the HIP shim timed: `us` is host wall clock, `tflops` stays null, and
#: the report and compare (which read only "measured" rows) never show it as throughput.
SHIM_TIMED = "shim-timed"
#: Bench status of a row without a measurement: only the cycle model's us_pred is filled.
PREDICTED = "predicted"
PREDICTED_NOTE = "us_pred is the cycle model's prediction (f4pipe.perf), not a measurement"


@dataclass(frozen=True)
class StageSettings:
    """What every stage row records and runs with."""

    keys: ArtifactKeys
    variant: str = "original"
    kernel: str | None = None  # restrict to this kernel (name, symbol or .co)
    seed_a: int = SEED_A
    seed_b: int = SEED_B
    alpha: float = 1.0
    iters: int = BENCH_ITERS  # bench only: timed launches per case (protocol.repeats x launches)
    protocol: BenchProtocol | None = None  # bench only: how (f4pipe.host.benchstats)
    bpreshuffle: bool = True  # heuristic cases
    skip_reason: str = NO_DEVICE_REASON  # used when device is None
    edge_policy: str = "pad"  # kernels named by a case at a shape unsafe for them
    store: ResultStore | None = None  # reuse verdicts by content (f4pipe.pipeline.resultstore)
    workers: int = 1  # processes for verify/splitk runs on the emulator (f4pipe.pipeline.parallel)


def plan_runs(
    manifest: Manifest, cases: Iterable[Case], settings: StageSettings, num_cu: int
) -> list[tuple[KernelEntry, int, Case]]:
    """Expand cases into (kernel, log2_k_split, case) runs, restricted to settings.kernel, each
    distinct run once: a run is its kernel, split and shape (the request takes nothing else
    from the case), and two cases may name the same one (the seed matrix's heuristic pick at
    M=300 N=2048 K=1024 is also among its every-kernel runs there). Running it twice would
    give the stage a row its own result store answers, counted twice."""

    def heuristic(case: Case) -> tuple[KernelEntry, int]:
        choice = select_kernel(
            manifest,
            case.m,
            case.n,
            k=case.k,
            bpreshuffle=settings.bpreshuffle,
            log2_k_split=case.log2_k_split,
            num_cu=num_cu,
        )
        return choice.entry, choice.log2_k_split

    wanted = manifest.get(settings.kernel) if settings.kernel else None
    runs = []
    planned: set[tuple[str, int, int, int, int]] = set()
    for case in cases:
        for entry, log2 in expand_case(case, manifest, heuristic):
            run = (entry.name, log2, case.m, case.n, case.k)
            if (wanted is None or entry == wanted) and run not in planned:
                planned.add(run)
                runs.append((entry, log2, case))
    return runs


def _case_row(
    settings: StageSettings, device_id: str, entry: KernelEntry, log2: int, case: Case
) -> dict[str, Any]:
    try:
        gdz = launch_geometry(entry.tile_m, entry.tile_n, case.m, case.n, case.k, log2).gdz
    except ShapeError:
        gdz = 0
    keys = ArtifactKeys(
        settings.keys.aiter_id, settings.keys.toolchain_id, device_id, settings.keys.f4pipe_version
    )
    return {
        **keys.as_row(),
        "variant": settings.variant,
        "kernel": entry.name,
        "symbol": entry.symbol,
        "m": case.m,
        "n": case.n,
        "k": case.k,
        "log2_k_split": log2,
        "gdz": gdz,
        "seed_a": settings.seed_a,
        "seed_b": settings.seed_b,
        "status": "skipped",
        "reason": "",
    }


_ERROR_METRICS = ("passed", "bad", "max_abs_err", "max_rel_err", "err_frac", "max_abs_ref")


def _checked_row(
    device: Device | None,
    manifest: Manifest,
    settings: StageSettings,
    entry: KernelEntry,
    log2: int,
    case: Case,
) -> dict[str, Any]:
    device_id = device.device_id if device is not None else NO_DEVICE
    row = _case_row(settings, device_id, entry, log2, case)
    row.update(
        {name: None for name in (*_ERROR_METRICS, "atol", "rtol", "seconds", "hazards")},
        advisories=None,
    )
    row["alpha"] = settings.alpha
    if device is None:
        row["reason"] = settings.skip_reason
        return row
    request = _request(settings, case, log2)
    start = time.perf_counter()
    try:
        result = run_gemm(device, entry, manifest.co_path(entry), request)
    except (DeviceError, ShapeError) as exc:
        row.update(status="error", reason=f"{type(exc).__name__}: {exc}")
        return row
    v = result.verification
    assert v is not None  # verify=True
    notes = [
        "" if v.passed else f"{v.bad} element(s) outside atol + rtol*|ref|",
        result.hazard_summary,
        f"padded output: {result.padding}" if result.padding else "",
        f"{result.advisories} advisory: {result.advisory_summary}" if result.advisories else "",
    ]
    row.update(
        status=result.status,
        reason="; ".join(x for x in notes if x),
        hazards=result.hazards,
        advisories=None if result.hazards is None else result.advisories,
        passed=v.passed,
        bad=v.bad,
        max_abs_err=v.max_abs_err,
        max_rel_err=v.max_rel_err,
        err_frac=v.err_frac,
        max_abs_ref=v.max_abs_ref,
        atol=v.atol,
        rtol=v.rtol,
        seconds=time.perf_counter() - start,
        gdz=result.gdz,
    )
    return row


def _request(settings: StageSettings, case: Case, log2: int, **extra: Any) -> GemmRequest:
    """The GemmRequest of one run: the case's shape with the stage's seeds, alpha and policy."""
    return GemmRequest(
        case.m,
        case.n,
        case.k,
        log2,
        settings.seed_a,
        settings.seed_b,
        settings.alpha,
        edge_policy=settings.edge_policy,
        **extra,
    )


def _label(stage: str, settings: StageSettings) -> str:
    """The progress label: stage, variant and kernel (progress lines go to the job's log)."""
    return f"{stage} {settings.variant}" + (f" {settings.kernel}" if settings.kernel else "")


def _checked_stage(
    stage: str,
    make_row: Callable[..., dict[str, Any]],
    device: Device | None,
    manifest: Manifest,
    cases: Iterable[Case],
    settings: StageSettings,
) -> list[dict[str, Any]]:
    """A checked stage's rows, one per run, the runs spread over settings.workers processes
    on the emulator."""
    num_cu = device.num_cu if device is not None else NUM_CU
    runs = plan_runs(manifest, cases, settings, num_cu)
    device_id = device.device_id if device is not None else None
    return map_ordered(
        lambda run: _stored(stage, device, manifest, settings, *run, make_row),
        runs,
        workers=workers_for(device_id, settings.workers),
        label=_label(stage, settings),
    )


def verify_stage(
    device: Device | None, manifest: Manifest, cases: Iterable[Case], settings: StageSettings
) -> list[dict[str, Any]]:
    """VERIFY rows: every run checked against the CPU reference (f4pipe.host.verify criteria)."""
    return _checked_stage("verify", _checked_row, device, manifest, cases, settings)


def splitk_stage(
    device: Device | None, manifest: Manifest, cases: Iterable[Case], settings: StageSettings
) -> list[dict[str, Any]]:
    """SPLITK rows: split count vs error (err_frac = max abs err / max|ref|)."""
    return _checked_stage("splitk", _splitk_row, device, manifest, cases, settings)


def _splitk_row(
    device: Device | None,
    manifest: Manifest,
    settings: StageSettings,
    entry: KernelEntry,
    log2: int,
    case: Case,
) -> dict[str, Any]:
    row = _checked_row(device, manifest, settings, entry, log2, case)
    geometry = launch_geometry(entry.tile_m, entry.tile_n, case.m, case.n, case.k, log2)
    return row | {"k_num": geometry.k_num, "k_per_tg": geometry.k_per_tg}


def _stored(
    stage: str,
    device: Device | None,
    manifest: Manifest,
    settings: StageSettings,
    entry: KernelEntry,
    log2: int,
    case: Case,
    make_row: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """One run's row, reused from settings.store when it holds this exact run (the kernel's
    bytes and manifest row, the whole GemmRequest, device, toolchain, f4pipe), else run."""
    store = settings.store if device is not None else None
    inputs = {}
    if store is not None:
        inputs = {
            "kernel": kernel_identity(entry, manifest.co_path(entry), device.device_id, store),
            "request": _request(settings, case, log2),
            "device_id": device.device_id,
            "toolchain_id": settings.keys.toolchain_id,
            "f4pipe": f4pipe_identity(),
        }
        if atomic_rounding() != DEFAULT_ATOMIC_ROUNDING:  # an emulator run under another
            inputs["bf16_atomic_rounding"] = atomic_rounding()  # assumption is another result
    (row,) = reuse_or_run(
        store,
        stage,
        inputs,
        {"aiter_id": settings.keys.aiter_id, "variant": settings.variant},
        lambda: [make_row(device, manifest, settings, entry, log2, case)],
        keep=lambda r: r["status"] in RUN_VERDICTS,
    )
    return row


def bench_stage(
    device: Device | None, manifest: Manifest, cases: Iterable[Case], settings: StageSettings
) -> list[dict[str, Any]]:
    """BENCH rows: mean us per launch and TFLOP/s on gfx950 hardware; on f4pipe's HIP shim
    "shim-timed" with the host's wall clock in `us` and no TFLOP/s; elsewhere "predicted".
    Every row also carries the cycle model's prediction (us_pred, tflops_pred, bound, model
    and calibration ids: f4pipe.perf), never in `us` / `tflops`, which stay hardware-only; on
    hardware the two stand side by side.

    Timing only (verify=False): correctness is the verify stage's job, and the float64
    reference of the large throughput shapes would dominate the stage's run time.
    """
    from f4pipe.perf.predict import Predictor

    num_cu = device.num_cu if device is not None else NUM_CU
    predictor = Predictor(manifest)
    rows = []
    runs = track(plan_runs(manifest, cases, settings, num_cu), _label("bench", settings))
    for entry, log2, case in runs:
        device_id = device.device_id if device is not None else NO_DEVICE
        row = _case_row(settings, device_id, entry, log2, case)
        protocol = settings.protocol or bench_protocol(settings.iters)
        row.update(iters=protocol.samples, warmup=protocol.warmup, us=None, tflops=None)
        row["protocol"] = protocol.describe()
        row.update(dict.fromkeys(SPREAD_FIELDS))
        row.update(dict.fromkeys(DEVICE_FIELDS + CLOCK_FIELDS))
        info = getattr(device, "info", None)
        if info is not None:
            row.update(info.fields())
        row.update(_predicted_fields(predictor, entry, case, log2, warm=not protocol.cold))
        if device is None:
            row["reason"] = f"{settings.skip_reason}; {PREDICTED_NOTE}"
            row["status"] = PREDICTED
        elif not device.can_time:
            row["reason"] = f"{BENCH_NOT_HARDWARE_REASON}; {PREDICTED_NOTE}"
            row["status"] = PREDICTED
        else:
            request = _request(settings, case, log2, verify=False, protocol=protocol)
            clocks = getattr(device, "clocks", None)
            before = clocks.sample() if clocks is not None else None
            try:
                result = run_gemm(device, entry, manifest.co_path(entry), request)
            except (DeviceError, ShapeError) as exc:
                row.update(status="error", reason=f"{type(exc).__name__}: {exc}")
            else:
                row.update(_timed_row(result))
            after = clocks.sample() if clocks is not None else None
            note = clocks.note if clocks is not None else "the device has no clock readings"
            row.update(clock_fields(before, after, note))
        rows.append(row)
    return rows


def _predicted_fields(
    predictor: Predictor, entry: KernelEntry, case: Case, log2: int, warm: bool
) -> dict[str, Any]:
    """The cycle model's prediction for a bench row (f4pipe.perf), for the row's protocol:
    warm caches unless its launches rotate operand copies."""
    try:
        p = predictor.predict(entry, case.m, case.n, case.k, log2, warm, explain=True)
    except (ShapeError, EmulatorError) as exc:
        return {"us_pred": None, "tflops_pred": None, "bound": f"not predicted: {exc}"}
    return {
        "us_pred": p.us,
        "tflops_pred": p.tflops,
        "bound": p.bound,
        "model_id": predictor.model_id,
        "calibration_id": predictor.calibration_id,
    }


#: A bench row's launch-time fields (null until a device times the row).
SPREAD_FIELDS = (
    "launch_us",
    "us_min",
    "us_q1",
    "us_q3",
    "us_ci_low",
    "us_ci_high",
    "outliers",
    "rotation_copies",
    "rotation_bytes",
)


def bench_protocol(iters: int, **options: Any) -> BenchProtocol:
    """The protocol for `iters` timed launches per case: Protocol's repeats (default 5), each
    of ceil(iters / repeats) launches; other fields from `options` (f4pipe.host.benchstats)."""
    repeats = int(options.pop("repeats", BenchProtocol.repeats))
    if repeats < 1 or iters < 1:
        raise ConfigError(f"bench needs iters and repeats >= 1 (got {iters} and {repeats})")
    try:
        return BenchProtocol(repeats=repeats, launches=max(1, -(-iters // repeats)), **options)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _timed_row(result: GemmResult) -> dict[str, Any]:
    """A timed run's bench fields: measured on a GPU, or the HIP shim's host clock marked as
    such (the timing path ran; the time is not a GPU's). `us` is the median launch; the
    spread and every launch time are kept (f4pipe.host.benchstats)."""
    from f4pipe.host.benchstats import summarize

    fields: dict[str, Any] = {"us": result.us}
    if result.launch_us is not None:
        s = summarize(result.launch_us)
        fields.update(
            launch_us=[float(x) for x in result.launch_us.ravel()],
            us_min=s.minimum,
            us_q1=s.q1,
            us_q3=s.q3,
            us_ci_low=s.ci_low,
            us_ci_high=s.ci_high,
            outliers=s.outliers,
            rotation_copies=result.rotation_copies,
            rotation_bytes=result.rotation_bytes,
        )
    if result.us_is_hardware:
        return {"status": "measured", "tflops": result.tflops, **fields}
    return {"status": SHIM_TIMED, "reason": SHIM_TIME_NOTE, **fields}


#: Why: said by each such stage given another architecture's objects, and by the report.
GFX950_ONLY_REASON = (
    "the emulator, the cycle model and aiter's kernel choice f4pipe reproduces are gfx950's"
)


def gfx950_only(stage: str, manifest: Manifest) -> str | None:
    """The one line a gfx950-only stage prints instead of running on a manifest whose code
    objects are another architecture's (aiter's gfx1250 f4gemm), or None for gfx950's."""
    archs = sorted({CodeObject.read(manifest.co_path(e)).arch for e in manifest})
    others = [a for a in archs if a != ARCH]
    if not others:
        return None
    return (
        f"f4pipe {stage}: gfx950 only: {manifest.directory} holds {', '.join(others)} code "
        f"objects, and {GFX950_ONLY_REASON}; nothing run"
    )


STAGES: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "verify": verify_stage,
    "splitk": splitk_stage,
    "bench": bench_stage,
}
