"""One f4gemm run on any Device: operands, layouts, kernarg, launch, verification, timing.

This is everything the seed C++ driver did on the host, once. Hardware (hip-python) and the
gfx950 emulator differ only in the Device they pass; the bytes a kernel sees are identical.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import psutil

from f4pipe.aiter.manifest import KernelEntry
from f4pipe.aiter.shaperules import check_paddings, check_shape, k_tail, padded_launch
from f4pipe.core.device import Device, DeviceBuffer, LaunchReport, measures_throughput
from f4pipe.core.errors import EmulatorError, InputError, ShapeError
from f4pipe.core.layout import SEED_A, SEED_B
from f4pipe.core.numerics import (
    SCALE_PAD,
    bf16_bits_to_float,
    pad_scales,
    padded_scale_shape,
    shuffle_b,
    shuffle_scales,
)
from f4pipe.host.kernarg import BufferLayout, LaunchGeometry, gemm_kernarg, launch_geometry
from f4pipe.host.operands import (
    DEFAULT_DISTRIBUTION,
    MxOperand,
    OperandDistribution,
    generate_operand,
)
from f4pipe.host.reference import kernel_alpha, shared_reference
from f4pipe.host.verify import Verification, verify_output

if TYPE_CHECKING:
    from f4pipe.analysis.timing import HazardReport
    from f4pipe.host.benchprotocol import Protocol as BenchProtocol

#: Untimed launches before the timed ones (the seed driver's).
WARMUP_LAUNCHES = 5
NOT_TIMED_NO_HARDWARE = "throughput is measured only on gfx950 hardware"
#: What `us` means when f4pipe's HIP shim timed it (the timing path ran, but not on a GPU).
SHIM_TIME_NOTE = (
    "host wall clock around emulated launches on f4pipe's HIP shim: not GPU time, no TFLOP/s"
)


@dataclass(frozen=True)
class GemmRequest:
    """What to run: shape, split, operands' seeds and distribution, alpha, and options."""

    m: int
    n: int
    k: int
    log2_k_split: int = 0
    seed_a: int = SEED_A
    seed_b: int = SEED_B
    alpha: float = 1.0
    distribution: OperandDistribution = DEFAULT_DISTRIBUTION
    verify: bool = True
    iters: int = 0  # timed launches (0 = do not time)
    # D before the launch (non-splitK only): None = zeros, an int = that byte everywhere,
    # an array = the full padded D uint16 bf16 bit pattern (BufferLayout.d_shape: normally
    # [round_up(M,32), N]; larger with edge_policy "pad").
    d_prefill: int | np.ndarray | None = field(default=None, repr=False)
    keep_padded_d: bool = False  # return the whole padded D (bits) for canary checks
    # A shape f4pipe.aiter.shaperules marks unsafe for the kernel: "refuse" (UnsafeShapeError),
    # "pad"
    # (run on padded buffers, return D[:M, :N]) or "unsafe" (run it as asked: for the sweep
    # and reproducers).
    edge_policy: str = "refuse"
    check_memory: bool = True  # refuse a shape whose buffers exceed the available memory
    # What the K tail reads when K % 256 != 0 (f4pipe.aiter.shaperules.SCALE_PADDINGS and
    # K_PADDINGS): the scale buffers' padding bytes, and the A and B rows' own K padding.
    scale_pad: str = "driver"
    k_pad: str = "none"
    # How to time (f4pipe.host.benchstats): with a protocol, `iters` is ignored and each timed
    # launch is measured on its own (R x N launch times, operand copies rotated when cold).
    protocol: BenchProtocol | None = None

    def __post_init__(self) -> None:
        check_alpha(self.alpha)
        check_paddings(self.scale_pad, self.k_pad)
        for name, seed in (("seed_a", self.seed_a), ("seed_b", self.seed_b)):
            if not 0 <= seed < 1 << 63:
                raise InputError(f"{name}={seed}: seeds are integers in 0..2^63-1")


