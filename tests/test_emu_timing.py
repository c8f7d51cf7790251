"""The emulator's timing model (f4pipe.analysis.timing): memory counters, LDS visibility between
waves, and the gfx950 wait-state rule table. Each case is a snippet assembled by the real
llvm-mc and run on waves of the emulator; a correct variant (with the wait) runs beside each
broken one, so every check is shown able to pass and to fail."""

from __future__ import annotations

import re

import numpy as np
import pytest
from emu_snippets import make_executor

from f4pipe.analysis.hazards import timing_model
from f4pipe.analysis.timing import HazardReport
from f4pipe.analysis.timingrun import LdsWords, TimingRun
from f4pipe.arch.decode import Instruction, Operand
from f4pipe.arch.effects import effects_of
from f4pipe.arch.waitstates import RULES, check_window
from f4pipe.emu.memory import GlobalMemory


def run_timed(toolchain, asm: str, *, waves_per_group: int = 1, memory=None) -> HazardReport:
    """Run `asm` with the timing checks on; the launch's hazards."""
    mem = memory or GlobalMemory()
    ex = make_executor(toolchain, asm, waves_per_group=waves_per_group, memory=mem)
    report = HazardReport()
    ex.timing = TimingRun(
        timing_model(ex.program),
        report,
        LdsWords(1, ex.lds.shape[1], waves_per_group),
        num_waves=ex.W,
        wave_wg=ex.wg,
        waves_per_group=waves_per_group,
    )
    ex.run()
    return report


def rules_of(report: HazardReport) -> list[str]:
    return [h.rule for h in report.hazards]


# A raw buffer over a 4 KiB allocation: s[8:11] (base, stride 0, num_records, dword3).
BUFFER = """
s_mov_b32 s8, {lo}
s_mov_b32 s9, {hi}
s_mov_b32 s10, 4096
s_mov_b32 s11, 0x20000
"""


def buffer_setup(memory: GlobalMemory) -> str:
    addr = memory.alloc(4096)
    return BUFFER.format(lo=addr & 0xFFFFFFFF, hi=addr >> 32)


# --- counters ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wait", "expected"),
    [("", ["vmcnt"]), ("s_waitcnt vmcnt(1)", ["vmcnt"]), ("s_waitcnt vmcnt(0)", [])],
)
def test_reading_a_load_before_its_vmcnt_wait_is_a_hazard(toolchain, wait, expected) -> None:
    mem = GlobalMemory()
    asm = (
        buffer_setup(mem)
        + f"""
    buffer_load_dword v1, off, s[8:11], 0
    buffer_load_dword v2, off, s[8:11], 0 offset:4
    {wait}
    v_add_u32 v3, v2, v2
    """
    )
    report = run_timed(toolchain, asm, memory=mem)
    assert rules_of(report) == expected
    if expected:
        msg = report.hazards[0].message
        assert "v_add_u32_e32 v3, v2, v2" in msg and "buffer_load_dword v2" in msg
        assert "vmcnt(0)" in msg  # the younger load: nothing may stay outstanding


def test_vmcnt_retires_the_oldest_first(toolchain) -> None:
    """vmcnt(1) leaves exactly the youngest load outstanding: the older one may be read."""
    mem = GlobalMemory()
    asm = (
        buffer_setup(mem)
        + """
    buffer_load_dword v1, off, s[8:11], 0
    buffer_load_dword v2, off, s[8:11], 0 offset:4
    s_waitcnt vmcnt(1)
    v_add_u32 v3, v1, v1
    """
    )
    assert rules_of(run_timed(toolchain, asm, memory=mem)) == []


def test_overwriting_a_register_a_load_will_write_is_a_hazard_unless_a_younger_load(
    toolchain,
) -> None:
    mem = GlobalMemory()
    setup = buffer_setup(mem)
    valu = setup + "buffer_load_dword v1, off, s[8:11], 0\nv_mov_b32 v1, 0\n"
    assert rules_of(run_timed(toolchain, valu, memory=mem)) == ["vmcnt"]
    assert "overwrites v1" in run_timed(toolchain, valu, memory=mem).hazards[0].message
    again = setup + (
        "buffer_load_dword v1, off, s[8:11], 0\nbuffer_load_dword v1, off, s[8:11], 0 offset:4\n"
    )
    assert rules_of(run_timed(toolchain, again, memory=mem)) == []  # in order: younger wins


