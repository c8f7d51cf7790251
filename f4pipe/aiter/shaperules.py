"""Shape-edge safety: which (kernel, M, N, K) the f4gemm kernels compute correctly, as code.

The kernels' epilogues do not all bound their stores by N (and one not by M), while D's row
stride is N: an edge tile then writes past column N into the next row, which another workgroup
owns (a race on hardware, a wrong result on the emulator for some orders). These rules are the
one place every decision reads (the tile heuristic, `f4pipe gemm`, the GEMM stages, the tuned-
config audit). They were derived from the disassembly (f4pipe.pipeline.edgesweep.store_evidence) and
are proven against the emulator for every kernel by the edge sweep (f4pipe.pipeline.edgesweep; the
`safety` pipeline rule writes the table, tests/test_safety.py reruns it on a subset):

- "chunk32" kernels (30 BpreShuffle tiles) store D in 32-column chunks; a chunk is skipped only
  when it starts at or past N, so with N % 32 == 16 the last chunk writes 16 columns into the
  next row. Rule: N % 32 == 0.
- "full-tile" kernels (BpreShuffle 256x256, 192x256, 224x256, 128x512) have no N guard at all:
  the last column tile writes all tile_n columns. Rule: N % tile_n == 0.
- noBpreShuffle_256x256 also stores whole 256-row tiles (its D resource has no M bound) and, with
  a single K step, prefetches 128 bytes past the end of B. Rules: N % 256 == 0, D rows
  >= round_up(M, 256) (aiter allocates round_up(M, 32)), K >= 512.

- K % 256 != 0 (K a multiple of 64, check_shape below): every kernel's K loop adds
  256 to a counter until it is no longer below K (`s_addk_i32 sX, 0x100; s_cmp_lt_i32 sX, sK`),
  so the last block reads round_up(K, 256) - K elements past K. The A and B loads' num_records
  are row stride x the tile's valid rows (not K): past K, row r of a tile reads row r + 1's
  first elements (the last valid row reads 0), and the scale loads read the padding columns
  K/32 .. round_up(K/32, 8). Those products vanish, and D is right, when the scale padding is
  E8M0 0 (2^-127 x 2^-127 underflows f32), or the A and B rows are padded to round_up(K, 256)
  with zeros and the scale padding is finite, or M == 1 (the only row is the tile's last), or
  N == 16 on a BpreShuffle kernel (the only 16-row B group is the tile's last). Uninitialised
  scale padding (arbitrary bytes) can hold 0xFF, the E8M0 NaN, and NaN x 0 is NaN: wrong.
  noBpreShuffle_256x256 reads B past its end in the last block (the emulator faults) unless
  the A and B rows are zero-padded in K.

Every violated rule has a remedy that f4pipe can apply on the host ("pad"): run the kernel on
N' = round_up(N, n_multiple) (B padded with zero rows, D stride N'), D rows round_up(M, tile)
and slack after B, then hand back D[:M, :N]. The same sweep proves it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from f4pipe.aiter.hostfacts import MISSTRIDED, SCALE_WRITERS, UNKNOWN, HostFact
from f4pipe.aiter.manifest import KernelEntry
from f4pipe.core.errors import ConfigError, ShapeError
from f4pipe.core.layout import K_PADDINGS, SCALE_PADDINGS
from f4pipe.core.numerics import round_up

#: How `run_gemm` treats a shape the rules mark unsafe for the kernel.
EDGE_POLICIES = ("refuse", "pad", "unsafe")
#: Column chunk of the chunk32 kernels' epilogue (and aiter's D row padding).
CHUNK_N = 32
D_ROW_ALIGN = 32
#: Bytes the noBpreShuffle kernel's B prefetch reaches past the last B row when K == 256,
#: rounded up; the remedy allocates this much zeroed slack after B.
B_PREFETCH_SLACK = 256
#: Tiles whose BpreShuffle epilogue has no N guard (static evidence: no s_cmp on N before the
#: D stores; the D buffer's num_records is rows * stride).
FULL_TILE_STORES = frozenset({(256, 256), (192, 256), (224, 256), (128, 512)})

STORE_CHUNK32 = "chunk32"
STORE_FULL_TILE = "full-tile"
STORE_UNBOUNDED = "unbounded"  # no N and no M bound (noBpreShuffle)

#: Edge classes: the rule families a shape can violate (safety table columns).
EDGE_N_CHUNK = "n%32=16"  # N not a multiple of the 32-column store chunk
EDGE_N_TILE = "n%tile_n"  # N a multiple of 32 but not of tile_n
EDGE_M_ROWS = "m%tile_m"  # M not a multiple of tile_m
EDGE_K_MIN = "k=256"  # the smallest K (a single K step)
EDGE_K_MULTI = "k>256"  # larger K, every dimension aligned
EDGE_K_TAIL_ROW = "k%256,m=1"  # K % 256 != 0 with a single row (the tile's last row)
EDGE_K_TAIL = "k%256"  # K % 256 != 0 with rows that read the next row past K
EDGE_CLASSES = (
    EDGE_N_CHUNK,
    EDGE_N_TILE,
    EDGE_M_ROWS,
    EDGE_K_MIN,
    EDGE_K_MULTI,
    EDGE_K_TAIL_ROW,
    EDGE_K_TAIL,
)
#: The K block of every kernel's main loop (its counter's step).
K_BLOCK = 256

#: K's granule, the largest of the operand layouts' own: A rows need K % 32 == 0 (one E8M0
#: scale per 32 elements; 16-byte loads), the B pre-shuffle K % 64 == 0 (its 16x16-byte tile
#: spans 32 bytes of K in two halves), and the scale buffer's columns are padded to 8 (256
#: elements) whatever K is. K % 256 != 0 runs (the K-tail rule judges it).
K_ALIGN = 64
N_ALIGN = 16
#: splitK chunks are rounded up to this many K elements.
SPLITK_K_ALIGN = 256
MAX_LOG2_K_SPLIT = 16
#: M, N and K travel in 32-bit kernarg slots; 2^31-1 also keeps them positive as int32.
MAX_DIM = (1 << 31) - 1
#: log2_k_split that asks the tile heuristic to choose the split (f4pipe.aiter.heuristic).
AUTO_SPLIT = -1


@dataclass(frozen=True)
class EdgeRule:
    """What a kernel needs of a shape to compute D[:M, :N] without touching anything else."""

    kernel: str
    store: str  # STORE_CHUNK32 | STORE_FULL_TILE | STORE_UNBOUNDED
    n_multiple: int  # N must be a multiple of this
    d_row_multiple: int  # D must have round_up(M, this) rows (aiter allocates 32)
    min_k: int
    evidence: str  # what the disassembly and the sweep showed, for refusal messages


@dataclass(frozen=True)
class Violation:
    """One rule a shape breaks, in words a user can act on."""

    edge_class: str
    message: str


@dataclass(frozen=True)
class PaddedLaunch:
    """The host-side remedy: what the kernel is launched on so that the shape is safe."""

    n_kernel: int  # N and D row stride the kernel sees (B padded with zero rows)
    d_row_multiple: int
    b_slack_bytes: int
    k_pad: str = "none"  # K_PADDINGS: the A and B rows' K padding the remedy uses
    scale_pad: str = "driver"  # SCALE_PADDINGS: the scale padding the remedy uses

    def describe(self, n: int) -> str:
        parts = []
        if self.n_kernel != n:
            parts.append(f"N padded {n} -> {self.n_kernel} (zero B rows, D stride {self.n_kernel})")
        if self.d_row_multiple != D_ROW_ALIGN:
            parts.append(f"D rows rounded up to a multiple of {self.d_row_multiple}")
        if self.b_slack_bytes:
            parts.append(f"{self.b_slack_bytes} zero bytes after B")
        if self.k_pad == "zeros":
            parts.append(
                f"A and B rows padded with zeros to a multiple of {K_BLOCK} in K, scale "
                f"padding E8M0 {'1.0' if self.scale_pad == 'driver' else self.scale_pad}"
            )
        return "; ".join(parts) or "no padding needed"


def short_name(kernel: str) -> str:
    return kernel.split("Fp4_", 1)[-1]


@functools.cache
def edge_rule(entry: KernelEntry) -> EdgeRule:
    """The shape rule of one manifest kernel (kept per entry: a tuning run asks for it about a
    million times)."""
    tile = (entry.tile_m, entry.tile_n)
    if not entry.bpreshuffle:
        return EdgeRule(
            kernel=entry.name,
            store=STORE_UNBOUNDED,
            n_multiple=entry.tile_n,
            d_row_multiple=entry.tile_m,
            min_k=2 * 256,
            evidence=(
                f"{short_name(entry.name)}'s epilogue has no N guard and its D buffer resource "
                "has no M bound (num_records 0xFFFFFFF0): it stores whole "
                f"{entry.tile_m}x{entry.tile_n} tiles; with K=256 its B prefetch reads 128 "
                "bytes past B"
            ),
        )
    if tile in FULL_TILE_STORES:
        return EdgeRule(
            kernel=entry.name,
            store=STORE_FULL_TILE,
            n_multiple=entry.tile_n,
            d_row_multiple=D_ROW_ALIGN,
            min_k=256,
            evidence=(
                f"{short_name(entry.name)}'s epilogue has no N guard (D num_records = rows x "
                f"stride): the last column tile writes all {entry.tile_n} columns, past N "
                "into the next rows"
            ),
        )
    return EdgeRule(
        kernel=entry.name,
        store=STORE_CHUNK32,
        n_multiple=CHUNK_N,
        d_row_multiple=D_ROW_ALIGN,
        min_k=256,
        evidence=(
            f"{short_name(entry.name)}'s epilogue stores 32-column chunks and skips a chunk only "
            "when it starts at or past N: with N % 32 == 16 the last chunk writes 16 columns "
            "into the next row, and the emulator sweep finds the last 16 columns wrong too"
        ),
    )


def check_paddings(scale_pad: str, k_pad: str) -> None:
    """Refuse a padding name that is not one of SCALE_PADDINGS / K_PADDINGS."""
    if scale_pad not in SCALE_PADDINGS:
        raise ConfigError(f"scale padding {scale_pad!r}: use one of {', '.join(SCALE_PADDINGS)}")
    if k_pad not in K_PADDINGS:
        raise ConfigError(f"K padding {k_pad!r}: use one of {', '.join(K_PADDINGS)}")


def k_tail(k: int) -> int:
    """Elements the last K block reads past K (0 when K is a multiple of 256)."""
    return round_up(k, K_BLOCK) - k


def k_tail_violation(
    entry: KernelEntry, m: int, n: int, k: int, scale_pad: str, k_pad: str
) -> Violation | None:
    """The K-tail rule (module docstring): None when the products the last block adds past K
    are all exactly 0 under this padding, else what goes wrong."""
    check_paddings(scale_pad, k_pad)
    tail = k_tail(k)
    if not tail:
        return None
    edge = EDGE_K_TAIL_ROW if m == 1 else EDGE_K_TAIL
    past = (
        f"K={k} is not a multiple of {K_BLOCK}: the last K block reads {tail} elements past K "
        f"and scale columns {k // 32}..{round_up(k, K_BLOCK) // 32 - 1} (padding)"
    )
    if not entry.bpreshuffle and k_pad == "none":
        return Violation(
            edge,
            past + f"; noBpreShuffle's B loads are not bounded by B's rows: the last block "
            f"reads {tail // 2} bytes past the end of B (a fault on the emulator, whatever "
            "follows B on hardware); pad the A and B rows with zeros to a multiple of 256 in K",
        )
    if scale_pad == "arbitrary":
        return Violation(
            edge,
            past + ", here uninitialised: a 0xFF (E8M0 NaN) there makes D NaN even where the "
            "operands are 0; fill the scale padding with 0x7F (1.0) or 0",
        )
    if scale_pad == "zeros" or k_pad == "zeros":
        return None
    if m == 1 or (n == 16 and entry.bpreshuffle):
        return None
    return Violation(
        edge,
        past + f", here E8M0 1.0 times the next row's data of A and B (M={m}): pad the scales "
        "with 0, or the A and B rows with zeros to a multiple of 256 in K",
    )


def release_k_tail(
    entry: KernelEntry, m: int, n: int, k: int, facts: Mapping[str, HostFact] | None
) -> str:
    """The K-tail rule's answer under the padding each scale writer of the fetched release
    writes (f4pipe.aiter.hostfacts), e8m0_shuffle's first; a writer f4pipe does not know, or a
    fetch that did not read them, says so and leaves the answer to every padding's."""
    if facts is None:
        return "this release's scale padding: not read (fetched before f4pipe read host code)"
    parts = []
    for name in SCALE_WRITERS:
        fact = facts.get(name)
        if fact is None or fact.value == UNKNOWN:
            said = fact.words if fact is not None else f"{name}: not read"
            parts.append(f"{said}: every padding's verdict")
            continue
        padding = fact.value.removesuffix(MISSTRIDED)
        misread = fact.value.endswith(MISSTRIDED) and m > 32  # rows past the first group
        wrong = misread or k_tail_violation(entry, m, n, k, padding, K_PADDINGS[0]) is not None
        parts.append(f"{fact.words} [{fact.where()}]: {'wrong' if wrong else 'safe'}")
    return "; ".join(parts)


