"""The emulator's instructions on any gfx950 backend (tests/isa_kernels.py): each case is a real
code object whose results are compared bit for bit between the emulator and, with F4PIPE_HW=1,
the HIP path (a gfx950 GPU, or in CI the HIP shim: tests/test_hipshim.py), and checked against
hand-computed values. `F4PIPE_HW=1 python -m pytest -m isa` on an MI355X validates the
emulator there (docs/user-guide.md, "Validating the emulator on an MI355X")."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from isa_kernels import LANE, Case, hw_mode, run_everywhere
from mfma_model import mfma_model, result_registers

from f4pipe.emu.device import EmulatorDevice

pytestmark = pytest.mark.isa
RNG = np.random.default_rng(54)


@pytest.fixture(scope="module")
def devices():
    """The emulator, and with F4PIPE_HW=1 the HIP device (a GPU, or the shim)."""
    found = {"emulator": EmulatorDevice()}
    if hw_mode():
        from f4pipe.devices.hipdevice import HipDevice

        found["hip"] = HipDevice.open()
    yield found
    if "hip" in found:
        found["hip"].close()


@pytest.mark.skipif(not hw_mode(), reason="F4PIPE_HW=1 only")
def test_hw_mode_runs_every_case_through_the_hip_path(devices) -> None:
    """What the HW mode compares against: a gfx950 device opened through hip-python."""
    hip = devices["hip"]
    assert hip.arch.startswith("gfx950"), hip.arch
    print(f"isa: HIP device {hip.device_id} ({hip.arch})")


def u32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64).astype(np.uint32)


def bf16_bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)


def bf16_values(bits) -> np.ndarray:
    return np.asarray(bits, np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)


# --- SALU and VALU ---------------------------------------------------------------------------


def test_salu_arithmetic_compares_and_selects(toolchain, devices) -> None:
    out = run_everywhere(
        toolchain,
        devices,
        Case(
            """
            s_mov_b32 s25, 0
            s_mov_b32 s10, 0xfffffff0
            s_add_u32 s11, s10, 0x20
            s_addc_u32 s12, 5, 0
            s_sub_u32 s13, 3, 7
            s_sub_i32 s14, -5, 9
            s_add_i32 s15, s10, 0x7fffffff
            s_mul_i32 s16, s10, -3
            s_mul_hi_u32 s17, s10, s10
            s_lshl_b32 s18, 0x12345, 8
            s_lshr_b32 s19, s10, 28
            s_and_b32 s20, s10, 0xff0f
            s_or_b32 s21, s10, 7
            s_cmp_lt_i32 s10, 2
            s_cselect_b32 s22, 11, 22
            s_cmp_lt_u32 s10, 2
            s_cselect_b32 s23, 11, 22
            s_movk_i32 s24, 0x100
            s_addk_i32 s24, 0xff00
            s_mov_b64 s[26:27], exec
            s_cmp_eq_u32 s24, 0
            s_cbranch_scc1 .Lskip
            s_mov_b32 s25, 1
            .Lskip:
            """,
            outputs=tuple(f"s{r}" for r in range(11, 28)),
        ),
    )
    got = {r: int(out[f"s{r}"][0]) for r in range(11, 28)}
    assert got[11] == 0x10 and got[12] == 6  # carry out of s_add_u32 into s_addc_u32
    assert got[13] == (3 - 7) & 0xFFFFFFFF and got[14] == (-14) & 0xFFFFFFFF
    assert got[15] == (0xFFFFFFF0 + 0x7FFFFFFF) & 0xFFFFFFFF
    assert got[16] == (0xFFFFFFF0 * 0xFFFFFFFD) & 0xFFFFFFFF
    assert got[17] == (0xFFFFFFF0 * 0xFFFFFFF0) >> 32
    assert (got[18], got[19], got[20], got[21]) == (0x1234500, 0xF, 0xFF00, 0xFFFFFFF7)
    assert (got[22], got[23]) == (11, 22)  # signed -16 < 2, unsigned not
    assert got[24] == 0 and got[25] == 0  # 0x100 + sign-extended 0xff00; the branch taken
    assert (got[26], got[27]) == (0xFFFFFFFF, 0xFFFFFFFF)
    assert all((out[f"s{r}"] == out[f"s{r}"][0]).all() for r in range(11, 28))


def test_valu_integer_ops_the_kernels_use(toolchain, devices) -> None:
    a = u32(RNG.integers(0, 2**32, 64))
    b = u32(RNG.integers(0, 2**32, 64))
    out = run_everywhere(
        toolchain,
        devices,
        Case(
            """
            s_mov_b32 s10, 0x12345
            v_lshrrev_b32_e32 v3, 10, v1
            v_lshlrev_b32_e32 v4, 4, v1
            v_and_b32_e32 v5, 0x3ff, v1
            v_add_u32_e32 v6, v1, v2
            v_sub_u32_e32 v7, s10, v1
            v_subrev_u32_e32 v8, s10, v1
            v_mul_lo_u32 v9, s10, v1
            v_mul_hi_u32 v10, v1, v2
            v_mul_i32_i24_e32 v11, 0x421, v1
            v_add_i32 v12, v1, 64
            v_cmp_le_u32_e32 vcc, v1, v2
            s_nop 1
            v_cndmask_b32_e32 v13, v1, v2, vcc
            v_readfirstlane_b32 s11, v2
            s_nop 4
            v_mov_b32_e32 v14, s11
            v_permlane16_swap_b32_e32 v15, v16
            """,
            regs={"v1": a, "v2": b, "v15": u32(LANE), "v16": u32(1000 + LANE)},
            outputs=tuple(f"v{r}" for r in range(3, 17)),
        ),
    )
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    s24 = ((a64 & 0xFFFFFF) ^ 0x800000) - 0x800000
    want = {
        3: a64 >> 10,
        4: a64 << 4,
        5: a64 & 0x3FF,
        6: a64 + b64,
        7: 0x12345 - a64,
        8: a64 - 0x12345,
        9: 0x12345 * a64,
        10: (a64 * b64) >> 32,
        11: 0x421 * s24,
        12: a64 + 64,
        13: np.where(a64 <= b64, b64, a64),
        14: np.full(64, b64[0]),
    }
    for r, w in want.items():
        assert np.array_equal(out[f"v{r}"], u32(w & 0xFFFFFFFF)), r
    rows = [np.arange(16 * k, 16 * k + 16) for k in range(4)]
    assert np.array_equal(
        out["v15"], u32(np.concatenate([rows[0], 1000 + rows[0], rows[2], 1000 + rows[2]]))
    )
    assert np.array_equal(
        out["v16"], u32(np.concatenate([rows[1], 1000 + rows[1], rows[3], 1000 + rows[3]]))
    )


def test_branches_barrier_compares_and_e64_forms(toolchain, devices) -> None:
    a = u32(RNG.integers(0, 2**32, 64))
    out = run_everywhere(
        toolchain,
        devices,
        Case(
            """
            s_mov_b32 s13, 7
            s_mov_b32 s14, 7
            s_mov_b32 s10, -3
            s_cmp_gt_i32 s10, 2
            s_cselect_b32 s11, 1, 0
            s_cmp_gt_u32 s10, 2
            s_cselect_b32 s12, 1, 0
            s_cmp_le_u32 s10, 2
            s_cbranch_scc0 .Lover
            s_mov_b32 s13, 99
            .Lover:
            s_barrier
            s_branch .Ljoin
            s_mov_b32 s14, 99
            .Ljoin:
            v_add_u32_e64 v8, v1, s10
            v_and_b32_e64 v9, v1, 15
            v_mul_i32_i24_e64 v10, v1, -4
            v_mov_b32_e32 v11, s12
            v_lshlrev_b32_e32 v7, 4, v0
            buffer_store_dwordx4 v[8:11], v7, s[4:7], 0 offen
            """,
            regs={"v1": a},
            mem=np.zeros(256, np.uint32),
            outputs=("s11", "s12", "s13", "s14"),
        ),
    )
    assert [int(out[f"s{r}"][0]) for r in (11, 12, 13, 14)] == [0, 1, 7, 7]
    a64 = a.astype(np.int64)
    s24 = ((a64 & 0xFFFFFF) ^ 0x800000) - 0x800000
    rows = out["mem"].reshape(64, 4)
    assert np.array_equal(rows[:, 0], u32((a64 - 3) & 0xFFFFFFFF))
    assert np.array_equal(rows[:, 1], u32(a64 & 15))
    assert np.array_equal(rows[:, 2], u32((s24 * -4) & 0xFFFFFFFF))
    assert (rows[:, 3] == 1).all()


def test_unsigned_division_through_rcp_iflag(toolchain, devices) -> None:
    """The kernels' division idiom (LLVM's expansion of a 32-bit udiv): v_rcp_iflag_f32's
    estimate, refined and corrected in integers, so the quotient is exact wherever the
    estimate is within the error the correction absorbs (hardware's 1 ulp included)."""
    n = u32(RNG.integers(0, 2**32, 64))
    d = u32(RNG.integers(1, 2**16, 64))
    out = run_everywhere(
        toolchain,
        devices,
        Case(
            """
            v_cvt_f32_u32_e32 v4, v2
            v_rcp_iflag_f32_e32 v4, v4
            s_nop 0
            v_mul_f32_e32 v4, 0x4f7ffffe, v4
            v_cvt_u32_f32_e32 v4, v4
            v_sub_u32_e32 v5, 0, v2
            v_mul_lo_u32 v5, v5, v4
            v_mul_hi_u32 v5, v4, v5
            v_add_u32_e32 v4, v4, v5
            v_mul_hi_u32 v4, v1, v4
            v_mul_lo_u32 v5, v4, v2
            v_sub_u32_e32 v6, v1, v5
            v_add_u32_e32 v7, 1, v4
            v_cmp_le_u32_e32 vcc, v2, v6
            s_nop 1
            v_cndmask_b32_e32 v4, v4, v7, vcc
            v_subrev_u32_e32 v8, v2, v6
            v_cndmask_b32_e32 v6, v6, v8, vcc
            v_add_u32_e32 v7, 1, v4
            v_cmp_le_u32_e32 vcc, v2, v6
            s_nop 1
            v_cndmask_b32_e32 v4, v4, v7, vcc
            """,
            regs={"v1": n, "v2": d},
            outputs=("v4",),
        ),
    )
    assert np.array_equal(out["v4"], n // d)


def test_every_alu_and_memory_op_of_the_kernels_has_a_case(f4gemm_dir) -> None:
    """Coverage: every mnemonic of the 35 shipped kernels is in a case above or in the
    harness's own prologue and epilogue (tests/isa_kernels.py)."""
    from pathlib import Path

    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.arch.decode import decode_all
    from f4pipe.codeobj.codeobject import CodeObject

    used = set()
    for path in (Path(__file__), Path(__file__).with_name("isa_kernels.py")):
        text = path.read_text().replace("\\t", " ")  # the harness's lines start with a tab
        used |= set(re.findall(r"(?<![a-z])((?:v|s|ds|buffer)_[a-z0-9_]+)", text))
    shipped = set()
    for entry in read_manifest(f4gemm_dir):
        co = CodeObject.read(f4gemm_dir / entry.co_name)
        shipped |= {i.text_name for i in decode_all(co.section_bytes(".text"))}
    assert sorted(shipped - used) == []


def test_valu_float_ops_and_bf16_packing(toolchain, devices) -> None:
    x = np.array([1.5, -2.25, 1e-39, 3.0e38, 7.0, 0.1, 1 + 2**-8, 1 + 3 * 2**-8] * 8, np.float32)
    n = u32(RNG.integers(1, 2**31, 64))
    out = run_everywhere(
        toolchain,
        devices,
        Case(
            """
            s_mov_b32 s10, 0x40400000
            v_mul_f32_e32 v3, s10, v1
            v_mul_f32_e32 v4, 0x3e800000, v1
            v_cvt_f32_u32_e32 v5, v2
            v_cvt_u32_f32_e32 v6, v5
            v_cvt_pk_bf16_f32 v7, v1, v3
            """,
            regs={"v1": x.view(np.uint32), "v2": n},
            outputs=("v3", "v4", "v5", "v6", "v7"),
        ),
    )
    flush = lambda v: np.where(np.abs(v) < np.finfo(np.float32).tiny, np.float32(0), v)  # noqa: E731
    with np.errstate(over="ignore"):  # 3e38 x 3 is inf, on every side
        want3 = flush(flush(x) * np.float32(3.0)).astype(np.float32)
    assert np.array_equal(out["v3"], want3.view(np.uint32))
    assert np.array_equal(
        out["v4"], flush(flush(x) * np.float32(0.25)).astype(np.float32).view(np.uint32)
    )
    assert np.array_equal(out["v5"], n.astype(np.float32).view(np.uint32))
    assert np.array_equal(out["v6"], u32(n.astype(np.float32).astype(np.float64)))
    pk = bf16_bits(flush(x)) | (bf16_bits(want3) << 16)  # each half RNE, denormals flushed
    assert np.array_equal(out["v7"], u32(pk))


def test_accvgpr_moves_and_gpr_indexing(toolchain, devices) -> None:
    out = run_everywhere(
        toolchain,
        devices,
        Case(
            """
            v_accvgpr_write_b32 a5, v1
            v_accvgpr_write_b32 a6, 0
            s_mov_b32 s10, 2
            s_set_gpr_idx_on s10, gpr_idx(SRC0)
            v_mov_b32_e32 v3, v1
            v_accvgpr_read_b32 v4, a4
            s_set_gpr_idx_off
            v_accvgpr_read_b32 v5, a5
            """,
            regs={"v1": u32(77 + LANE), "v3": u32(LANE * 3), "a4": u32(LANE)},
            outputs=("v3", "v4", "v5", "a6"),
        ),
    )
    assert np.array_equal(out["v3"], u32(LANE * 3))  # v1 + 2 = v3: itself
    assert (out["v4"] == 0).all()  # a4 + 2 = a6, written 0
    assert np.array_equal(out["v5"], u32(77 + LANE))
    assert (out["a6"] == 0).all()


# --- LDS, buffers, LDS DMA, the bf16 atomic ---------------------------------------------------


def test_ds_write_and_read_b64_b128(toolchain, devices) -> None:
    vals = {f"v{r}": u32(RNG.integers(0, 2**32, 64)) for r in range(4, 10)}
    out = run_everywhere(
        toolchain,
        devices,
        Case(
            """
            v_lshlrev_b32_e32 v1, 4, v0
            v_lshlrev_b32_e32 v2, 3, v0
            ds_write_b128 v1, v[4:7] offset:16
            ds_write_b64 v2, v[8:9] offset:2048
            s_waitcnt lgkmcnt(0)
            ds_read_b128 v[10:13], v1 offset:16
            ds_read_b64 v[14:15], v2 offset:2048
            ds_read_b64 v[16:17], v1 offset:24
            s_waitcnt lgkmcnt(0)
            """,
            regs=vals,
            outputs=tuple(f"v{r}" for r in range(10, 18)),
        ),
    )
    for k in range(4):
        assert np.array_equal(out[f"v{10 + k}"], vals[f"v{4 + k}"])
    assert np.array_equal(out["v14"], vals["v8"]) and np.array_equal(out["v15"], vals["v9"])
    assert np.array_equal(out["v16"], vals["v6"]) and np.array_equal(out["v17"], vals["v7"])


def test_buffer_loads_with_lds_and_the_range_check(toolchain, devices) -> None:
    mem = np.arange(2048, dtype=np.uint32) * 3 + 7
    out = run_everywhere(
        toolchain,
        devices,
        Case(
            """
            v_lshlrev_b32_e32 v1, 4, v0
            v_lshlrev_b32_e32 v2, 2, v0
            s_mov_b32 s7, 0x20000
            s_mov_b32 s6, 4000
            s_mov_b32 m0, 0x10400
            buffer_load_dwordx4 v1, s[4:7], 0 offen offset:32 lds
            s_mov_b32 m0, 0x200
            buffer_load_dword v2, s[4:7], 0 offen offset:3900 lds
            buffer_load_dword v3, v2, s[4:7], 0 offen offset:3904
            s_waitcnt vmcnt(0)
            v_lshlrev_b32_e32 v4, 4, v0
            v_add_u32_e32 v4, 0x10420, v4
            ds_read_b128 v[8:11], v4
            ds_read_b32 v12, v2 offset:4412  ; M0 0x200 + the load's offset 3900
            s_waitcnt lgkmcnt(0)
            """,
            mem=mem,
            lds_bytes=163840,
            outputs=("v8", "v9", "v10", "v11", "v12", "v3"),
        ),
    )
    for k in range(4):
        assert np.array_equal(out[f"v{8 + k}"], mem[LANE * 4 + 8 + k])
    for reg, offset in (("v12", 3900), ("v3", 3904)):  # num_records 4000: past it reads 0
        at = LANE * 4 + offset
        assert np.array_equal(out[reg], u32(np.where(at < 4000, mem[at // 4], 0))), reg
    assert (out["v12"][:25] != 0).all() and (out["v12"][25:] == 0).all()


def test_bf16_atomic_rounds_each_half_and_serialises_lanes(toolchain, devices) -> None:
    old = bf16_bits(np.float32(1.0)) | (bf16_bits(np.float32(256.0)) << 16)
    mem = np.full(64, old, np.uint32)
    offs = np.where(LANE < 32, LANE * 4, 160)  # lanes 32..63 all add into dword 40
    add_lo = np.where(LANE < 32, np.float32(2.0**-8), np.float32(1.0)).astype(np.float32)
    add_lo[1] = 3 * 2.0**-8  # 1 + 3/256: halfway between 1+2/256 and 1+4/256 -> even
    add_lo[2] = -(2.0**-9)  # 1 - 1/512: halfway below 1 -> even (1.0)
    add_hi = np.full(64, 1.0, np.float32)
    out = run_everywhere(
        toolchain,
        devices,
        Case(
            "buffer_atomic_pk_add_bf16 v2, v1, s[4:7], 0 offen",
            regs={"v1": u32(offs), "v2": u32(bf16_bits(add_lo) | (bf16_bits(add_hi) << 16))},
            mem=mem,
        ),
    )
    lo, hi = bf16_values(out["mem"] & 0xFFFF), bf16_values(out["mem"] >> 16)
    assert lo[0] == 1.0 and hi[0] == 256.0  # 1 + 2^-8 and 256 + 1: ties to even, down
    assert lo[1] == 1.0 + 2**-6  # a tie to even, up
    assert lo[2] == 1.0
    assert lo[40] == 33.0 and hi[40] == 256.0  # 32 serial adds: each +1 to 256 rounds back
    assert lo[41] == 1.0 and hi[41] == 256.0  # untouched


# --- the scaled FP4 MFMA ---------------------------------------------------------------------


def _mfma_case(a, b, c, sa, sb) -> Case:
    regs = {f"v{r}": a[r] for r in range(4)} | {f"v{4 + r}": b[r] for r in range(4)}
    regs |= {f"a{8 + r}": c[r] for r in range(4)} | {"v12": sa, "v13": sb}
    return Case(
        "v_mfma_scale_f32_16x16x128_f8f6f4 a[8:11], v[0:3], v[4:7], a[8:11], v12, v13 "
        "op_sel:[0,0,0] op_sel_hi:[0,0,0] cbsz:4 blgp:4",
        regs=regs,
        outputs=("a8", "a9", "a10", "a11"),
    )


@pytest.mark.parametrize("order_matters", [False, True], ids=["integer-exact", "order-sensitive"])
def test_scaled_fp4_mfma(toolchain, devices, order_matters: bool) -> None:
    """Integer-exact operands (scales 1, C small): every summation order gives these bits.
    Then scales 2^-20..2^20 and a large C, where the products span 40 binades and the order
    and width of the hardware's additions decide the rounding; the emulator sums exactly and
    rounds once, and the HIP run says whether the GPU does."""
    a = u32(RNG.integers(0, 2**32, (4, 64)))
    b = u32(RNG.integers(0, 2**32, (4, 64)))
    if order_matters:
        sa, sb = u32(RNG.integers(107, 148, 64)), u32(RNG.integers(107, 148, 64))
        c = np.full((4, 64), np.float32(3.0e6)).view(np.uint32)
    else:
        sa, sb = u32(np.full(64, 127)), u32(np.full(64, 127))
        c = u32(RNG.integers(-8, 8, (4, 64)).astype(np.float32).view(np.uint32))
    out = run_everywhere(toolchain, devices, _mfma_case(a, b, c, sa, sb))
    got = np.stack([out[f"a{8 + r}"] for r in range(4)])
    assert np.array_equal(got, result_registers(mfma_model(a, b, c, sa, sb, 0, 0)))
    if not order_matters:
        assert np.array_equal(got.view(np.float32), np.round(got.view(np.float32) * 4) / 4)