@pytest.mark.parametrize(("wait", "expected"), [("", ["lgkmcnt"]), ("s_waitcnt lgkmcnt(0)", [])])
def test_ds_read_result_needs_lgkmcnt(toolchain, wait, expected) -> None:
    asm = f"""
    v_mov_b32 v1, 0
    ds_read_b32 v2, v1
    {wait}
    v_add_u32 v3, v2, v2
    """
    assert rules_of(run_timed(toolchain, asm)) == expected


def test_scalar_loads_are_trusted_only_after_lgkmcnt_0(toolchain) -> None:
    """SMEM returns out of order: lgkmcnt(1) with a DS op younger than it proves nothing."""
    mem = GlobalMemory()
    addr = mem.alloc(64)
    load = f"""
    s_mov_b32 s20, {addr & 0xFFFFFFFF}
    s_mov_b32 s21, {addr >> 32}
    v_mov_b32 v1, 0
    s_load_dword s4, s[20:21], 0x0
    ds_read_b32 v2, v1
    """
    early = run_timed(toolchain, load + "s_waitcnt lgkmcnt(1)\ns_add_u32 s5, s4, 1\n", memory=mem)
    assert rules_of(early) == ["lgkmcnt"]
    assert "lgkmcnt(0) (scalar loads return out of order)" in early.hazards[0].message
    done = run_timed(toolchain, load + "s_waitcnt lgkmcnt(0)\ns_add_u32 s5, s4, 1\n", memory=mem)
    assert rules_of(done) == []


def test_a_ds_result_is_not_trusted_at_lgkmcnt_n_while_a_scalar_load_may_have_returned(
    toolchain,
) -> None:
    """s_load; ds_read v2; lgkmcnt(1): the count may have dropped because the scalar load
    returned first, so v2 is not yet proven (LLVM forces lgkmcnt(0) here). With two DS reads
    older than the scalar load, lgkmcnt(1) does prove the oldest one back."""
    mem = GlobalMemory()
    addr = mem.alloc(64)
    base = f"""
    s_mov_b32 s20, {addr & 0xFFFFFFFF}
    s_mov_b32 s21, {addr >> 32}
    v_mov_b32 v1, 0
    """
    one = base + "s_load_dword s4, s[20:21], 0x0\nds_read_b32 v2, v1\ns_waitcnt lgkmcnt(1)\n"
    report = run_timed(toolchain, one + "v_add_u32 v3, v2, v2\n", memory=mem)
    assert rules_of(report) == ["lgkmcnt"]
    two = base + (
        "ds_read_b32 v2, v1\nds_read_b32 v5, v1 offset:4\ns_load_dword s4, s[20:21], 0x0\n"
        "s_waitcnt lgkmcnt(1)\n"
    )
    assert rules_of(run_timed(toolchain, two + "v_add_u32 v3, v2, v2\n", memory=mem)) == []
    assert rules_of(run_timed(toolchain, two + "v_add_u32 v3, v5, v5\n", memory=mem)) == ["lgkmcnt"]


def test_a_full_counter_stalls_issue_so_the_oldest_has_retired(toolchain) -> None:
    """lgkmcnt holds 15: the 16th DS read issues only once the first has returned."""
    reads = "\n".join(f"ds_read_b32 v{10 + i}, v1 offset:{4 * i}" for i in range(16))
    asm = f"v_mov_b32 v1, 0\n{reads}\nv_add_u32 v3, v10, v10\n"
    assert rules_of(run_timed(toolchain, asm)) == []
    asm15 = f"v_mov_b32 v1, 0\n{reads}\nv_add_u32 v3, v11, v11\n"
    assert rules_of(run_timed(toolchain, asm15)) == ["lgkmcnt"]


# --- LDS between waves ------------------------------------------------------------------------


#: v1 = 0 (LDS word 0), v2 = 7; SCC = 1 in wave 0 (work items 0..63), 0 in wave 1.
WAVE_0_OR_1 = """
v_mov_b32 v1, 0
v_mov_b32 v2, 7
v_readfirstlane_b32 s6, v0
s_nop 4
s_cmp_lt_u32 s6, 64
"""