def k_tail_answers(
    entry: KernelEntry, m: int, n: int, k: int, facts: Mapping[str, HostFact] | None = None
) -> str:
    """The K-tail rule's answer under the release's own padding first (`facts`, the fetch
    record's host facts; None: not read), then under every padding, in one line."""
    answers = [
        f"scale padding {scale_pad}, K padding {k_pad}: "
        + ("wrong" if k_tail_violation(entry, m, n, k, scale_pad, k_pad) else "safe")
        for scale_pad in SCALE_PADDINGS
        for k_pad in K_PADDINGS
    ]
    release = release_k_tail(entry, m, n, k, facts)
    return f"K={k} (K % 256 = {k % K_BLOCK}): {release}; by padding: " + ", ".join(answers)


def violations(
    entry: KernelEntry,
    m: int,
    n: int,
    k: int | None,
    *,
    scale_pad: str = "driver",
    k_pad: str = "none",
) -> list[Violation]:
    """The rules (M, N, K) breaks for `entry` with this padding of the K tail (the C++
    driver's by default); K None = unknown, checked as the minimum K."""
    rule = edge_rule(entry)
    found = []
    if n % rule.n_multiple:
        edge = EDGE_N_CHUNK if n % CHUNK_N else EDGE_N_TILE
        found.append(Violation(edge, f"N={n} is not a multiple of {rule.n_multiple}"))
    if m % rule.d_row_multiple and rule.d_row_multiple != D_ROW_ALIGN:
        found.append(
            Violation(
                EDGE_M_ROWS,
                f"M={m} is not a multiple of {rule.d_row_multiple}: the kernel writes rows up "
                f"to {round_up(m, rule.d_row_multiple)} of a {round_up(m, D_ROW_ALIGN)}-row D",
            )
        )
    if (k if k is not None else 256) < rule.min_k:
        found.append(
            Violation(EDGE_K_MIN, f"K={k if k is not None else 'unknown'} is below {rule.min_k}")
        )
    tail = None if k is None else k_tail_violation(entry, m, n, k, scale_pad, k_pad)
    return found + ([tail] if tail else [])