def check_alpha(alpha: float) -> None:
    """alpha must be finite as the f32 the kernarg holds: an infinite or NaN alpha makes the
    reference (and so the tolerance) non-finite, and every comparison would pass."""
    with np.errstate(over="ignore"):
        as_f32 = kernel_alpha(alpha) if math.isfinite(alpha) else alpha
    if not math.isfinite(as_f32):
        raise InputError(
            f"alpha={alpha} is not a finite f32 (|alpha| <= 3.4e38): the kernarg slot is an "
            "f32 and the check needs a finite reference"
        )


def host_bytes_needed(layout: BufferLayout, verify: bool) -> int:
    """Bytes one run holds at its peak: the device buffers (the emulator keeps them in host
    memory) and their host images, plus, when verifying, the float64 reference (A and B
    dequantized, A @ B^T) and the float64 output."""
    m, n, k = layout.m, layout.n, layout.k
    buffers = layout.a_nbytes + layout.b_nbytes + layout.scale_a_nbytes + layout.scale_b_nbytes
    total = 2 * buffers + 2 * layout.d_nbytes + m * k + n * k  # + the unpacked fp4 codes
    if verify:
        total += 8 * (m * k + n * k + 3 * m * n)
    return total


def available_memory() -> int:
    """Bytes the machine can give a run without swapping (psutil: MemAvailable on Linux)."""
    return int(psutil.virtual_memory().available)


def check_memory(layout: BufferLayout, verify: bool) -> None:
    """Refuse before allocating anything a run that cannot fit in the available memory."""
    needed = host_bytes_needed(layout, verify)
    available = available_memory()
    if needed > available:
        raise ShapeError(
            f"M={layout.m} N={layout.n} K={layout.k} needs about {needed} bytes "
            f"({needed / 2**30:.1f} GiB) of host memory, {available} bytes "
            f"({available / 2**30:.1f} GiB) are available: use a smaller shape (f4pipe gemm: "
            "--no-memory-check tries anyway)"
        )


@dataclass(frozen=True)
class GemmResult:
    """A run's outcome. `verification` is None with verify=False; `us` None when not timed."""

    kernel: str  # the .co stem
    symbol: str
    m: int
    n: int
    k: int
    log2_k_split: int
    geometry: LaunchGeometry
    device_id: str
    seed_a: int
    seed_b: int
    alpha: float
    verification: Verification | None
    us: float | None
    not_timed_reason: str | None
    d: np.ndarray = field(repr=False)  # float64 [M, N], the kernel's output
    us_is_hardware: bool = False  # False: `us` is the HIP shim's host clock (SHIM_TIME_NOTE)
    d_padded_bits: np.ndarray | None = field(default=None, repr=False)  # uint16 layout.d_shape
    layout: BufferLayout | None = None  # the buffers the kernel ran on
    padding: str = ""  # the edge remedy applied ("" when the shape ran as asked)
    races: int | None = None  # dwords written by several workgroups (emulator only)
    race_summary: str = ""
    # Timing hazards (f4pipe.analysis.timing): None = not checked (hardware, or checks turned off).
    hazards: int | None = None
    hazard_summary: str = ""
    advisories: int = 0
    advisory_summary: str = ""
    #: What the device reported on the launch (the emulator's LaunchStats, with its cost);
    #: None where it checks nothing (hardware).
    launch: LaunchReport | None = field(default=None, repr=False)
    #: Per-launch microseconds [repeats, launches] when timed by a protocol; `us` is then
    #: their median.
    launch_us: np.ndarray | None = field(default=None, repr=False)
    rotation_copies: int = 0  # operand copies the timed launches rotated through
    rotation_bytes: int = 0

    @property
    def gdz(self) -> int:
        return self.geometry.gdz

    @property
    def passed(self) -> bool | None:
        return None if self.verification is None else self.verification.passed

    @property
    def tflops(self) -> float | None:
        """TFLOP/s, only for times a GPU measured (never for the HIP shim's host clock)."""
        if self.us is None or not self.us_is_hardware:
            return None
        return tflops(self.m, self.n, self.k, self.us)

    @property
    def status(self) -> str:
        """ "failed" (wrong values in any schedule), else "hazard" (right values only because
        the emulator's schedule hid a timing fault), else "passed"; "unverified" with
        verify=False and no hazard."""
        if self.verification is not None and not self.verification.passed:
            return "failed"
        if self.hazards:
            return "hazard"
        return "unverified" if self.verification is None else "passed"