@pytest.mark.parametrize(
    ("before_barrier", "expected"),
    [("", ["lds-visibility"]), ("s_waitcnt lgkmcnt(0)", [])],
)
def test_another_waves_lds_write_is_visible_only_after_its_wait_and_a_barrier(
    toolchain, before_barrier, expected
) -> None:
    """Wave 0 (work items 0..63) writes LDS word 0; both meet at s_barrier; wave 1 reads it."""
    asm = (
        WAVE_0_OR_1
        + f"""
    s_cbranch_scc0 reader
    ds_write_b32 v1, v2
    reader:
    {before_barrier}
    s_barrier
    ds_read_b32 v3, v1
    s_waitcnt lgkmcnt(0)
    """
    )
    assert rules_of(run_timed(toolchain, asm, waves_per_group=2)) == expected


def test_lds_dma_is_visible_to_its_own_wave_only_after_vmcnt(toolchain) -> None:
    mem = GlobalMemory()
    setup = buffer_setup(mem) + "v_mov_b32 v1, 0\ns_mov_b32 m0, 0\ns_nop 0\n"
    dma = "buffer_load_dword v1, s[8:11], 0 offen lds\n"
    read = "ds_read_b32 v3, v1\ns_waitcnt lgkmcnt(0)\n"
    assert rules_of(run_timed(toolchain, setup + dma + read, memory=mem)) == ["lds-visibility"]
    waited = setup + dma + "s_waitcnt vmcnt(0)\n" + read
    assert rules_of(run_timed(toolchain, waited, memory=mem)) == []


@pytest.mark.parametrize(
    ("between", "expected"),
    [("", ["lds-waw"]), ("s_waitcnt vmcnt(0)\n", [])],
)
def test_a_write_over_an_lds_dma_still_in_flight_is_a_hazard(toolchain, between, expected) -> None:
    """The DMA's data arrives through the vector-memory path, unordered with a later DS write to
    the same word, until vmcnt retires the DMA (docs/reference/timing.md A1)."""
    mem = GlobalMemory()
    setup = buffer_setup(mem) + "v_mov_b32 v1, 0\nv_mov_b32 v2, 7\ns_mov_b32 m0, 0\ns_nop 0\n"
    dma = "buffer_load_dword v1, s[8:11], 0 offen lds\n"
    write = "ds_write_b32 v1, v2\ns_waitcnt lgkmcnt(0)\n"
    asm = setup + dma + between + write
    assert rules_of(run_timed(toolchain, asm, memory=mem)) == expected


def test_two_lds_dmas_of_one_wave_land_in_order(toolchain) -> None:
    mem = GlobalMemory()
    setup = buffer_setup(mem) + "v_mov_b32 v1, 0\ns_mov_b32 m0, 0\ns_nop 0\n"
    dma = "buffer_load_dword v1, s[8:11], 0 offen lds\n"
    assert (
        rules_of(run_timed(toolchain, setup + dma + dma + "s_waitcnt vmcnt(0)\n", memory=mem)) == []
    )


@pytest.mark.parametrize(
    ("between", "rules", "advisories"),
    [
        ("", ["lds-war"], 0),  # no barrier at all: unordered
        ("s_barrier", [], 1),  # read issued before the barrier, not retired: advisory
        ("s_waitcnt lgkmcnt(0)\ns_barrier", [], 0),
    ],
)
def test_writing_a_word_another_wave_still_reads(toolchain, between, rules, advisories) -> None:
    """Wave 1 reads word 0; wave 0 then writes it (skipping the read, reaching the write)."""
    asm = (
        WAVE_0_OR_1
        + f"""
    s_cbranch_scc1 writer
    ds_read_b32 v3, v1
    writer:
    {between}
    s_cmp_lt_u32 s6, 64
    s_cbranch_scc0 done
    ds_write_b32 v1, v2
    done:
    s_waitcnt lgkmcnt(0)
    """
    )
    report = run_timed(toolchain, asm, waves_per_group=2)
    assert rules_of(report) == rules
    assert report.advisories == advisories


# --- wait states ------------------------------------------------------------------------------


def inst(name: str, fmt: str, dst=None, srcs=(), sdst=None, **kw) -> Instruction:
    return Instruction(0, 8, fmt, 0, name, name, dst=dst, srcs=tuple(srcs), sdst=sdst, **kw)


def v(i: int, n: int = 1) -> Operand:
    return Operand("v", i, n, code=256 + i)


def a(i: int, n: int = 1) -> Operand:
    return Operand("a", i, n, code=256 + i)


def s(i: int, n: int = 1) -> Operand:
    return Operand("s", i, n, code=i)