def is_safe(
    entry: KernelEntry,
    m: int,
    n: int,
    k: int | None,
    *,
    scale_pad: str = "driver",
    k_pad: str = "none",
) -> bool:
    return not violations(entry, m, n, k, scale_pad=scale_pad, k_pad=k_pad)


def padded_launch(
    entry: KernelEntry, m: int, n: int, k: int, *, scale_pad: str = "driver", k_pad: str = "none"
) -> PaddedLaunch:
    """The remedy for `entry` at (M, N, K): run on padded buffers, then slice D[:M, :N]. A K
    tail unsafe under the given padding is padded with zero A and B columns and E8M0 1.0
    scales (f4pipe's own padding); a safe one keeps the padding asked for."""
    rule = edge_rule(entry)
    fix_tail = k_tail_violation(entry, m, n, k, scale_pad, k_pad) is not None
    return PaddedLaunch(
        n_kernel=round_up(n, rule.n_multiple),
        d_row_multiple=max(rule.d_row_multiple, D_ROW_ALIGN),
        b_slack_bytes=B_PREFETCH_SLACK if k < rule.min_k else 0,
        k_pad="zeros" if fix_tail else k_pad,
        scale_pad="driver" if fix_tail else scale_pad,
    )


def check_policy(policy: str) -> None:
    if policy not in EDGE_POLICIES:
        raise ConfigError(f"edge policy {policy!r}: use one of {', '.join(EDGE_POLICIES)}")