def tflops(m: int, n: int, k: int, us: float) -> float:
    """TFLOP/s of an M x N x K GEMM that took `us` microseconds: 2MNK / us / 1e6."""
    return 2.0 * m * n * k / us / 1e6


@dataclass(frozen=True)
class DeviceOperands:
    """Host images of the four input buffers, exactly as uploaded (padding included)."""

    a: np.ndarray  # [round_up(M,256), K/2] uint8
    b: np.ndarray  # [round_up(N,256), K/2] uint8, pre-shuffled for BpreShuffle kernels
    scale_a: np.ndarray  # padded + shuffled
    scale_b: np.ndarray


#: Seeds the "arbitrary" scale padding (uninitialised memory, modelled as random bytes).
ARBITRARY_PAD_SEED = 0xE8A0


def padded_scale_image(scales: np.ndarray, k: int, scale_pad: str, seed: int) -> np.ndarray:
    """The padded (unshuffled) scale buffer with its padding as `scale_pad` fills it:
    "driver" 0x7F (1.0), "zeros" 0x00, "arbitrary" seeded random bytes (0xFF = NaN among
    them), as aiter's torch.empty leaves it."""
    if scale_pad == "driver":
        return pad_scales(scales)
    if scale_pad == "zeros":
        return pad_scales(scales, fill=0)
    rows, _ = scales.shape
    rng = np.random.default_rng((ARBITRARY_PAD_SEED, seed))
    padded = rng.integers(0, 256, size=padded_scale_shape(rows, k), dtype=np.uint16)
    padded = padded.astype(np.uint8)
    padded[: scales.shape[0], : scales.shape[1]] = scales
    return padded