NOP = inst("s_nop", "SOPP")  # one wait state
VCC = Operand("s", 106, 2, code=106)


def mfma(dst: Operand, a_: Operand, b_: Operand, c: Operand, fmt: int = 4) -> Instruction:
    return inst(
        "v_mfma_scale_f32_16x16x128_f8f6f4",
        "VOP3P",
        dst,
        (a_, b_, c, v(200), v(201)),
        cbsz=fmt,
        blgp=fmt,
    )


def sgemm(dst: Operand, a_: Operand, b_: Operand, c: Operand) -> Instruction:
    return inst(
        "v_mfma_f32_32x32x2_f32", "VOP3P", dst, (a_, b_, c, v(200), v(201)), extra={"passes": 16}
    )


def buffer(name: str, vdata: Operand, lds: bool = False) -> Instruction:
    """`name` vaddr=v0, srsrc=s[8:11], soffset=0 (offen)."""
    off = Operand("imm", 0, code=128)
    return inst(name, "MUBUF", srcs=(v(0), vdata, s(8, 4), off), offen=True, lds=lds)


#: One producer -> consumer example per rule id, and the wait states the rule asks between.
EXAMPLES: dict[str, tuple[Instruction, Instruction, int]] = {
    "B1.1": (
        inst("v_readfirstlane_b32", "VOP1", s(8), (v(1),)),
        buffer("buffer_load_dword", v(2)),
        5,
    ),
    "B1.2": (
        inst("v_cmp_eq_u32", "VOPC", srcs=(v(1), v(2)), sdst=VCC),
        inst("v_div_fmas_f32", "VOP3", v(3), (v(4), v(5), v(6))),
        4,
    ),
    "B1.3": (
        inst("v_readfirstlane_b32", "VOP1", s(6), (v(1),)),
        inst("v_readlane_b32", "VOP3", s(7), (v(2), s(6))),
        4,
    ),
    "B1.4": (
        inst("v_cmp_eq_u32", "VOPC", srcs=(v(1), v(2)), sdst=VCC),
        inst("v_cndmask_b32", "VOP2", v(3), (v(4), v(5))),
        2,
    ),
    "B1.5": (
        inst("v_cmpx_eq_u32", "VOPC", srcs=(v(1), v(2)), sdst=VCC),
        inst("v_readfirstlane_b32", "VOP1", s(6), (v(7),)),
        4,
    ),
    "B1.6": (
        inst("v_cmpx_eq_u32", "VOPC", srcs=(v(1), v(2)), sdst=VCC),
        inst("v_mov_b32", "VOP1", v(3), (Operand("s", 126, 1, code=126),)),
        2,
    ),
    "B1.7": (
        inst("v_mov_b32", "VOP1", v(1), (v(2),)),
        inst("v_readfirstlane_b32", "VOP1", s(6), (v(1),)),
        1,
    ),
    "B1.9": (
        inst("v_rcp_iflag_f32", "VOP1", v(1), (v(2),)),
        inst("v_mul_f32", "VOP2", v(3), (v(1), v(4))),
        1,
    ),
    "B1.11": (buffer("buffer_store_dwordx4", v(4, 4)), inst("v_mov_b32", "VOP1", v(5), (v(1),)), 2),
    "B1.15": (
        inst("s_mov_b32", "SOP1", s(124), (s(3),)),
        buffer("buffer_store_dword", v(2), lds=True),
        1,
    ),
    "B1.18": (
        inst("v_cmpx_eq_u32", "VOPC", srcs=(v(1), v(2)), sdst=VCC),
        inst("v_permlane16_swap_b32", "VOP1", v(3), (v(4),)),
        4,
    ),
    "B1.19": (
        inst("v_mov_b32", "VOP1", v(4), (v(1),)),
        inst("v_permlane16_swap_b32", "VOP1", v(3), (v(4),)),
        2,
    ),
    "B3.1": (
        inst("v_accvgpr_write_b32", "VOP3P", a(0), (v(1),)),
        mfma(a(4, 4), v(8, 4), v(12, 4), a(0, 4)),
        2,
    ),
    "B3.2": (
        inst("v_cmpx_eq_u32", "VOPC", srcs=(v(1), v(2)), sdst=VCC),
        mfma(a(4, 4), v(8, 4), v(12, 4), a(4, 4)),
        4,
    ),
    "B3.3": (
        mfma(a(0, 4), v(8, 4), v(12, 4), a(0, 4)),
        inst("v_accvgpr_read_b32", "VOP3P", v(1), (a(2),)),
        8,
    ),
    "B3.4": (
        mfma(a(0, 4), v(8, 4), v(12, 4), a(0, 4)),
        mfma(a(8, 4), a(0, 4), v(12, 4), a(8, 4)),
        8,
    ),
    "B3.5": (
        mfma(a(0, 4), v(8, 4), v(12, 4), a(0, 4)),
        mfma(a(2, 4), v(8, 4), v(12, 4), a(2, 4)),
        6,
    ),
    "B3.6": (
        mfma(a(0, 4), v(8, 4), v(12, 4), a(0, 4)),
        sgemm(a(16, 16), v(20, 1), v(21, 1), a(0, 16)),
        6,
    ),
    "B3.8": (
        sgemm(a(0, 16), v(20, 1), v(21, 1), a(0, 16)),
        inst("v_accvgpr_read_b32", "VOP3P", v(1), (a(3),)),
        18,
    ),
    "B3.9": (
        sgemm(a(0, 16), v(20, 1), v(21, 1), a(0, 16)),
        mfma(a(8, 4), v(8, 4), v(12, 4), a(8, 4)),
        16,
    ),
    "B3.10": (
        mfma(a(0, 4), v(8, 4), v(12, 4), a(0, 4)),
        inst("v_accvgpr_write_b32", "VOP3P", a(1), (v(1),)),
        3,
    ),
}


