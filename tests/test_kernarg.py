"""The kernarg table, packed bytes, shape rules, buffer layout and launch geometry."""

from __future__ import annotations

import struct

import pytest

from f4pipe.aiter.shaperules import check_shape
from f4pipe.core.errors import ShapeError
from f4pipe.host.kernarg import (
    KERNARG_FIELDS,
    KERNARG_SIZE,
    BufferLayout,
    gemm_kernarg,
    launch_geometry,
    pack_kernarg,
    unpack_kernarg,
)


def test_table_is_16_byte_slots_ending_at_0x174():
    offsets = [f.offset for f in KERNARG_FIELDS]
    assert offsets == [16 * i for i in range(len(KERNARG_FIELDS))]
    assert KERNARG_SIZE == 0x174 == KERNARG_FIELDS[-1].offset + KERNARG_FIELDS[-1].size
    assert all(f.size <= 16 for f in KERNARG_FIELDS)
    names = [f.name for f in KERNARG_FIELDS]
    assert names.index("stride_C0") * 16 == 0x80 and names.index("log2_k_split") * 16 == 0x170


def test_gemm_kernarg_bytes():
    layout = BufferLayout(m=300, n=2048, k=1024)
    blob = gemm_kernarg(
        layout=layout,
        ptr_d=0x1111_2222_3333_4444,
        ptr_a=0xA000,
        ptr_b=0xB000,
        ptr_scale_a=0x5A00,
        ptr_scale_b=0x5B00,
        alpha=1.5,
        log2_k_split=2,
    )
    assert len(blob) == 0x174

    def u32(off):
        return struct.unpack_from("<I", blob, off)[0]

    def u64(off):
        return struct.unpack_from("<Q", blob, off)[0]

    assert u64(0x00) == 0x1111_2222_3333_4444 and u64(0x10) == 0  # ptr_D, ptr_C
    assert u64(0x20) == 0xA000 and u64(0x30) == 0xB000
    assert struct.unpack_from("<f", blob, 0x40)[0] == 1.5
    assert struct.unpack_from("<f", blob, 0x50)[0] == 0.0  # beta
    assert u32(0x60) == 0  # stride_D0 is dead
    assert u32(0x80) == 2048  # stride_C0 = N, used for D
    assert u32(0xA0) == 1024 and u32(0xC0) == 1024  # A/B strides in fp4 elements = K
    assert (u32(0xE0), u32(0xF0), u32(0x100)) == (300, 2048, 1024)
    assert u64(0x110) == 0x5A00 and u64(0x120) == 0x5B00
    assert u32(0x130) == 32 and u32(0x150) == 32  # round_up(1024/32, 8)
    assert u32(0x170) == 2
    # padding bytes inside each slot are zero
    for f in KERNARG_FIELDS:
        end = min(f.offset + 16, KERNARG_SIZE)
        assert blob[f.offset + f.size : end] == bytes(end - f.offset - f.size)
    assert unpack_kernarg(blob)["N"] == 2048


def test_pack_rejects_unknown_and_oversized_values():
    with pytest.raises(ShapeError, match="unknown kernarg"):
        pack_kernarg({"ptr_E": 1})
    with pytest.raises(ShapeError, match="does not fit"):
        pack_kernarg({"M": 2**32})


@pytest.mark.parametrize(
    ("m", "n", "k", "log2", "match"),
    [
        (512, 1000, 2048, 0, "N % 16"),
        (512, 1024, 2000, 0, "not a multiple of 64"),
        (512, 1024, 2176, 1, "not a multiple of 256 has not been examined"),
        (0, 1024, 2048, 0, "positive"),
        (512, 1024, 2048, -1, "out of range"),
        (512, 1024, 256, 9, "divisible by the split count 512"),
    ],
)
def test_shape_errors(m, n, k, log2, match):
    with pytest.raises(ShapeError, match=match):
        check_shape(m, n, k, log2)


def test_k_with_a_tail_is_a_shape_and_its_padding_lays_out_whole_blocks():
    """K % 256 != 0 is accepted (the K-tail rule judges it); K padding widens the rows only."""
    check_shape(33, 256, 2176)
    plain = BufferLayout(m=33, n=256, k=2176)
    padded = BufferLayout(m=33, n=256, k=2176, k_stride=2304)
    assert plain.row_k == 2176 and padded.row_k == 2304
    assert padded.a_nbytes == 256 * 1152 and plain.a_nbytes == 256 * 1088
    assert plain.scale_a_shape == padded.scale_a_shape == (256, 72)
    blob = gemm_kernarg(
        layout=padded,
        ptr_d=0,
        ptr_a=0,
        ptr_b=0,
        ptr_scale_a=0,
        ptr_scale_b=0,
        alpha=1.0,
        log2_k_split=0,
    )
    fields = unpack_kernarg(blob)
    assert (fields["K"], fields["stride_A0"], fields["stride_B0"]) == (2176, 2304, 2304)


def test_buffer_layout_padding():
    layout = BufferLayout(m=17, n=528, k=256)
    assert layout.a_rows == 256 and layout.b_rows == 768
    assert layout.a_nbytes == 256 * 128 and layout.b_nbytes == 768 * 128
    assert layout.scale_a_shape == (256, 8) and layout.scale_b_shape == (768, 8)
    assert layout.d_shape == (32, 528) and layout.d_nbytes == 32 * 528 * 2


def test_geometry_without_split():
    g = launch_geometry(256, 256, m=300, n=2048, k=1024)
    assert g.grid == (8, 2, 1) and g.block == (256, 1, 1) and g.gdz == 1


@pytest.mark.parametrize(
    ("k", "log2", "k_per_tg", "gdz"),
    [(4096, 1, 2048, 2), (4096, 4, 256, 16), (1024, 3, 256, 4), (256, 4, 256, 1), (768, 1, 512, 2)],
)
def test_geometry_splitk(k, log2, k_per_tg, gdz):
    g = launch_geometry(256, 256, m=256, n=1024, k=k, log2_k_split=log2)
    assert (g.k_num, g.k_per_tg, g.gdz) == (1 << log2, k_per_tg, gdz)
    assert g.grid == (4, 1, gdz)