def reproducer(
    kernel: str,
    m: int,
    n: int,
    k: int,
    *,
    order: str | None = None,
    co_dir: str | None = None,
    scale_pad: str = "driver",
    k_pad: str = "none",
) -> str:
    """The `f4pipe gemm` command that runs this kernel and shape unprotected on the emulator
    (exit 1 on a wrong result or a race, 2 on an access outside the buffers)."""
    where = f"--co-dir {co_dir}" if co_dir else "--co-dir $AITER_ASM_DIR"
    cmd = (
        f"f4pipe gemm --device emulator {where} --kernel {kernel} "
        f"-m {m} -n {n} -k {k} --iters 0 --unsafe"
    )
    if scale_pad != "driver":
        cmd += f" --scale-padding {scale_pad}"
    if k_pad != "none":
        cmd += f" --k-padding {k_pad}"
    if order:
        cmd += f" --workgroup-order {order}"
    return cmd


#: The K-tail rule's evidence in the disassembly (every kernel; f4pipe.pipeline.edgesweep.
#: k_loop_evidence reads it).
K_TAIL_EVIDENCE = (
    "the K loop adds 256 to its counter while it is below K, so the last block reads past K; "
    "the A and B loads are bounded by the tile's rows, not by K"
)


def evidence_for(entry: KernelEntry, found: list[Violation]) -> str:
    """The disassembly's evidence for the rules broken: the store rule's, the K tail's."""
    parts = []
    if any(v.edge_class not in (EDGE_K_TAIL, EDGE_K_TAIL_ROW) for v in found):
        parts.append(edge_rule(entry).evidence)
    if any(v.edge_class in (EDGE_K_TAIL, EDGE_K_TAIL_ROW) for v in found):
        parts.append(K_TAIL_EVIDENCE)
    return "; ".join(parts)