def test_every_rule_has_an_example() -> None:
    assert sorted(EXAMPLES) == sorted(r.rule for r in RULES)


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fires_one_wait_state_short_and_not_at_its_requirement(rule_id) -> None:
    producer, consumer, need = EXAMPLES[rule_id]

    def broken(between: int) -> set[str]:
        items = [producer, *[NOP] * between, consumer]
        window = [(4 * i, effects_of(x)) for i, x in enumerate(items)]
        return {v_.rule.rule for v_ in check_window(window)}

    assert rule_id in broken(need - 1)
    assert rule_id not in broken(need)


def test_an_s_nop_fills_n_plus_one_wait_states() -> None:
    producer, consumer, need = EXAMPLES["B3.3"]
    assert need == 8
    nop7 = inst("s_nop", "SOPP", imm=7)
    window = [(0, effects_of(producer)), (4, effects_of(nop7)), (8, effects_of(consumer))]
    assert check_window(window) == []
    nop6 = inst("s_nop", "SOPP", imm=6)
    window[1] = (4, effects_of(nop6))
    assert [x.rule.rule for x in check_window(window)] == ["B3.3"]


@pytest.mark.parametrize(("fmt", "need"), [(4, 8), (0, 12)])  # FP4: 4 passes; FP8: 8
def test_an_mfma_result_read_as_a_scale_operand_needs_the_src_ab_wait(fmt, need) -> None:
    """docs/reference/timing.md C10: the scale operands of a scaled MFMA are checked as A/B."""
    producer = mfma(v(200, 4), v(8, 4), v(12, 4), a(0, 4), fmt=fmt)  # writes v200 (a scale)
    consumer = mfma(a(8, 4), v(16, 4), v(20, 4), a(8, 4))  # reads v200, v201 as scales

    def rules(between: int) -> set[str]:
        items = [producer, *[NOP] * between, consumer]
        return {
            x.rule.rule for x in check_window([(4 * i, effects_of(y)) for i, y in enumerate(items)])
        }

    assert "B3.4" in rules(need - 1) and "B3.4" not in rules(need)


def _rules_between(producer: Instruction, consumer: Instruction, between: int) -> set[str]:
    items = [producer, *[NOP] * between, consumer]
    return {
        x.rule.rule for x in check_window([(4 * i, effects_of(y)) for i, y in enumerate(items)])
    }


EXEC = Operand("s", 126, 2, code=126)


@pytest.mark.parametrize(
    ("consumer", "rule_id", "need"),
    [
        (inst("v_permlane16_swap_b32", "VOP1", v(3), (v(4),)), "B1.18", 4),
        (inst("v_mov_b32", "VOP1", v(3), (EXEC,)), "B1.6", 2),
    ],
)
def test_a_vop3_compare_writing_exec_is_a_v_cmpx(consumer, rule_id, need) -> None:
    """LLVM's isVCmpXWritesExec: v_cmp_*_e64 with EXEC as its destination is followed by the
    v_cmpx rules (docs/reference/timing.md B1)."""
    producer = inst("v_cmp_eq_u32", "VOP3", EXEC, (v(1), v(2)))
    assert rule_id in _rules_between(producer, consumer, need - 1)
    assert rule_id not in _rules_between(producer, consumer, need)


