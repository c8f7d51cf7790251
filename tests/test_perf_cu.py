"""The cycle model of one workgroup on one CU (f4pipe.perf.cu) on small snippets: each is
assembled by the real llvm-mc, run on the emulator with the path recorder (f4pipe.perf.trace)
watching, and replayed by simulate_workgroup. Every expected count is derived by hand from the
rules in cu.py's docstring and the rows of costs.TABLE (read symbolically from COST), never from
running the model; the comment in each test is the derivation."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from emu_snippets import make_executor, u32

from f4pipe.emu.memory import GlobalMemory
from f4pipe.host.kernarg import KERNARG_SIZE
from f4pipe.perf import cu, trace
from f4pipe.perf.costs import COST, TABLE
from f4pipe.perf.cu import WorkgroupCycles, decode_ops, simulate_workgroup
from f4pipe.perf.trace import PathRecorder, WorkgroupTrace, lds_bank_cycles

LANE = np.arange(64)
#: ISA Table 28: v_mfma_scale_f32_16x16x128_f8f6f4 with FP4 A and B (cbsz:4 blgp:4) is 4 passes.
FP4_PASSES = 4
#: Calibrated inputs for snippets that do not touch vector memory (they must not matter there).
LATENCY, BPC = 1000.0, 128.0


def mfma(dst: str, src_c: str) -> str:
    return (
        f"v_mfma_scale_f32_16x16x128_f8f6f4 a[{dst}], v[0:3], v[4:7], a[{src_c}], v12, v13 "
        "cbsz:4 blgp:4"
    )


def simulate(
    toolchain,
    asm: str,
    *,
    waves: int = 1,
    vmem_latency: float = LATENCY,
    vmem_bpc: float = BPC,
    vgpr: dict[int, np.ndarray] | None = None,
    sgpr: dict[int, int] | None = None,
    memory: GlobalMemory | None = None,
) -> tuple[WorkgroupCycles, WorkgroupTrace]:
    """Run `asm` (+ s_endpgm) on one workgroup of `waves` waves; its cycles and its path.
    As in a real launch, the kernarg SGPR pair points at a kernarg (all zero: no operand
    pointers), which the path recorder reads at the first step."""
    memory = memory or GlobalMemory()
    ex = make_executor(toolchain, asm, waves_per_group=waves, memory=memory)
    if ex.program.kernarg_sgpr >= 0:
        kernarg = memory.alloc(KERNARG_SIZE)
        ex.sgpr[ex.program.kernarg_sgpr] = kernarg & 0xFFFFFFFF
        ex.sgpr[ex.program.kernarg_sgpr + 1] = kernarg >> 32
    for reg, value in (vgpr or {}).items():
        ex.vgpr[reg] = value
    for reg, value in (sgpr or {}).items():
        ex.sgpr[reg] = value
    recorder = PathRecorder(waves_per_group=waves)
    ex.observer = recorder
    ex.run()
    path = recorder.workgroup(0, 0)
    assert len(path.waves) == waves
    return simulate_workgroup(decode_ops(ex.program), path, vmem_latency, vmem_bpc), path


def buffer_sgprs(memory: GlobalMemory, size: int = 4096) -> dict[int, int]:
    """s[8:11] = a raw buffer resource over a fresh `size`-byte allocation (stride 0)."""
    addr = memory.alloc(size)
    return {8: addr & 0xFFFFFFFF, 9: addr >> 32, 10: size, 11: 0x20000}


# --- the table rows this file covers ----------------------------------------------------------

COVERED = {
    "issue_cycles",
    "wait_state_cycles",
    "mfma_pass_cycles",
    "mfma_writeback_cycles",
    "lds_latency",
    "lds_pair_bytes_per_clk",
    "lds_bank_bytes_per_clk",
    "smem_latency",
    "barrier_cycles",
}


def test_every_row_the_cu_model_uses_has_a_test_here() -> None:
    """A row cu.py starts reading (or a row it stops reading) shows up here first, and in the
    rows its cached cycles are keyed on (cu.SIMULATED_COSTS: a row missing there would leave
    cycles simulated under its old value in the cache)."""
    used = set(re.findall(r'COST\["(\w+)"\]', Path(cu.__file__).read_text()))
    # lds_bank_bytes_per_clk reaches the model through trace.lds_bank_cycles' phase size
    assert used | {"lds_bank_bytes_per_clk"} == COVERED == set(cu.SIMULATED_COSTS)
    assert COVERED.issubset(c.name for c in TABLE)


def test_the_bank_row_is_the_phase_size_trace_uses() -> None:
    # 64 banks x 4 B per clock (WP), the phase lds_bank_cycles serves lanes in
    assert trace.LDS_BYTES_PER_PHASE == COST["lds_bank_bytes_per_clk"] == 64 * 4


# --- issue and wait states --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asm", "slots"),
    [
        ("s_mov_b32 s4, 1\ns_mov_b32 s5, 2\ns_mov_b32 s6, 3", 3),
        ("v_mov_b32 v1, 0\ns_add_u32 s4, s4, 1\nv_add_u32 v2, v1, v1\ns_mov_b32 s5, 0", 4),
    ],
)
def test_one_instruction_issues_per_slot(toolchain, asm: str, slots: int) -> None:
    # `slots` instructions x issue_cycles; s_endpgm ends the wave at its own issue time
    got, path = simulate(toolchain, asm)
    assert len(path.waves[0].pcs) == slots + 1  # + s_endpgm
    assert got.cycles == slots * COST["issue_cycles"]
    assert got.mfma_busy == got.lds_busy == got.vmem_busy == got.vm_wait == 0.0


@pytest.mark.parametrize("n", [0, 3, 7])
def test_s_nop_n_fills_n_plus_1_wait_states(toolchain, n: int) -> None:
    # s_nop N: N+1 wait states x wait_state_cycles (s_nop 7 = 8 x 4 = 32 clk)
    got, _ = simulate(toolchain, f"s_nop {n}")
    assert got.cycles == (n + 1) * COST["wait_state_cycles"]


def test_nops_and_instructions_add_up(toolchain) -> None:
    # s_nop 7, v_mov, s_nop 1: (8 + 2) wait states + 1 issue slot
    got, _ = simulate(toolchain, "s_nop 7\nv_mov_b32 v1, 0\ns_nop 1")
    assert got.cycles == 10 * COST["wait_state_cycles"] + COST["issue_cycles"]


# --- MFMA -------------------------------------------------------------------------------------


@pytest.mark.parametrize("independent", [0, 2, 6])
def test_reading_an_mfma_result_waits_for_its_last_pass_and_writeback(
    toolchain, independent: int
) -> None:
    # MFMA at 0 (pipe busy 4 passes x 4 clk), `independent` VALUs issue one slot each without
    # waiting for the pipe; v_accvgpr_read of the result issues at
    # max((1 + independent) slots, 16-clk pipe + writeback), then costs its own issue slot
    issue = COST["issue_cycles"]
    busy = FP4_PASSES * COST["mfma_pass_cycles"]
    valus = "".join(f"v_mov_b32 v{20 + i}, 0\n" for i in range(independent))
    got, _ = simulate(toolchain, mfma("0:3", "0:3") + "\n" + valus + "v_accvgpr_read_b32 v40, a0")
    read_at = max((1 + independent) * issue, busy + COST["mfma_writeback_cycles"])
    assert got.cycles == read_at + issue
    assert got.mfma_busy == busy and got.mfma_count == 1


def test_independent_mfmas_back_to_back_share_the_pipe(toolchain) -> None:
    # MFMA 1 at 0 holds the pipe until 16; MFMA 2 (other accumulator) starts at 16 and holds it
    # to 32, its result is written back at 32 + writeback; the read then costs one slot:
    # 2 x 16 + writeback + issue
    busy = FP4_PASSES * COST["mfma_pass_cycles"]
    asm = mfma("0:3", "0:3") + "\n" + mfma("4:7", "4:7") + "\nv_accvgpr_read_b32 v40, a4"
    got, _ = simulate(toolchain, asm)
    assert got.cycles == 2 * busy + COST["mfma_writeback_cycles"] + COST["issue_cycles"]
    assert got.mfma_busy == 2 * busy and got.mfma_count == 2


def test_an_mfma_accumulating_onto_the_last_result_is_ordered_by_the_pipe(toolchain) -> None:
    # MFMA 2 reads MFMA 1's a[0:3] as SrcC: the pipe orders the two (an exact SrcC overlap
    # needs 0 wait states, f4pipe.arch.waitstates rule B3.5), so it starts at 16, not at
    # 16 + writeback; its result is ready at 32 + writeback; the read costs one slot:
    # 2 x 16 + writeback + issue
    busy = FP4_PASSES * COST["mfma_pass_cycles"]
    wb = COST["mfma_writeback_cycles"]
    asm = mfma("0:3", "0:3") + "\n" + mfma("0:3", "0:3") + "\nv_accvgpr_read_b32 v40, a0"
    got, _ = simulate(toolchain, asm)
    assert got.cycles == 2 * busy + wb + COST["issue_cycles"]


def test_a_workgroup_lasts_at_least_as_long_as_its_mfma_pipe_is_busy(toolchain) -> None:
    # one MFMA: its pipe is busy 16 clk, so the workgroup cannot be done before 16
    got, _ = simulate(toolchain, mfma("0:3", "0:3"))
    assert got.cycles >= got.mfma_busy == FP4_PASSES * COST["mfma_pass_cycles"]


# --- LDS --------------------------------------------------------------------------------------


def test_lds_bank_cycles_of_conflict_free_pairwise_and_broadcast_accesses() -> None:
    active = np.ones(64, dtype=bool)
    # b128, consecutive 16 B per lane: 16 lanes fill the 64 banks once per phase, 4 phases
    assert lds_bank_cycles(LANE * 16, active, 4) == 4
    # lanes 2k and 2k+1 hit the same 4 banks at different dwords (1 KiB apart): 2 per phase
    assert lds_bank_cycles((LANE // 2) * 16 + (LANE % 2) * 1024, active, 4) == 8
    # b32, every lane the same dword: one phase, one dword, broadcast
    assert lds_bank_cycles(np.full(64, 8), active, 1) == 1


#: ds_read_b128 lane addresses: conflict-free, 2-way and 4-way (k lanes on one bank group).
B128_ADDRS = {k: (LANE // k) * 16 + (LANE % k) * 1024 for k in (1, 2, 4)}


def b128_bank_cycles(ways: int) -> float:
    # 64 lanes x 16 B over the banks' bytes per clock, times the conflict degree
    return ways * 64 * 16 / COST["lds_bank_bytes_per_clk"]


@pytest.mark.parametrize("ways", [1, 2, 4])
def test_one_waves_ds_read_b128_is_bound_by_its_pair_path_or_its_banks(
    toolchain, ways: int
) -> None:
    # the wave's 1 KiB takes 1024 / 128 = 8 clk on its SIMD pair's path and `ways` x 4 clk in
    # the banks, both from issue at 0; data is back lds_latency after the later; the s_waitcnt
    # (issued at 4) waits for it and s_endpgm issues one slot later
    pair = 64 * 16 / COST["lds_pair_bytes_per_clk"]
    banks = b128_bank_cycles(ways)
    got, path = simulate(
        toolchain, "ds_read_b128 v[4:7], v1\ns_waitcnt lgkmcnt(0)", vgpr={1: u32(B128_ADDRS[ways])}
    )
    assert path.waves[0].lds_cycles[0] == banks
    assert got.cycles == max(pair, banks) + COST["lds_latency"] + COST["issue_cycles"]
    assert got.lds_busy == max(pair, banks)


def test_a_single_waves_2_way_conflict_hides_behind_the_pair_path_a_4_way_does_not(
    toolchain,
) -> None:
    # 2-way: 8 bank clk = 8 pair clk, no cost; 4-way: 16 bank clk, 16 - 8 more than conflict-free
    asm = "ds_read_b128 v[4:7], v1\ns_waitcnt lgkmcnt(0)"
    cyc = {k: simulate(toolchain, asm, vgpr={1: u32(a)})[0].cycles for k, a in B128_ADDRS.items()}
    pair = 64 * 16 / COST["lds_pair_bytes_per_clk"]
    assert cyc[2] == cyc[1]
    assert cyc[4] - cyc[1] == b128_bank_cycles(4) - pair


@pytest.mark.parametrize("ways", [1, 2, 4])
def test_four_waves_ds_read_b128_share_the_banks_across_both_pairs(toolchain, ways: int) -> None:
    # All 4 waves issue at 0, served in wave order. Pair path P = 8 clk, banks B per access:
    # wave 0 (pair 0) from 0: banks to B; wave 1 (pair 0) from P: banks to max(B, P) + B;
    # wave 2 (pair 1) from 0: banks to max(B, P) + 2B; wave 3 (pair 1) from P: banks to
    # max(B, P) + 3B, its pair path to 2P. Wave 3's data is last: max(max(B, P) + 3B, 2P)
    # + lds_latency, then the s_waitcnt releases and s_endpgm issues one slot later.
    pair = 64 * 16 / COST["lds_pair_bytes_per_clk"]
    banks = b128_bank_cycles(ways)
    got, path = simulate(
        toolchain,
        "ds_read_b128 v[4:7], v1\ns_waitcnt lgkmcnt(0)",
        waves=4,
        vgpr={1: u32(B128_ADDRS[ways])},
    )
    assert [int(w.lds_cycles[0]) for w in path.waves] == [banks] * 4
    last = max(max(banks, pair) + 3 * banks, 2 * pair)
    assert got.cycles == last + COST["lds_latency"] + COST["issue_cycles"]
    assert got.lds_busy == max(2 * pair, 4 * banks)  # busier pair path vs all bank clocks


def test_with_both_pairs_busy_a_2_way_conflict_costs_three_extra_bank_turns(toolchain) -> None:
    # from the derivation above: (max(8, 8) + 3 x 8) - (max(4, 8) + 3 x 4) = 3 x (8 - 4)
    asm = "ds_read_b128 v[4:7], v1\ns_waitcnt lgkmcnt(0)"
    free = simulate(toolchain, asm, waves=4, vgpr={1: u32(B128_ADDRS[1])})[0].cycles
    conflict = simulate(toolchain, asm, waves=4, vgpr={1: u32(B128_ADDRS[2])})[0].cycles
    assert conflict - free == 3 * (b128_bank_cycles(2) - b128_bank_cycles(1))


def test_broadcast_ds_read_b32(toolchain) -> None:
    # 256 B: 256 / 128 = 2 clk on the pair path, 1 bank clk (broadcast): data at 2 + latency,
    # then one slot for s_endpgm after the released s_waitcnt
    got, path = simulate(
        toolchain, "ds_read_b32 v4, v1\ns_waitcnt lgkmcnt(0)", vgpr={1: u32(np.full(64, 8))}
    )
    assert path.waves[0].lds_cycles[0] == 1
    pair = 64 * 4 / COST["lds_pair_bytes_per_clk"]
    assert got.cycles == max(pair, 1) + COST["lds_latency"] + COST["issue_cycles"]


# --- vector and scalar memory -----------------------------------------------------------------

CALIBRATIONS = [(1000.0, 128.0), (500.0, 16.0), (321.0, 48.0)]


@pytest.mark.parametrize(("vmem_latency", "vmem_bpc"), CALIBRATIONS)
@pytest.mark.parametrize(
    ("load", "dwords"), [("buffer_load_dword v4", 1), ("buffer_load_dwordx4 v[4:7]", 4)]
)
def test_vmcnt_0_waits_latency_plus_bytes_over_the_path(
    toolchain, vmem_latency: float, vmem_bpc: float, load: str, dwords: int
) -> None:
    # 64 lanes x 4 B x dwords leave the CU's path in bytes / vmem_bpc clk from 0 and are back
    # vmem_latency later; the s_waitcnt (issued at 4) waits for that, s_endpgm one slot later
    mem = GlobalMemory()
    nbytes = 64 * 4 * dwords
    got, path = simulate(
        toolchain,
        f"{load}, off, s[8:11], 0\ns_waitcnt vmcnt(0)",
        vmem_latency=vmem_latency,
        vmem_bpc=vmem_bpc,
        sgpr=buffer_sgprs(mem),
        memory=mem,
    )
    assert path.waves[0].vmem_bytes[0] == nbytes
    back = vmem_latency + nbytes / vmem_bpc
    assert got.cycles == pytest.approx(back + COST["issue_cycles"], rel=1e-12)
    assert got.vmem_busy == pytest.approx(nbytes / vmem_bpc, rel=1e-12)
    assert got.vm_wait == pytest.approx(back - COST["issue_cycles"], rel=1e-12)


@pytest.mark.parametrize(("vmem_latency", "vmem_bpc"), CALIBRATIONS)
def test_the_vmem_path_is_shared_by_the_waves_of_the_cu(
    toolchain, vmem_latency: float, vmem_bpc: float
) -> None:
    # two waves load 1 KiB each at 0: wave 1's bytes leave the path after wave 0's,
    # at 2 x 1024 / vmem_bpc, and are back vmem_latency later; s_endpgm one slot after
    mem = GlobalMemory()
    got, _ = simulate(
        toolchain,
        "buffer_load_dwordx4 v[4:7], off, s[8:11], 0\ns_waitcnt vmcnt(0)",
        waves=2,
        vmem_latency=vmem_latency,
        vmem_bpc=vmem_bpc,
        sgpr=buffer_sgprs(mem),
        memory=mem,
    )
    want = vmem_latency + 2 * 1024 / vmem_bpc + COST["issue_cycles"]
    assert got.cycles == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(("vmem_latency", "vmem_bpc"), CALIBRATIONS)
@pytest.mark.parametrize("after", ["", "s_nop 7"])
def test_loosening_vmcnt_0_to_vmcnt_1_never_raises_the_cycles(
    toolchain, vmem_latency: float, vmem_bpc: float, after: str
) -> None:
    # Two 256 B loads issued at 0 and I: load 1 back at T + L (T = 256 / bpc), load 2 leaves
    # the path at max(I, T) + T, back L later. The s_waitcnt issues at 2I; `after` takes X clk.
    # vmcnt(0) releases at load 2's return; vmcnt(1) at load 1's; s_endpgm then issues one
    # slot + X later and the wave ends no earlier than its last load's return.
    issue = COST["issue_cycles"]
    extra = 8 * COST["wait_state_cycles"] if after else 0
    t = 256 / vmem_bpc
    back1 = t + vmem_latency
    back2 = max(issue, t) + t + vmem_latency
    want = {
        0: max(2 * issue, back2) + issue + extra,
        1: max(max(2 * issue, back1) + issue + extra, back2),
    }
    mem = GlobalMemory()
    sgpr = buffer_sgprs(mem)
    got = {}
    for n in (0, 1):
        asm = (
            "buffer_load_dword v1, off, s[8:11], 0\n"
            "buffer_load_dword v2, off, s[8:11], 0 offset:4\n"
            f"s_waitcnt vmcnt({n})\n{after}"
        )
        got[n] = simulate(
            toolchain, asm, vmem_latency=vmem_latency, vmem_bpc=vmem_bpc, sgpr=sgpr, memory=mem
        )[0].cycles
        assert got[n] == pytest.approx(want[n], rel=1e-12)
    assert got[1] <= got[0]


def test_lgkmcnt_0_after_a_scalar_load_waits_smem_latency(toolchain) -> None:
    # s_load at 0 is back smem_latency later; s_waitcnt (at 4) waits for it; s_endpgm one slot
    mem = GlobalMemory()
    addr = mem.alloc(64)
    got, _ = simulate(
        toolchain,
        "s_load_dword s4, s[20:21], 0x0\ns_waitcnt lgkmcnt(0)",
        sgpr={20: addr & 0xFFFFFFFF, 21: addr >> 32},
        memory=mem,
    )
    assert got.cycles == COST["smem_latency"] + COST["issue_cycles"]


# --- barrier ----------------------------------------------------------------------------------


@pytest.mark.parametrize("busy_wave", [0, 1])
def test_a_barrier_releases_both_waves_at_the_later_arrival_plus_barrier_cycles(
    toolchain, busy_wave: int
) -> None:
    # Both waves: readfirstlane, s_cmp, s_cbranch (3 slots); `busy_wave` also runs two s_nop 7
    # (16 wait states) before the barrier. Release = 3 slots + 16 wait states + barrier_cycles;
    # both then run s_nop 0 (1 wait state) and end.
    skip = "s_cbranch_scc0" if busy_wave == 0 else "s_cbranch_scc1"
    asm = f"""
    v_readfirstlane_b32 s4, v0
    s_cmp_lt_u32 s4, 64
    {skip} skip
    s_nop 7
    s_nop 7
    skip:
    s_barrier
    s_nop 0
    """
    got, path = simulate(toolchain, asm, waves=2)
    steps = [len(w.pcs) for w in path.waves]
    assert steps[busy_wave] == steps[1 - busy_wave] + 2  # the two s_nop 7
    release = 3 * COST["issue_cycles"] + 16 * COST["wait_state_cycles"] + COST["barrier_cycles"]
    assert got.cycles == release + COST["wait_state_cycles"]