def padded_rows(packed: np.ndarray, rows: int, row_k: int) -> np.ndarray:
    """[rows, row_k/2] zero bytes with `packed` [r, K/2] in its top-left corner."""
    image = np.zeros((rows, row_k // 2), dtype=np.uint8)
    image[: packed.shape[0], : packed.shape[1]] = packed
    return image


def device_images(
    a: MxOperand,
    b: MxOperand,
    layout: BufferLayout,
    bpreshuffle: bool,
    scale_pad: str = "driver",
) -> DeviceOperands:
    """Lay operands out as the kernels read them: rows over-allocated (zeros) and, with a
    layout.k_stride, K padded with zeros; B pre-shuffled for BpreShuffle kernels (plain for
    noBpreShuffle); scales padded as `scale_pad` says and shuffled."""
    a_img = padded_rows(a.packed, layout.a_rows, layout.row_k)
    b_rows = padded_rows(b.packed, b.rows, layout.row_k)
    b_img = np.zeros((layout.b_rows, layout.row_k // 2), dtype=np.uint8)
    b_img[: layout.n] = shuffle_b(b_rows) if bpreshuffle else b_rows
    return DeviceOperands(
        a=a_img,
        b=b_img,
        scale_a=shuffle_scales(padded_scale_image(a.scales, layout.k, scale_pad, a.seed)),
        scale_b=shuffle_scales(padded_scale_image(b.scales, layout.k, scale_pad, b.seed)),
    )


def _upload(
    device: Device, image: np.ndarray, buffers: list[DeviceBuffer], nbytes: int | None = None
) -> DeviceBuffer:
    """Allocate (nbytes, default the image's) and upload; slack past the image is zeroed."""
    buf = device.alloc(image.nbytes if nbytes is None else nbytes)
    buffers.append(buf)
    if buf.nbytes > image.nbytes:
        device.memset(buf, 0)
    device.upload(buf, np.ascontiguousarray(image))
    return buf


def k_stride_for(k: int, k_pad: str) -> int:
    """The A and B row length a K padding lays out (0 = K itself)."""
    return k + k_tail(k) if k_pad == "zeros" and k_tail(k) else 0


def edge_layout(entry: KernelEntry, request: GemmRequest) -> tuple[BufferLayout, str, str]:
    """The buffers for `request` under its edge policy: the seed layout, or the padded one
    when the shape is unsafe and the policy is "pad". The shape is held against `entry` by
    the one shape check (f4pipe.aiter.shaperules.check_shape), which raises for a bad shape
    and, under "refuse", for an unsafe one. Returns (layout, what was padded, the scale
    padding used)."""
    r = request
    pads = {"scale_pad": r.scale_pad, "k_pad": r.k_pad}
    found = check_shape(
        r.m, r.n, r.k, r.log2_k_split, entry=entry, edge_policy=r.edge_policy, **pads
    )
    seed = BufferLayout(r.m, r.n, r.k, k_stride=k_stride_for(r.k, r.k_pad))
    if r.edge_policy == "unsafe" or not found:
        return seed, "", r.scale_pad
    pad = padded_launch(entry, r.m, r.n, r.k, **pads)
    layout = BufferLayout(
        r.m,
        pad.n_kernel,
        r.k,
        pad.d_row_multiple,
        pad.b_slack_bytes,
        k_stride=k_stride_for(r.k, pad.k_pad),
    )
    return layout, pad.describe(r.n), pad.scale_pad


def with_zero_rows(op: MxOperand, rows: int) -> MxOperand:
    """`op` extended to `rows` rows of zero data (scales 1.0): padded columns of D come out 0."""
    if rows == op.rows:
        return op
    packed = np.zeros((rows, op.packed.shape[1]), dtype=np.uint8)
    packed[: op.rows] = op.packed
    scales = np.full((rows, op.scales.shape[1]), SCALE_PAD, dtype=np.uint8)
    scales[: op.rows] = op.scales
    return MxOperand(packed=packed, scales=scales, seed=op.seed)


def _prefill_d(device: Device, d_buf: DeviceBuffer, request: GemmRequest, layout: BufferLayout):
    prefill = request.d_prefill
    if prefill is None:
        device.memset(d_buf, 0)
    elif isinstance(prefill, int):
        if not 0 <= prefill <= 0xFF:
            raise InputError(f"d_prefill byte {prefill} is not in 0..255")
        device.memset(d_buf, prefill)
    else:
        image = np.asarray(prefill)
        if image.dtype != np.uint16 or image.shape != layout.d_shape:
            raise InputError(
                f"d_prefill array must be uint16 of shape {layout.d_shape} (padded D bits), "
                f"got {image.dtype} {image.shape}"
            )
        device.upload(d_buf, np.ascontiguousarray(image))


@dataclass
class _Prepared:
    """A run up to its launch: buffers uploaded, D pre-filled, kernarg built."""

    request: GemmRequest
    layout: BufferLayout
    padding: str
    geometry: LaunchGeometry
    a: MxOperand
    b: MxOperand
    images: DeviceOperands
    kernel: Any
    buffers: list[DeviceBuffer]
    d_buf: DeviceBuffer
    kernarg_for: Any  # (a, b, scale_a, scale_b addresses) -> kernarg bytes
    kernarg: bytes


def _prepare(device: Device, entry: KernelEntry, co_path: Path, r: GemmRequest) -> _Prepared:
    """Everything run_gemm does before the launch; nothing stays allocated when it raises."""
    layout, padding, scale_pad = edge_layout(entry, r)
    geometry = launch_geometry(entry.tile_m, entry.tile_n, r.m, r.n, r.k, r.log2_k_split)
    splitk = geometry.gdz > 1
    if splitk and r.d_prefill is not None:
        raise InputError("d_prefill is meaningless for a splitK launch: D is zeroed before it")
    if r.iters < 0:
        raise InputError(f"iters={r.iters} must be >= 0")
    if r.check_memory:
        check_memory(layout, r.verify)
    a = generate_operand(r.m, r.k, r.seed_a, r.distribution)
    b = generate_operand(r.n, r.k, r.seed_b, r.distribution)
    images = device_images(a, with_zero_rows(b, layout.n), layout, entry.bpreshuffle, scale_pad)

    kernel = device.load(co_path, entry.symbol)
    buffers: list[DeviceBuffer] = []
    try:
        a_buf = _upload(device, images.a, buffers)
        b_buf = _upload(device, images.b, buffers, layout.b_nbytes)
        sa_buf = _upload(device, images.scale_a, buffers)
        sb_buf = _upload(device, images.scale_b, buffers)
        d_buf = device.alloc(layout.d_nbytes)
        buffers.append(d_buf)
        _prefill_d(device, d_buf, r, layout)
    except BaseException:
        _free(device, buffers)
        raise

    def kernarg_for(a_addr: int, b_addr: int, sa_addr: int, sb_addr: int) -> bytes:
        return gemm_kernarg(
            layout=layout,
            ptr_d=d_buf.addr,
            ptr_a=a_addr,
            ptr_b=b_addr,
            ptr_scale_a=sa_addr,
            ptr_scale_b=sb_addr,
            alpha=r.alpha,
            log2_k_split=r.log2_k_split if entry.splitk else 0,
        )

    kernarg = kernarg_for(a_buf.addr, b_buf.addr, sa_buf.addr, sb_buf.addr)
    return _Prepared(
        r, layout, padding, geometry, a, b, images, kernel, buffers, d_buf, kernarg_for, kernarg
    )


def _free(device: Device, buffers: list[DeviceBuffer]) -> None:
    for buf in buffers:
        device.free(buf)


def run_gemm(device: Device, entry: KernelEntry, co_path: Path, request: GemmRequest) -> GemmResult:
    """Run `entry` from `co_path` on `device` for `request`, verify it, optionally time it.

    splitK launches (gdz > 1) accumulate into D with atomics, so D is zeroed before each one
    (the whole padded buffer, as aiter does); a d_prefill is then refused, not silently lost.
    """
    r = request
    p = _prepare(device, entry, co_path, r)
    geometry, kernel, d_buf, kernarg = p.geometry, p.kernel, p.d_buf, p.kernarg
    splitk = geometry.gdz > 1
    try:
        report = device.launch(kernel, geometry.grid, geometry.block, kernarg)
        d_bits = device.download(d_buf).view(np.uint16).reshape(p.layout.d_shape).copy()

        us: float | None = None
        not_timed: str | None = None
        series: np.ndarray | None = None
        copies = rotated = 0
        if r.protocol is not None and device.can_time:
            kernargs, rotated = _rotation(device, p.images, r.protocol, p.buffers, p.kernarg_for)
            copies = len(kernargs)
            series = device.time_launch_series(
                kernel,
                geometry.grid,
                geometry.block,
                [kernarg, *kernargs[1:]],
                [d_buf if splitk else None] * copies,
                r.protocol,
            )
            us = float(np.median(series))
        elif r.protocol is not None:
            not_timed = NOT_TIMED_NO_HARDWARE
        elif r.iters > 0 and device.can_time:
            us = device.time_launches(
                kernel,
                geometry.grid,
                geometry.block,
                kernarg,
                iters=r.iters,
                warmup=WARMUP_LAUNCHES,
                zero_before_each=d_buf if splitk else None,
            )
        elif r.iters > 0:
            not_timed = NOT_TIMED_NO_HARDWARE
        else:
            not_timed = "not requested (iters=0)"
    finally:
        _free(device, p.buffers)
    return _result(device, entry, p, report, d_bits, us, not_timed, series, copies, rotated)


def run_gemms(
    device: Device, entry: KernelEntry, co_path: Path, requests: Sequence[GemmRequest]
) -> list[GemmResult | EmulatorError]:
    """run_gemm for each untimed request, in order, with the same results; a launch fault is
    returned in its place rather than raised. A device that can stage launches
    (the emulator: `stage_launch`, `launch_staged`) runs them together, which for small
    launches of one kernel costs a fraction of running them one by one."""
    if any(r.iters or r.protocol is not None for r in requests):
        raise InputError("run_gemms runs untimed requests only")
    if not hasattr(device, "launch_staged"):
        return [run_gemm(device, entry, co_path, r) for r in requests]
    prepared: list[_Prepared] = []
    try:
        staged = []
        for r in requests:
            p = _prepare(device, entry, co_path, r)
            prepared.append(p)
            g = p.geometry
            staged.append(device.stage_launch(p.kernel, g.grid, g.block, p.kernarg, p.buffers))
        reports = device.launch_staged(staged)
        results: list[GemmResult | EmulatorError] = []
        for p, report in zip(prepared, reports, strict=True):
            if isinstance(report, EmulatorError):
                results.append(report)
                continue
            bits = device.download(p.d_buf).view(np.uint16).reshape(p.layout.d_shape).copy()
            not_timed = "not requested (iters=0)"
            results.append(_result(device, entry, p, report, bits, None, not_timed, None, 0, 0))
    finally:
        for p in prepared:
            _free(device, p.buffers)
    return results


def _result(
    device: Device,
    entry: KernelEntry,
    p: _Prepared,
    report: LaunchReport | None,
    d_bits: np.ndarray,
    us: float | None,
    not_timed: str | None,
    series: np.ndarray | None,
    copies: int,
    rotated: int,
) -> GemmResult:
    """The GemmResult of a finished launch: D read back, verified when asked."""
    r, geometry = p.request, p.geometry
    race_report = None if report is None else report.races
    hazard_report = None if report is None else report.hazards
    d = bf16_bits_to_float(d_bits[: r.m, : r.n])
    draw = (r.m, r.n, r.k, r.seed_a, r.seed_b, r.distribution)
    ref = shared_reference(p.a, p.b, r.alpha, draw) if r.verify else None
    verification = None if ref is None else verify_output(d, ref, geometry.gdz)
    return GemmResult(
        kernel=entry.name,
        symbol=entry.symbol,
        m=r.m,
        n=r.n,
        k=r.k,
        log2_k_split=r.log2_k_split if entry.splitk else 0,
        geometry=geometry,
        device_id=device.device_id,
        seed_a=r.seed_a,
        seed_b=r.seed_b,
        alpha=r.alpha,
        verification=verification,
        us=us,
        not_timed_reason=not_timed,
        d=d,
        us_is_hardware=us is not None and measures_throughput(device),
        d_padded_bits=d_bits if r.keep_padded_d else None,
        layout=p.layout,
        padding=p.padding,
        races=None if race_report is None else race_report.count,
        race_summary="" if race_report is None else race_report.summary(),
        **hazard_fields(hazard_report),
        launch=report,
        launch_us=series,
        rotation_copies=copies,
        rotation_bytes=rotated,
    )


#: Most operand copies a cold protocol rotates through (tiny shapes would need thousands).
MAX_ROTATION_COPIES = 1024


def _rotation(device, images: DeviceOperands, protocol, buffers, kernarg_for):
    """Kernarg blocks for the timed launches: one set of operands (the one already uploaded:
    index 0 is filled in by the caller), plus (cold protocol) enough further copies of A, B
    and their scales to span protocol.rotate_bytes, each in its own buffers (same bytes, so
    every launch computes the same D). Returns (kernargs, bytes the copies span)."""
    one_set = images.a.nbytes + images.b.nbytes + images.scale_a.nbytes + images.scale_b.nbytes
    kernargs = [b""]
    if protocol.cold:
        want = min(MAX_ROTATION_COPIES, max(1, -(-protocol.rotate_bytes // one_set)))
        for _ in range(want - 1):
            a_buf = _upload(device, images.a, buffers)
            b_buf = _upload(device, images.b, buffers)
            sa_buf = _upload(device, images.scale_a, buffers)
            sb_buf = _upload(device, images.scale_b, buffers)
            kernargs.append(kernarg_for(a_buf.addr, b_buf.addr, sa_buf.addr, sb_buf.addr))
    return kernargs, one_set * len(kernargs)


def hazard_fields(report: HazardReport | None) -> dict[str, Any]:
    """GemmResult's hazard fields from a launch's HazardReport (None: not checked)."""
    if report is None:
        return {}
    advisory = report.advisory[0].message if report.advisory else ""
    return {
        "hazards": report.count,
        "hazard_summary": report.summary() if report.count else "",
        "advisories": report.advisories,
        "advisory_summary": advisory,
    }