@pytest.mark.parametrize("load", ["buffer_load_dword", "ds_read_b32"])
def test_a_load_overwriting_an_in_flight_src_c_needs_the_war_wait(load) -> None:
    """docs/reference/timing.md B3: LLVM checks a load's destination against an XDL MFMA still
    reading it as SrcC, as it checks a VALU's (3 wait states after a 4-pass MFMA)."""
    producer = mfma(a(0, 4), v(8, 4), v(12, 4), v(40, 4))
    ds = load.startswith("ds_")
    consumer = inst(load, "DS", v(41), (v(0),)) if ds else buffer(load, v(41))
    assert "B3.10" in _rules_between(producer, consumer, 2)
    assert "B3.10" not in _rules_between(producer, consumer, 3)


def test_back_to_back_accumulation_into_the_same_range_needs_no_wait() -> None:
    first = mfma(a(0, 4), v(8, 4), v(12, 4), a(0, 4))
    again = mfma(a(0, 4), v(16, 4), v(20, 4), a(0, 4))
    assert check_window([(0, effects_of(first)), (16, effects_of(again))]) == []


def test_wait_states_are_counted_on_the_path_the_wave_ran(toolchain) -> None:
    """v_readfirstlane -> buffer load needs 5 (B1.1): padded on one path of a branch, not on
    the other. The waves that take the short path report it; the long path alone passes."""
    mem = GlobalMemory()
    asm = (
        buffer_setup(mem)
        + """
    v_readfirstlane_b32 s12, v0
    s_cmp_eq_u32 s2, {wg}
    s_cbranch_scc1 short
    s_nop 4
    short:
    buffer_load_dword v1, off, s[8:11], s12
    s_waitcnt vmcnt(0)
    """
    )
    short_path = run_timed(toolchain, asm.format(wg=0), memory=mem)  # workgroup 0 branches
    assert rules_of(short_path) == ["B1.1"]
    assert "2 wait state(s) after" in short_path.hazards[0].message
    assert rules_of(run_timed(toolchain, asm.format(wg=1), memory=mem)) == []


def test_the_lds_pool_is_reused_without_clearing_and_stale_tags_read_as_retired() -> None:
    pool = LdsWords(1, 16, 1)
    pool.w_tag[0, 3] = (5 + 1) << 5  # a write by an earlier batch, sequence 5
    pool.advance(9)
    assert pool.base == 10  # the next batch numbers from here: 5 < 10 reads as retired
    np.testing.assert_array_equal(pool.w_tag[0, :3], 0)


# --- fail closed ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asm", "field"),
    [
        ("buffer_load_dword v1, off, s[8:11], 0 sc0", "glc/sc0"),
        ("buffer_load_dword v1, off, s[8:11], 0 sc1", "sc1"),
        ("buffer_store_dword v1, off, s[8:11], 0 nt", "slc/nt"),
        ("s_load_dword s4, s[0:1], 0x0 glc", "glc (scalar cache coherence)"),
        # the scaled MFMA's scale sources with neg (bit 61) or neg_hi (bit 8) set: llvm-mc
        # refuses both spellings, so the words are written out (the unmodified MFMA is
        # d3ac0000 00022310 d3ad8800 04021100)
        (".long 0xd3ac0000, 0x20022310, 0xd3ad8800, 0x04021100", "neg/neg_hi"),
        (".long 0xd3ac0100, 0x00022310, 0xd3ad8800, 0x04021100", "neg/neg_hi"),
    ],
)
def test_fields_the_emulator_does_not_model_are_refused_by_name(toolchain, asm, field) -> None:
    from f4pipe.core.errors import EmulatorError

    ex = make_executor(toolchain, asm)
    with pytest.raises(EmulatorError, match=re.escape(field)):
        ex.run()


def test_the_user_guide_shows_the_fidelity_table_as_the_report_does() -> None:
    from pathlib import Path

    from f4pipe.emu.fidelity import fidelity_markdown

    guide = (Path(__file__).resolve().parents[1] / "docs" / "user-guide.md").read_text()
    assert fidelity_markdown() in guide
