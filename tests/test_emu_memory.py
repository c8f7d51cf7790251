"""LDS and buffer instructions on the emulator: range checks per dword, LDS DMA addressing,
packed-bf16 atomics, and the errors for accesses that must not be papered over."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from emu_snippets import make_executor, u32

from f4pipe.core.errors import EmulatorError
from f4pipe.emu.memory import GlobalMemory, positions_by_key

LANE = np.arange(64)


def _vsharp(addr: int, num_records: int) -> dict[int, int]:
    """s[8:11] = a raw buffer resource as the f4gemm kernels build it (stride 4, dword3 0x20000)."""
    return {8: addr & 0xFFFFFFFF, 9: (addr >> 32) | 0x40000, 10: num_records, 11: 0x00020000}


def _run(toolchain, asm, vgprs=None, sgprs=None, **kw):
    ex = make_executor(toolchain, asm, **kw)
    for reg, value in (vgprs or {}).items():
        ex.vgpr[reg] = value
    for reg, value in (sgprs or {}).items():
        ex.sgpr[reg] = value
    ex.run()
    return ex


def test_ds_write_then_read_round_trips_b32_b64_b128(toolchain) -> None:
    ex = _run(
        toolchain,
        """
        ds_write_b128 v1, v[4:7] offset:16
        ds_write_b64 v2, v[4:5]
        ds_read_b128 v[10:13], v1 offset:16
        ds_read_b32 v14, v2 offset:4
        """,
        {1: u32(LANE * 32), 2: u32(8192 + LANE * 8), 4: u32(LANE), 5: u32(LANE + 100)}
        | {6: u32(LANE + 200), 7: u32(LANE + 300)},
    )
    for i in range(4):
        assert np.array_equal(ex.vgpr[10 + i, 0], u32(LANE + 100 * i))
    assert np.array_equal(ex.vgpr[14, 0], u32(LANE + 100))
    assert ex.lds[0, 4 + 8 * 5 + 2] == 5 + 200  # byte 16 + 32*5 + 8 -> lane 5, dword 2


def test_lds_is_per_workgroup_and_shared_by_its_waves(toolchain) -> None:
    ex = make_executor(
        toolchain,
        """
        v_lshlrev_b32_e32 v1, 2, v0
        v_add_u32_e32 v2, s2, v0
        ds_write_b32 v1, v2
        s_waitcnt lgkmcnt(0)
        s_barrier
        v_xor_b32_e32 v3, 64, v1
        ds_read_b32 v4, v3
        """,
        workgroups=2,
        waves_per_group=2,
    )
    ex.run()
    # wave w of workgroup g reads what the other wave of g wrote: g + (tid ^ 16 lanes...)
    for w in range(4):
        g, tid = w // 2, (w % 2) * 64 + LANE
        other = (tid * 4 ^ 64) // 4
        assert np.array_equal(ex.vgpr[4, w], u32(g + other))


@pytest.mark.parametrize(
    ("addr", "match"),
    [(2, "misaligned LDS address 0x2"), (65536 - 8, r"LDS access at 0xfff8\+16 beyond the 65536")],
)
def test_bad_lds_access_raises_naming_pc_and_wave(toolchain, addr: int, match: str) -> None:
    with pytest.raises(EmulatorError, match=match + r".* pc 0x0 .*wave 0"):
        _run(toolchain, "ds_read_b128 v[4:7], v1", {1: u32(np.full(64, addr))})


def test_buffer_loads_read_zero_past_num_records_per_dword(toolchain) -> None:
    mem = GlobalMemory()
    addr = mem.alloc(4096)
    mem.array(addr).view(np.uint32)[:] = np.arange(1024, dtype=np.uint32) + 1
    ex = _run(
        toolchain,
        """
        buffer_load_dwordx4 v[4:7], v1, s[8:11], 0 offen offset:8
        buffer_load_dword v10, v1, s[8:11], s12 offen
        """,
        {1: u32(LANE * 16)},
        _vsharp(addr, 520) | {12: 64},
        memory=mem,
    )
    words = mem.array(addr).view(np.uint32)
    for i in range(4):
        off = LANE * 16 + 8 + 4 * i
        want = np.where(off < 520, words[np.minimum(off // 4, 1023)], 0)
        assert np.array_equal(ex.vgpr[4 + i, 0], u32(want)), i
    # soffset moves the address but not the range check (offset = vgpr + inst_offset only)
    off = LANE * 16
    assert np.array_equal(ex.vgpr[10, 0], u32(np.where(off < 520, words[(off + 64) // 4], 0)))


def test_structured_and_offsetless_buffer_loads_check_their_own_range(toolchain) -> None:
    """idxen: address base + index * stride (+ the VGPR offset with offen), out of range when
    index >= num_records; neither idxen nor offen: every lane reads base + inst_offset."""
    mem = GlobalMemory()
    addr = mem.alloc(4096)
    mem.array(addr).view(np.uint32)[:] = np.arange(1024, dtype=np.uint32) + 1
    words = mem.array(addr).view(np.uint32)
    stride = 32  # bytes per record
    sharp = {8: addr & 0xFFFFFFFF, 9: (addr >> 32) | (stride << 16), 10: 40, 11: 0x00020000}
    ex = _run(
        toolchain,
        """
        buffer_load_dwordx2 v[4:5], v1, s[8:11], 0 idxen offset:4
        buffer_load_dword v6, v[2:3], s[8:11], 0 idxen offen
        buffer_load_dword v7, off, s[8:11], 0 offset:12
        """,
        {1: u32(LANE), 2: u32(LANE), 3: u32(LANE % 8 * 4)},  # v[2:3]: index, offset
        sharp,
        memory=mem,
    )
    for i in range(2):
        want = np.where(LANE < 40, words[(LANE * stride + 4 + 4 * i) // 4], 0)
        assert np.array_equal(ex.vgpr[4 + i, 0], u32(want)), i
    want = np.where(LANE < 40, words[(LANE * stride + LANE % 8 * 4) // 4], 0)
    assert np.array_equal(ex.vgpr[6, 0], u32(want))
    assert np.array_equal(ex.vgpr[7, 0], u32(np.full(64, words[3])))


def test_buffer_stores_drop_out_of_range_dwords_and_leave_the_rest(toolchain) -> None:
    mem = GlobalMemory()
    addr = mem.alloc(2048)
    mem.array(addr)[:] = 0xEE
    _run(
        toolchain,
        "buffer_store_dwordx4 v[4:7], v1, s[8:11], 0 offen",
        {1: u32(LANE * 16)} | {4 + i: u32(LANE * 10 + i) for i in range(4)},
        _vsharp(addr, 1000),
        memory=mem,
    )
    words = mem.array(addr).view(np.uint32)
    for lane in range(64):
        for i in range(4):
            off = lane * 16 + 4 * i
            if off >= 2048:
                continue
            want = lane * 10 + i if off < 1000 else 0xEEEEEEEE
            assert words[off // 4] == want, (lane, i)


def test_buffer_access_outside_every_allocation_raises(toolchain) -> None:
    mem = GlobalMemory()
    addr = mem.alloc(256)
    with pytest.raises(EmulatorError, match="past the end of the 256-byte allocation"):
        _run(
            toolchain,
            "buffer_store_dword v4, v1, s[8:11], 0 offen",
            {1: u32(LANE * 8)},
            _vsharp(addr, 0xFFFFFFFF),
            memory=mem,
        )


def test_buffer_load_lds_writes_m0_based_lds_address_per_lane(toolchain) -> None:
    mem = GlobalMemory()
    addr = mem.alloc(8192)
    mem.array(addr).view(np.uint32)[:] = np.arange(2048, dtype=np.uint32) + 7
    ex = _run(
        toolchain,
        """
        s_mov_b32 m0, 0x10403
        buffer_load_dwordx4 v1, s[8:11], 0 offen offset:32 lds
        s_mov_b32 m0, 0x200
        buffer_load_dword v2, s[8:11], 0 offen lds
        """,
        {1: u32(LANE * 16), 2: u32(LANE * 4 + 4000)},
        _vsharp(addr, 8000),
        memory=mem,
        lds_bytes=163840,
    )
    src = mem.array(addr).view(np.uint32)
    lds = ex.lds[0]
    base = (0x10403 & 0x3FFFC) + 32  # M0[17:2]*4 + inst_offset
    for lane in (0, 1, 63):
        got = lds[(base + 16 * lane) // 4 : (base + 16 * lane) // 4 + 4]
        assert np.array_equal(got, src[(lane * 16 + 32) // 4 : (lane * 16 + 32) // 4 + 4])
    got = lds[0x200 // 4 : 0x200 // 4 + 64]
    off = LANE * 4 + 4000
    assert np.array_equal(got, u32(np.where(off < 8000, src[np.minimum(off // 4, 2047)], 0)))


def _bf16(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)


def test_atomic_pk_add_bf16_rounds_each_half_and_serialises_same_address_lanes(toolchain) -> None:
    mem = GlobalMemory()
    addr = mem.alloc(256)
    old_lo, old_hi = np.float32(1.0), np.float32(256.0)
    mem.array(addr).view(np.uint32)[:] = _bf16(old_lo) | (_bf16(old_hi) << 16)
    # lanes 0..31 hit dwords 0..31 once; lanes 32..63 all hit dword 40 (32 serial adds)
    offs = np.where(LANE < 32, LANE * 4, 160)
    add_lo = np.where(LANE < 32, 2.0**-8, 1.0).astype(np.float32)  # 1 + 2^-8: a tie -> 1.0
    add_hi = np.full(64, 1.0, np.float32)  # 256 + 1 = 257 -> RNE in bf16 gives 256
    _run(
        toolchain,
        "buffer_atomic_pk_add_bf16 v4, v1, s[8:11], 0 offen",
        {1: u32(offs), 4: _bf16(add_lo) | (_bf16(add_hi) << 16)},
        _vsharp(addr, 256),
        memory=mem,
    )
    w = mem.array(addr).view(np.uint32)
    lo = (w & 0xFFFF).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    hi = (w >> 16).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    assert (lo[:32] == 1.0).all() and (hi[:32] == 256.0).all()
    assert lo[40] == 33.0  # 1 + 32 * 1.0, each add exact
    assert hi[40] == 256.0  # every +1 rounds back to 256 (ulp 2): serial, not a sum of 32
    assert lo[41] == 1.0 and hi[41] == 256.0  # untouched


@pytest.mark.parametrize(
    ("mode", "want"),
    [
        # 1 + 3/256 and 259 are ties, 257 + 1/64 just above one; -(1 + 3/256): toward zero,
        # not toward -inf
        ("rne", (1.0 + 2**-6, -(1.0 + 2**-6), 260.0, 258.0)),
        ("rtz", (1.0 + 2**-7, -(1.0 + 2**-7), 258.0, 256.0)),
    ],
)
def test_atomic_pk_add_bf16_rounding_switch(toolchain, monkeypatch, mode, want) -> None:
    """F4PIPE_BF16_ATOMIC_ROUNDING picks the atomic's rounding; each mode on hand-computed
    sums (bf16 has 8 significant bits: at 1 the step is 2^-7, at 256 it is 2)."""
    from f4pipe.emu.ops_memory import ATOMIC_ROUNDING_ENV

    monkeypatch.setenv(ATOMIC_ROUNDING_ENV, mode)
    mem = GlobalMemory()
    addr = mem.alloc(256)
    old_lo = np.array([1.0, -1.0, 256.0, 256.0], np.float32)
    add_lo = np.array([3 * 2**-8, -3 * 2**-8, 3.0, 1.0 + 2**-6], np.float32)
    mem.array(addr).view(np.uint32)[:4] = _bf16(old_lo)
    _run(
        toolchain,
        "buffer_atomic_pk_add_bf16 v4, v1, s[8:11], 0 offen",
        {1: u32(np.where(LANE < 4, LANE * 4, 252)), 4: _bf16(np.resize(add_lo, 64))},
        _vsharp(addr, 16),
        memory=mem,
    )
    w = mem.array(addr).view(np.uint32)[:4]
    got = (w & 0xFFFF).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    assert tuple(got) == want


def test_an_unknown_atomic_rounding_is_refused(toolchain, monkeypatch) -> None:
    from f4pipe.emu.ops_memory import ATOMIC_ROUNDING_ENV

    monkeypatch.setenv(ATOMIC_ROUNDING_ENV, "rtn")
    with pytest.raises(EmulatorError, match="F4PIPE_BF16_ATOMIC_ROUNDING='rtn': one of rne, rtz"):
        _run(
            toolchain,
            "buffer_atomic_pk_add_bf16 v4, v1, s[8:11], 0 offen",
            {1: u32(LANE * 0)},
            _vsharp(GlobalMemory().alloc(256), 16),
        )


def test_an_access_across_allocations_lands_in_each_in_c_order() -> None:
    """One access spanning allocations is split per allocation; a dword written twice keeps
    the later value (C order), as within one allocation."""
    mem = GlobalMemory()
    a, b = mem.alloc(64), mem.alloc(64)
    addr = np.array([[b, a + 4], [b + 8, a], [b + 8, b + 60]], dtype=np.int64)
    mem.write_dwords(addr, u32(np.arange(6) + 1).reshape(3, 2))
    assert mem.read_dwords(addr).tolist() == [[1, 2], [5, 4], [5, 6]]
    assert mem.array(a).view(np.uint32)[:2].tolist() == [4, 2]
    assert mem.array(b).view(np.uint32)[[0, 2, 15]].tolist() == [1, 5, 6]
    with pytest.raises(EmulatorError, match="past the end of the 64-byte allocation"):
        mem.read_dwords(np.array([a, b + 64], dtype=np.int64))


def test_positions_by_key_lists_each_key_once_with_its_positions_in_order() -> None:
    keys = np.array([[2, 0, 2], [1, 0, 2]])
    got = [(k, p.tolist()) for k, p in positions_by_key(keys, np.bincount(keys.ravel()))]
    assert got == [(0, [1, 4]), (1, [3]), (2, [0, 2, 5])]


# --- race detection -------------------------------------------------------------------------


def _two_workgroups_store(toolchain, op: str, offsets) -> GlobalMemory:
    """Two workgroups of one wave each run `op` with per-lane byte offsets `offsets`."""
    mem = GlobalMemory()
    addr = mem.alloc(4096)
    mem.begin_launch()
    _run(
        toolchain,
        f"{op} v4, v1, s[8:11], 0 offen",
        {1: u32(offsets), 4: u32(LANE + 1)},
        _vsharp(addr, 4096),
        memory=mem,
        workgroups=2,
    )
    return mem


def test_stores_of_two_workgroups_to_one_dword_are_a_race(toolchain) -> None:
    # every lane of both workgroups writes dword `lane`: 64 dwords with two writers each
    report = _two_workgroups_store(toolchain, "buffer_store_dword", LANE * 4).end_launch()
    assert report.count == 64
    first = report.events[0]
    assert {first.first_workgroup, first.second_workgroup} == {0, 1}
    assert first.offset == 0 and "buffer_store_dword pc 0x0" in first.first_site
    assert "64 dword(s) written by several workgroups" in report.summary()


def test_disjoint_stores_and_atomics_are_not_races(toolchain) -> None:
    # all 128 lanes on one dword: one raced dword (two workgroups), not 127
    assert _two_workgroups_store(toolchain, "buffer_store_dword", LANE * 0).end_launch().count == 1
    mem = GlobalMemory()
    addr = mem.alloc(4096)
    mem.begin_launch()
    wg = np.repeat(np.arange(2), 32)
    mem.write_dwords(addr + 4 * np.arange(64), u32(LANE), writers=wg, site="s")
    mem.write_dwords(addr + 4 * np.arange(32), u32(LANE[:32]), writers=wg[:32], site="s")
    assert mem.end_launch().count == 0  # workgroup 0 rewrote its own dwords
    atomics = _two_workgroups_store(toolchain, "buffer_atomic_pk_add_bf16", LANE * 4)
    assert atomics.end_launch().count == 0  # atomics are exempt