class UnsafeShapeError(ShapeError):
    """A kernel was asked to run a shape its edge rules mark unsafe, without an override."""


def refusal(
    entry: KernelEntry, m: int, n: int, k: int, *, scale_pad: str = "driver", k_pad: str = "none"
) -> UnsafeShapeError:
    """The error naming the broken rules, their evidence and the ways forward."""
    found = violations(entry, m, n, k, scale_pad=scale_pad, k_pad=k_pad)
    remedy = padded_launch(entry, m, n, k, scale_pad=scale_pad, k_pad=k_pad).describe(n)
    return UnsafeShapeError(
        f"{short_name(entry.name)} is unsafe at M={m} N={n} K={k}: "
        + "; ".join(v.message for v in found)
        + f" ({evidence_for(entry, found)}). Evidence: the shape-edge safety table "
        "(f4pipe safety; results/<aiter_id>/safety.parquet); reproduce with "
        f"`{reproducer(entry.name, m, n, k, scale_pad=scale_pad, k_pad=k_pad)}`. "
        f"Use --pad-output to run it safely ({remedy}), another kernel, or --unsafe"
    )


# --- the one shape check -----------------------------------------------------------------------


def check_shape(
    m: int,
    n: int,
    k: int | None,
    log2_k_split: int = 0,
    *,
    entry: KernelEntry | None = None,
    scale_pad: str = "driver",
    k_pad: str = "none",
    edge_policy: str = "refuse",
    auto_split: bool = False,
) -> list[Violation]:
    """The one check of a GEMM shape that every entry point makes (`f4pipe gemm`, `f4pipe
    predict`, run_gemm, the tile heuristic, the launch geometry), so that a shape is refused
    with the same words wherever it is given. Raises ShapeError naming the broken rule and
    what to use instead (ConfigError for a padding or policy name).

    With `entry` (and K known) it also holds the shape against that kernel: its split, then
    its edge rules. Under edge_policy "refuse" a broken edge rule raises UnsafeShapeError;
    under "pad" or "unsafe" the violations are returned, for the caller to pad or to run as
    asked. K None (the heuristic, before a K is given) skips the K rules; auto_split admits
    log2_k_split -1, the heuristic's "choose the split"."""
    check_paddings(scale_pad, k_pad)
    check_policy(edge_policy)
    _check_dims(m, n, k)
    _check_split(k, log2_k_split, auto_split)
    if entry is None or k is None:
        return []
    if log2_k_split > 0 and not entry.splitk:
        raise ShapeError(
            f"{entry.name} is not a splitK kernel: it cannot split K "
            f"(log2_k_split={log2_k_split}); use a splitK kernel (BpreShuffle 256x256 or "
            "128x512) or no split (--splitk 0)"
        )
    found = violations(entry, m, n, k, scale_pad=scale_pad, k_pad=k_pad)
    if found and edge_policy == "refuse":
        raise refusal(entry, m, n, k, scale_pad=scale_pad, k_pad=k_pad)
    return found


