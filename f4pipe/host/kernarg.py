"""The f4gemm kernel ABI on the host side: the kernarg block, buffer layout and launch geometry.

KERNARG_FIELDS is the one declarative table of the 0x174-byte block (every argument in its own
16-byte slot; offsets from the code objects' metadata notes). Packing, unpacking, the emulator
and the reports all read it. Facts worth knowing (seed README, docs/reference/aiter.md):
- A/B strides are in fp4 elements (= K), not bytes; the kernel halves them itself.
- stride_D0 is dead: the kernel stores D with stride_C0, so stride_C0 = N.
- ptr_C and beta are loaded but never used (no bias path).
- log2_k_split is read only by the splitK kernels; the noBpreShuffle kernel's metadata stops
  before it (368 bytes), but every driver passes the full 0x174 bytes.
Which shapes a launch accepts is not decided here: launch_geometry asks the one shape check,
f4pipe.aiter.shaperules.check_shape.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from f4pipe.aiter.shaperules import SPLITK_K_ALIGN, check_shape
from f4pipe.core.errors import ShapeError
from f4pipe.core.numerics import padded_scale_shape, round_up

CTYPE_FORMATS: dict[str, str] = {"void*": "Q", "float": "f", "uint32_t": "I", "int32_t": "i"}


@dataclass(frozen=True)
class KernargField:
    """One kernarg slot: name (aiter's), byte offset, C type."""

    name: str
    offset: int
    ctype: str

    @property
    def format(self) -> str:
        """struct format (little-endian) of the value."""
        return "<" + CTYPE_FORMATS[self.ctype]

    @property
    def size(self) -> int:
        return struct.calcsize(self.format)


KERNARG_FIELDS: tuple[KernargField, ...] = (
    KernargField("ptr_D", 0x00, "void*"),
    KernargField("ptr_C", 0x10, "void*"),
    KernargField("ptr_A", 0x20, "void*"),
    KernargField("ptr_B", 0x30, "void*"),
    KernargField("alpha", 0x40, "float"),
    KernargField("beta", 0x50, "float"),
    KernargField("stride_D0", 0x60, "uint32_t"),
    KernargField("stride_D1", 0x70, "uint32_t"),
    KernargField("stride_C0", 0x80, "uint32_t"),
    KernargField("stride_C1", 0x90, "uint32_t"),
    KernargField("stride_A0", 0xA0, "uint32_t"),
    KernargField("stride_A1", 0xB0, "uint32_t"),
    KernargField("stride_B0", 0xC0, "uint32_t"),
    KernargField("stride_B1", 0xD0, "uint32_t"),
    KernargField("M", 0xE0, "uint32_t"),
    KernargField("N", 0xF0, "uint32_t"),
    KernargField("K", 0x100, "uint32_t"),
    KernargField("ptr_ScaleA", 0x110, "void*"),
    KernargField("ptr_ScaleB", 0x120, "void*"),
    KernargField("stride_ScaleA0", 0x130, "uint32_t"),
    KernargField("stride_ScaleA1", 0x140, "uint32_t"),
    KernargField("stride_ScaleB0", 0x150, "uint32_t"),
    KernargField("stride_ScaleB1", 0x160, "uint32_t"),
    KernargField("log2_k_split", 0x170, "int32_t"),
)
KERNARG_SIZE = 0x174
KERNARG_BY_NAME: dict[str, KernargField] = {f.name: f for f in KERNARG_FIELDS}

#: Work-items per workgroup (4 x wave64) for all 35 kernels.
BLOCK: tuple[int, int, int] = (256, 1, 1)


def pack_kernarg(values: Mapping[str, int | float]) -> bytes:
    """The 0x174-byte block; fields not given are 0 (the dead ones), unknown names are errors."""
    unknown = sorted(set(values) - KERNARG_BY_NAME.keys())
    if unknown:
        raise ShapeError(f"unknown kernarg field(s) {unknown}; known: {list(KERNARG_BY_NAME)}")
    blob = bytearray(KERNARG_SIZE)
    for f in KERNARG_FIELDS:
        value = values.get(f.name, 0)
        try:
            struct.pack_into(f.format, blob, f.offset, value)
        except struct.error as exc:
            raise ShapeError(f"kernarg {f.name}={value!r} does not fit {f.ctype}: {exc}") from None
    return bytes(blob)


def unpack_kernarg(blob: bytes) -> dict[str, int | float]:
    """Every field of a kernarg block by name (inverse of pack_kernarg)."""
    if len(blob) < KERNARG_SIZE:
        raise ShapeError(f"kernarg block is {len(blob)} bytes, expected {KERNARG_SIZE}")
    return {f.name: struct.unpack_from(f.format, blob, f.offset)[0] for f in KERNARG_FIELDS}


# --- buffers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BufferLayout:
    """Device buffer shapes for one GEMM (all in bytes/elements as the kernels index them).

    A/B rows are over-allocated to a multiple of 256 so an edge tile never touches unmapped
    memory; D is [round_up(M, 32), N] bf16 as aiter allocates it; scales are padded.
    f4pipe.aiter.shaperules's remedy for unsafe edges asks for more D rows (d_row_multiple) and
    zeroed
    slack after B (b_slack_bytes); N is then already the padded N the kernel sees.
    """

    m: int
    n: int
    k: int
    d_row_multiple: int = 32
    b_slack_bytes: int = 0
    k_stride: int = 0  # A and B row length in elements (0 = K; larger = zero K padding)

    @property
    def row_k(self) -> int:
        """Elements per A and B row as laid out (stride_A0 = stride_B0)."""
        return self.k_stride or self.k

    @property
    def a_rows(self) -> int:
        return round_up(self.m, 256)

    @property
    def b_rows(self) -> int:
        return round_up(self.n, 256)

    @property
    def a_nbytes(self) -> int:
        return self.a_rows * self.row_k // 2

    @property
    def b_nbytes(self) -> int:
        return self.b_rows * self.row_k // 2 + self.b_slack_bytes

    @property
    def scale_a_shape(self) -> tuple[int, int]:
        return padded_scale_shape(self.m, self.k)

    @property
    def scale_b_shape(self) -> tuple[int, int]:
        return padded_scale_shape(self.n, self.k)

    @property
    def scale_a_nbytes(self) -> int:
        rows, cols = self.scale_a_shape
        return rows * cols

    @property
    def scale_b_nbytes(self) -> int:
        rows, cols = self.scale_b_shape
        return rows * cols

    @property
    def d_rows(self) -> int:
        return round_up(self.m, self.d_row_multiple)

    @property
    def d_shape(self) -> tuple[int, int]:
        return self.d_rows, self.n

    @property
    def d_nbytes(self) -> int:
        return self.d_rows * self.n * 2


# --- launch geometry ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchGeometry:
    """Grid (in workgroups) and block of one launch; gdz > 1 only for a real K split."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    k_num: int  # requested split count, 1 << log2_k_split
    k_per_tg: int  # K elements per workgroup along z

    @property
    def gdz(self) -> int:
        return self.grid[2]


def launch_geometry(
    tile_m: int, tile_n: int, m: int, n: int, k: int, log2_k_split: int = 0
) -> LaunchGeometry:
    """gdx = ceil(N/tile_N), gdy = ceil(M/tile_M); splitK: k_per_tg = round_up(K/k_num, 256),
    gdz = ceil(K/k_per_tg) (so a split that would leave chunks under 256 collapses)."""
    check_shape(m, n, k, log2_k_split)
    gdx, gdy, gdz, k_per_tg = grid_dims(tile_m, tile_n, m, n, k, log2_k_split)
    return LaunchGeometry(
        grid=(gdx, gdy, gdz), block=BLOCK, k_num=1 << log2_k_split, k_per_tg=k_per_tg
    )


def grid_dims(tile_m, tile_n, m, n, k, log2_k_split):
    """(gdx, gdy, gdz, k_per_tg) of launch_geometry, for ints or numpy integer arrays alike
    (the batch predictor evaluates it on every row at once); shapes unchecked."""
    k_per_tg = round_up(k // (1 << log2_k_split), SPLITK_K_ALIGN)
    return -(-n // tile_n), -(-m // tile_m), -(-k // k_per_tg), k_per_tg


def gemm_kernarg(
    *,
    layout: BufferLayout,
    ptr_d: int,
    ptr_a: int,
    ptr_b: int,
    ptr_scale_a: int,
    ptr_scale_b: int,
    alpha: float,
    log2_k_split: int,
) -> bytes:
    """The kernarg block of one f4gemm launch (beta = 0, ptr_C = 0: the only path aiter tests)."""
    return pack_kernarg(
        {
            "ptr_D": ptr_d,
            "ptr_C": 0,
            "ptr_A": ptr_a,
            "ptr_B": ptr_b,
            "alpha": alpha,
            "beta": 0.0,
            "stride_C0": layout.n,
            "stride_A0": layout.row_k,
            "stride_B0": layout.row_k,
            "M": layout.m,
            "N": layout.n,
            "K": layout.k,
            "ptr_ScaleA": ptr_scale_a,
            "ptr_ScaleB": ptr_scale_b,
            "stride_ScaleA0": layout.scale_a_shape[1],
            "stride_ScaleB0": layout.scale_b_shape[1],
            "log2_k_split": log2_k_split,
        }
    )
