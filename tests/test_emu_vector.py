"""Vector ALU on the emulator: exact bits per lane, f32 mode, bf16 rounding, lane permutes,
VCC, and GPR indexing."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from emu_snippets import f32_bits, make_executor, u32

LANE = np.arange(64)


def _run(toolchain, asm: str, vgprs: dict[int, np.ndarray], sgprs=None, **kw):
    ex = make_executor(toolchain, asm, **kw)
    for reg, value in vgprs.items():
        ex.vgpr[reg] = value
    for reg, value in (sgprs or {}).items():
        ex.sgpr[reg] = value
    ex.run()
    return ex


def test_integer_ops_with_sgpr_literal_and_inline_sources(toolchain) -> None:
    ex = _run(
        toolchain,
        """
        v_add_u32_e32 v10, s0, v1
        v_sub_u32_e32 v11, s0, v1
        v_subrev_u32_e32 v12, s0, v1
        v_and_b32_e32 v13, 0x3ff, v1
        v_lshrrev_b32_e32 v14, 4, v1
        v_lshlrev_b32_e32 v15, 36, v1
        v_add_u32_e64 v16, v1, -1
        v_mul_lo_u32 v17, v1, v1
        v_mul_hi_u32 v18, v1, s1
        v_add_i32 v19, v1, 64
        v_mov_b32_e32 v20, 1.0
        """,
        {1: u32(LANE * 0x01010101 + 0xFFFF0000)},
        {0: 1000, 1: 0x80000001},
    )
    a = (LANE * 0x01010101 + 0xFFFF0000) & 0xFFFFFFFF
    assert np.array_equal(ex.vgpr[10, 0], u32(1000 + a))
    assert np.array_equal(ex.vgpr[11, 0], u32(1000 - a))
    assert np.array_equal(ex.vgpr[12, 0], u32(a - 1000))
    assert np.array_equal(ex.vgpr[13, 0], u32(a & 0x3FF))
    assert np.array_equal(ex.vgpr[14, 0], u32(a >> 4))
    assert np.array_equal(ex.vgpr[15, 0], u32(a << 4))  # shift count is mod 32
    assert np.array_equal(ex.vgpr[16, 0], u32(a - 1))
    assert np.array_equal(ex.vgpr[17, 0], u32([(int(x) * int(x)) & 0xFFFFFFFF for x in a]))
    assert np.array_equal(ex.vgpr[18, 0], u32([(int(x) * 0x80000001) >> 32 for x in a]))
    assert np.array_equal(ex.vgpr[19, 0], u32(a + 64))
    assert (ex.vgpr[20, 0] == 0x3F800000).all()


def test_mul_i32_i24_sign_extends_24_bits(toolchain) -> None:
    vals = u32([0x00FFFFFF, 0xFF000003, 0x00800000, 5] * 16)
    ex = _run(toolchain, "v_mul_i32_i24_e32 v2, 0x420, v1\nv_mul_i32_i24_e64 v3, v1, 16", {1: vals})
    s24 = np.array([-1, 3, -(2**23), 5] * 16)
    assert np.array_equal(ex.vgpr[2, 0], u32(s24 * 0x420))
    assert np.array_equal(ex.vgpr[3, 0], u32(s24 * 16))


def test_f32_multiply_flushes_denormals_in_and_out_and_rounds_to_nearest_even(toolchain) -> None:
    a = np.array([1e-39, 1.5, 1e-20, 1.0 + 2**-23, 3.0] * 12 + [1, 1, 1, 1], dtype=np.float32)
    b = np.array([1e5, 2.0, 1e-20, 1.0 + 2**-23, -0.0] * 12 + [1, 1, 1, 1], dtype=np.float32)
    ex = _run(toolchain, "v_mul_f32_e32 v3, v1, v2", {1: f32_bits(a), 2: f32_bits(b)})
    got = ex.vgpr[3, 0].view(np.float32)
    assert got[0] == 0.0  # denormal input flushed: 0 * 1e5
    assert got[1] == 3.0
    assert got[2] == 0.0 and ex.vgpr[3, 0, 2] == 0  # 1e-40 result is denormal: flushed to +0
    assert ex.vgpr[3, 0, 3] == f32_bits(np.float32(1.0 + 2**-22))  # (1+u)^2 = 1+2u+u^2: RNE
    assert ex.vgpr[3, 0, 4] == 0x80000000  # 3 * -0 = -0
    ex = _run(
        toolchain, "v_mul_f32_e32 v3, v1, v2", {1: f32_bits(a), 2: f32_bits(b)}, flush_denorms=False
    )
    assert ex.vgpr[3, 0].view(np.float32)[0] == np.float32(1e-39) * np.float32(1e5)


def test_conversions_u32_f32_and_rcp(toolchain) -> None:
    f = np.array([3.99, -2.5, 5e9, np.nan, np.inf, 0.5, 16777217.0, 1.0] * 8, dtype=np.float32)
    u = u32([0xFFFFFFFF, 16777217, 3, 0] * 16)
    ex = _run(
        toolchain,
        "v_cvt_u32_f32_e32 v3, v1\nv_cvt_f32_u32_e32 v4, v2\nv_rcp_iflag_f32_e32 v5, v1",
        {1: f32_bits(f), 2: u},
    )
    assert list(ex.vgpr[3, 0, :8]) == [3, 0, 0xFFFFFFFF, 0, 0xFFFFFFFF, 0, 16777216, 1]
    assert list(ex.vgpr[4, 0, :4].view(np.float32)) == [4294967296.0, 16777216.0, 3.0, 0.0]
    assert ex.vgpr[5, 0].view(np.float32)[7] == 1.0
    assert ex.vgpr[5, 0].view(np.float32)[1] == np.float32(-0.4)


def test_cvt_pk_bf16_rounds_each_half_to_nearest_even(toolchain) -> None:
    lo = np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, -3.0e38, 1.0 + 2**-8 + 2**-20] * 16, np.float32)
    hi = np.array([np.float32(np.nan), 65504.0, 1e-30, -(1.0 + 2**-7)] * 16, np.float32)
    ex = _run(toolchain, "v_cvt_pk_bf16_f32 v3, v1, v2", {1: f32_bits(lo), 2: f32_bits(hi)})
    out = ex.vgpr[3, 0]
    got_lo = (out & 0xFFFF).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    got_hi = (out >> 16).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    assert got_lo[0] == 1.0  # tie -> even
    assert got_lo[1] == 1.0 + 2**-6  # tie -> even (up)
    assert got_lo[3] == 1.0 + 2**-7  # above the tie -> up
    assert got_lo[2] == -2.99e38 or abs(got_lo[2] + 3.0e38) < 3e36
    assert np.isnan(got_hi[0])
    assert got_hi[1] == 65536.0
    assert got_hi[3] == -(1.0 + 2**-7)


def test_compare_writes_vcc_and_cndmask_selects_per_lane(toolchain) -> None:
    ex = _run(
        toolchain,
        """
        v_cmp_le_u32_e32 vcc, s0, v1
        v_cndmask_b32_e32 v2, v3, v4, vcc
        s_mov_b64 s[10:11], vcc
        """,
        {1: u32(LANE), 3: u32(np.full(64, 7)), 4: u32(100 + LANE)},
        {0: 40},
    )
    want = LANE >= 40
    assert np.array_equal(ex.vgpr[2, 0], u32(np.where(want, 100 + LANE, 7)))
    mask = int(ex.sgpr[10, 0]) | int(ex.sgpr[11, 0]) << 32
    assert mask == sum(1 << i for i in range(40, 64))


def test_readfirstlane_and_accvgpr_moves(toolchain) -> None:
    ex = _run(
        toolchain,
        """
        v_readfirstlane_b32 s10, v1
        v_accvgpr_write_b32 a5, v1
        v_accvgpr_write_b32 a6, 0
        v_accvgpr_read_b32 v2, a5
        """,
        {1: u32(77 + LANE), 256 + 6: u32(np.ones(64))},
    )
    assert ex.sgpr[10, 0] == 77
    assert np.array_equal(ex.vgpr[256 + 5, 0], u32(77 + LANE))
    assert (ex.vgpr[256 + 6, 0] == 0).all()
    assert np.array_equal(ex.vgpr[2, 0], u32(77 + LANE))


def test_permlane16_swap_exchanges_rows_within_each_half(toolchain) -> None:
    ex = _run(toolchain, "v_permlane16_swap_b32 v1, v2", {1: u32(LANE), 2: u32(1000 + LANE)})
    rows = lambda r: np.arange(16 * r, 16 * r + 16)  # noqa: E731
    d, s = ex.vgpr[1, 0], ex.vgpr[2, 0]
    # vdst rows [a0 a1 a2 a3], vsrc [b0 b1 b2 b3] -> vdst [a0 b0 a2 b2], vsrc [a1 b1 a3 b3]
    assert np.array_equal(
        d, u32(np.concatenate([rows(0), 1000 + rows(0), rows(2), 1000 + rows(2)]))
    )
    assert np.array_equal(
        s, u32(np.concatenate([rows(1), 1000 + rows(1), rows(3), 1000 + rows(3)]))
    )


def test_gpr_indexing_offsets_src0_vgprs_and_agprs_but_not_sgprs(toolchain) -> None:
    ex = _run(
        toolchain,
        """
        s_mov_b32 s5, 3
        s_set_gpr_idx_on s5, gpr_idx(SRC0)
        v_accvgpr_read_b32 v20, a1
        v_mov_b32_e32 v21, v1
        v_mul_f32_e32 v22, s6, v1
        s_set_gpr_idx_off
        v_mov_b32_e32 v23, v1
        """,
        {
            1: f32_bits(np.full(64, 2.0)),
            4: f32_bits(np.full(64, 5.0)),
            256 + 4: u32(np.full(64, 44)),
        },
        {6: int(f32_bits(np.float32(3.0)))},
    )
    assert (ex.vgpr[20, 0] == 44).all()  # a1 + 3 -> a4
    assert (ex.vgpr[21, 0].view(np.float32) == 5.0).all()  # v1 + 3 -> v4
    assert (ex.vgpr[22, 0].view(np.float32) == 6.0).all()  # src0 is an SGPR: not indexed
    assert (ex.vgpr[23, 0].view(np.float32) == 2.0).all()  # indexing off again
    assert ex.sgpr[124, 0] & 0xF0FF == 0x1003  # M0[7:0] = index, M0[15:12] = mode


@pytest.mark.parametrize("waves", [1, 3])
def test_waves_with_different_gpr_indices_each_get_their_own(toolchain, waves: int) -> None:
    ex = make_executor(
        toolchain,
        """
        s_set_gpr_idx_on s2, gpr_idx(SRC0)
        v_mov_b32_e32 v30, v0
        s_set_gpr_idx_off
        """,
        workgroups=waves,
    )
    for r in range(8):
        ex.vgpr[r] = 1000 * r
    ex.run()
    for w in range(waves):
        assert (ex.vgpr[30, w] == 1000 * w).all()