def _check_dims(m: int, n: int, k: int | None) -> None:
    """M, N (and K when known) against the kernarg's range and the operand layouts' granules."""
    dims = (m, n) if k is None else (m, n, k)
    given = f"M={m} N={n}" + ("" if k is None else f" K={k}")
    if min(dims) < 1:
        raise ShapeError(f"M, N, K must be positive, got {given}")
    if max(dims) > MAX_DIM:
        raise ShapeError(
            f"{given}: each must be at most {MAX_DIM} (the kernarg's M, N, K are "
            "32-bit and strides are counted in 32-bit registers)"
        )
    if n % N_ALIGN:
        raise ShapeError(
            f"N={n} is not a multiple of {N_ALIGN} (the kernels require N % 16 == 0); "
            f"use N={round_up(n, N_ALIGN)}"
        )
    if k is not None and k % K_ALIGN:
        raise ShapeError(
            f"K={k} is not a multiple of {K_ALIGN} (the B pre-shuffle's K tile is 64 elements; "
            f"A rows and the E8M0 scales need 32); use K={round_up(k, K_ALIGN)}"
        )


def _check_split(k: int | None, log2_k_split: int, auto_split: bool) -> None:
    """The split's range, and that K cuts into whole 256-element chunks of equal count."""
    lowest = AUTO_SPLIT if auto_split else 0
    if not lowest <= log2_k_split <= MAX_LOG2_K_SPLIT:
        raise ShapeError(
            f"log2_k_split={log2_k_split} out of range 0..{MAX_LOG2_K_SPLIT} (-1 asks the tile "
            "heuristic to choose the split)"
        )
    if log2_k_split <= 0 or k is None:
        return
    if k % SPLITK_K_ALIGN:
        raise ShapeError(
            f"K={k} with log2_k_split={log2_k_split}: a split K that is not a multiple of "
            f"{SPLITK_K_ALIGN} has not been examined (the chunks are whole 256-element blocks); "
            "use log2_k_split=0"
        )
    if k % (1 << log2_k_split):
        raise ShapeError(
            f"K={k} is not divisible by the split count {1 << log2_k_split} "
            f"(log2_k_split={log2_k_split})"
        )
