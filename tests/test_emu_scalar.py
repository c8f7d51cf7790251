"""Scalar ALU, SMEM and control flow on the emulator: exact bits, SCC, branches, errors."""

from __future__ import annotations

import numpy as np
import pytest
from emu_snippets import make_executor

from f4pipe.core.errors import EmulatorError


def _run(toolchain, asm: str, sgprs: dict[int, int] | None = None, **kw):
    ex = make_executor(toolchain, asm, **kw)
    for reg, value in (sgprs or {}).items():
        ex.sgpr[reg] = value
    ex.run()
    return ex


def test_add_sub_u32_carry_borrow_and_addc(toolchain) -> None:
    ex = _run(
        toolchain,
        """
        s_add_u32 s10, s0, s1
        s_addc_u32 s11, s2, 0
        s_sub_u32 s12, s3, s4
        s_subb_u32 s13, s5, 0
        """,
        {0: 0xFFFFFFFF, 1: 2, 2: 7, 3: 1, 4: 2, 5: 10},
    )
    assert ex.sgpr[10, 0] == 1 and ex.sgpr[11, 0] == 8  # carry into the high word
    assert ex.sgpr[12, 0] == 0xFFFFFFFF and ex.sgpr[13, 0] == 9  # borrow out of the low word
    assert ex.scc[0] == 0


def test_signed_add_overflow_and_addk_sign_extension(toolchain) -> None:
    ex = _run(
        toolchain,
        """
        s_add_i32 s10, s0, 1
        s_mov_b32 s20, 0
        s_cselect_b32 s20, 1, 0
        s_addk_i32 s1, 0xfff0
        s_cselect_b32 s21, 1, 0
        s_sub_i32 s11, s2, 1
        """,
        {0: 0x7FFFFFFF, 1: 100, 2: 0x80000000},
    )
    assert ex.sgpr[10, 0] == 0x80000000 and ex.sgpr[20, 0] == 1  # overflow -> SCC
    assert ex.sgpr[1, 0] == 84 and ex.sgpr[21, 0] == 0  # 100 + (-16), no overflow
    assert ex.sgpr[11, 0] == 0x7FFFFFFF and ex.scc[0] == 1


def test_mul_hi_lo_shifts_logic(toolchain) -> None:
    ex = _run(
        toolchain,
        """
        s_mul_i32 s10, s0, s1
        s_mul_hi_u32 s11, s0, s1
        s_lshl_b32 s12, s0, 4
        s_lshr_b32 s13, s0, 36
        s_and_b32 s14, s0, 0
        """,
        {0: 0xDEADBEEF, 1: 0x12345678},
    )
    p = 0xDEADBEEF * 0x12345678
    assert ex.sgpr[10, 0] == p & 0xFFFFFFFF
    assert ex.sgpr[11, 0] == p >> 32
    assert ex.sgpr[12, 0] == (0xDEADBEEF << 4) & 0xFFFFFFFF
    assert ex.sgpr[13, 0] == 0xDEADBEEF >> 4  # shift amount is taken mod 32
    assert ex.sgpr[14, 0] == 0 and ex.scc[0] == 0  # logic ops: SCC = result != 0


@pytest.mark.parametrize(
    ("cmp", "a", "b", "want"),
    [
        ("s_cmp_lt_i32", 0xFFFFFFFF, 0, 1),
        ("s_cmp_lt_u32", 0xFFFFFFFF, 0, 0),
        ("s_cmp_gt_i32", 1, 0xFFFFFFFF, 1),
        ("s_cmp_gt_u32", 1, 0xFFFFFFFF, 0),
        ("s_cmp_le_u32", 5, 5, 1),
        ("s_cmp_eq_u32", 5, 6, 0),
    ],
)
def test_compares_signed_vs_unsigned(toolchain, cmp: str, a: int, b: int, want: int) -> None:
    ex = _run(toolchain, f"{cmp} s0, s1", {0: a, 1: b})
    assert ex.scc[0] == want


def test_branches_follow_scc_per_wave_and_waves_reconverge(toolchain) -> None:
    # Each wave loops s2 (its workgroup id) + 1 times; then all meet at the same code.
    ex = _run(
        toolchain,
        """
        s_mov_b32 s10, 0
        loop:
        s_add_u32 s10, s10, 1
        s_cmp_le_u32 s10, s2
        s_cbranch_scc1 loop
        s_add_u32 s11, s10, 100
        """,
        workgroups=5,
    )
    assert list(ex.sgpr[10]) == [1, 2, 3, 4, 5]
    assert list(ex.sgpr[11]) == [101, 102, 103, 104, 105]
    assert ex.done.all()


def test_s_load_reads_memory_at_the_pointer_ignoring_low_bits(toolchain) -> None:
    from f4pipe.emu.memory import GlobalMemory

    mem = GlobalMemory()
    addr = mem.alloc(64)
    mem.array(addr).view(np.uint32)[:] = np.arange(100, 116, dtype=np.uint32)
    ex = _run(
        toolchain,
        """
        s_load_dwordx2 s[10:11], s[0:1], 0x8
        s_load_dword s12, s[0:1], 0x13
        s_waitcnt lgkmcnt(0)
        """,
        {0: addr & 0xFFFFFFFF, 1: addr >> 32},
        memory=mem,
    )
    assert list(ex.sgpr[10:13, 0]) == [102, 103, 104]


def test_runaway_loop_hits_the_instruction_budget(toolchain) -> None:
    with pytest.raises(EmulatorError, match=r"instruction budget of 50 .*pc 0x0 .*wave 0"):
        _run(toolchain, "spin:\ns_branch spin", max_instructions=50)


def test_unknown_opcode_raises_naming_instruction_pc_and_wave(toolchain) -> None:
    with pytest.raises(
        EmulatorError,
        match=r"unsupported instruction unknown_sopc_0xc \[BF0C8100\] at snippet pc 0x4 .*wave 0",
    ):
        _run(toolchain, "s_nop 0\ns_bitcmp0_b32 s0, 1")


def test_barrier_waits_for_every_wave_of_the_workgroup(toolchain) -> None:
    # Wave 1 of each workgroup is delayed by a loop; wave 0 must not pass the barrier early:
    # after it, every wave reads s20, which only wave 1's path increments before the barrier.
    from f4pipe.emu.engine import Executor

    ex: Executor = make_executor(
        toolchain,
        """
        v_readfirstlane_b32 s5, v0
        s_cmp_lt_u32 s5, 64
        s_cbranch_scc1 arrive
        s_mov_b32 s6, 0
        slow:
        s_add_u32 s6, s6, 1
        s_cmp_lt_u32 s6, 20
        s_cbranch_scc1 slow
        arrive:
        s_barrier
        s_mov_b32 s7, s6
        """,
        workgroups=2,
        waves_per_group=2,
    )
    ex.run()
    assert list(ex.sgpr[7]) == [0, 20, 0, 20]
    assert ex.done.all()


def test_wave_spinning_while_its_partner_waits_at_a_barrier_hits_the_budget(toolchain) -> None:
    ex = make_executor(
        toolchain,
        """
        v_readfirstlane_b32 s5, v0
        s_cmp_lt_u32 s5, 64
        s_cbranch_scc1 wait
        wait_other:
        s_branch wait_other
        wait:
        s_barrier
        """,
        waves_per_group=2,
        max_instructions=100,
    )
    with pytest.raises(EmulatorError, match="instruction budget"):
        ex.run()
