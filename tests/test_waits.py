"""Waits computed (f4pipe.emu.waits, `f4pipe waits`): on llvm-mc-assembled snippets whose
loosest waits are derived by hand from the in-order counter rules, and on a shipped kernel
whose every loosening the emulator then tries."""

from __future__ import annotations

import json

import pytest
from emu_snippets import assemble

from f4pipe.cli import main
from f4pipe.emu.effects import decode_waitcnt
from f4pipe.emu.hazards import build_cfg
from f4pipe.emu.program import Program
from f4pipe.emu.waits import advise, encode_waitcnt, patch_waits, states_by_pc, verify_loosening
from f4pipe.manifest import read_manifest
from f4pipe.perf.predict import KernelProfile, wait_change_cycles
from f4pipe.trykernel import open_devices, quick_cases

KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
BUF = "s[8:11], 0 offen"


def advice_of(toolchain, asm: str):
    program = Program.from_code(assemble(toolchain, asm))
    return {a.text: a for a in advise(program)}


def test_a_wait_may_leave_the_younger_loads_in_flight(toolchain):
    """v1's load has two younger loads (v2, v3): vmcnt(2) still retires it; only v1 is read."""
    (a,) = advice_of(
        toolchain,
        f"""
        buffer_load_dword v1, v0, {BUF}
        buffer_load_dword v2, v0, {BUF}
        buffer_load_dword v3, v0, {BUF}
        s_waitcnt vmcnt(0)
        v_add_u32 v4, v1, v0
        """,
    ).values()
    assert (a.actual, a.loosest) == ((0, 15), (2, 15))
    assert a.stricter and "vmcnt(0) could be vmcnt(2)" in a.render()


def test_each_wait_is_loosened_with_the_others_as_they_are(toolchain):
    """Two waits in a row both retire v1's load before it is read: each alone could go, but
    not both. With the first gone, the second needs vmcnt(1) (v1 has one younger load)."""
    loads = f"""
        buffer_load_dword v1, v0, {BUF}
        buffer_load_dword v2, v0, {BUF}
    """
    tail = """
        v_mov_b32 v5, 0
        s_waitcnt vmcnt(0) lgkmcnt(0)
        v_add_u32 v4, v1, v0
    """
    both = advice_of(toolchain, loads + "s_waitcnt vmcnt(0)\n" + tail)
    assert both["s_waitcnt vmcnt(0)"].loosest == (63, 15)
    assert both["s_waitcnt vmcnt(0) lgkmcnt(0)"].loosest == (63, 15)
    (second,) = advice_of(toolchain, loads + tail).values()
    assert second.loosest == (1, 15)


def test_an_overwrite_needs_the_load_retired_too(toolchain):
    """Writing v1 while its load is in flight is a hazard: the wait must retire that load."""
    (a,) = advice_of(
        toolchain,
        f"""
        buffer_load_dword v1, v0, {BUF}
        buffer_load_dword v2, v0, {BUF}
        s_waitcnt vmcnt(0)
        v_mov_b32 v1, 0
        """,
    ).values()
    assert a.loosest == (1, 15)


def test_a_scalar_load_forces_lgkmcnt_0(toolchain):
    """SMEM returns out of order: a wait its result needs must be lgkmcnt(0) whatever DS ops
    are younger."""
    (a,) = advice_of(
        toolchain,
        """
        s_load_dword s20, s[0:1], 0x0
        ds_read_b32 v1, v0
        ds_read_b32 v2, v0
        s_waitcnt lgkmcnt(0)
        s_add_u32 s21, s20, 1
        """,
    ).values()
    assert a.loosest == (63, 0)
    assert "lgkmcnt(0) is needed" in a.render()


def test_loops_are_iterated_to_a_fixed_point(toolchain):
    """In the loop, the load issued in the previous iteration is read after the next load is
    issued: at the wait it has one younger load, so vmcnt(1) suffices on the loop path."""
    (a,) = advice_of(
        toolchain,
        f"""
        s_mov_b32 s12, 4
        buffer_load_dword v1, v0, {BUF}
        loop:
        buffer_load_dword v2, v0, {BUF}
        s_waitcnt vmcnt(0)
        v_add_u32 v3, v1, v3
        v_mov_b32 v1, v2
        s_sub_u32 s12, s12, 1
        s_cmp_eq_u32 s12, 0
        s_cbranch_scc0 loop
        """,
    ).values()
    assert a.loosest == (0, 15)  # v1 (then v2's copy) is read; v2 has no younger load at the wait


@pytest.mark.parametrize(("vm", "lgkm"), [(0, 0), (12, 5), (63, 15), (5, 2), (33, 9)])
def test_waitcnt_immediates_round_trip(vm, lgkm):
    simm = encode_waitcnt(0x0070, vm, lgkm)  # expcnt(7): no wait on it, kept
    assert decode_waitcnt(simm) == (vm, lgkm) and simm & 0x70 == 0x70


@pytest.fixture(scope="module")
def shipped(f4gemm_dir):
    manifest = read_manifest(f4gemm_dir)
    entry = manifest.get(KERNEL)
    return entry, manifest.co_path(entry)


def test_the_shipped_kernel_misses_no_wait_and_its_vmcnt_lore_is_exactly_tight(shipped):
    """32x128's vmcnt(12) waits look loose for registers (14 would do), but they retire the
    LDS DMA the other waves read after the next barrier: the emulator refuses vmcnt(13). Its
    lgkmcnt(0) before the epilogue could be lgkmcnt(2), and the final wait retires nothing."""
    entry, co = shipped
    program = Program.load(co, entry.symbol)
    advice = advise(program)
    assert len(advice) == 12
    loops = [a for a in advice if a.actual == (12, 5)]
    assert len(loops) == 8 and all(a.loosest == (14, 5) and a.dma_released for a in loops)
    (dev,) = open_devices("emulator", True)
    try:
        verified = {v.pc: v for v in verify_loosening(entry, co, advice, dev, quick_cases(entry))}
    finally:
        dev.close()
    for a in loops:
        v = verified[a.pc]
        assert v.confirmed == (12, 5) and "lds-visibility" in v.refused
    looser = {v.actual: v.confirmed for v in verified.values() if v.confirmed != v.actual}
    assert looser == {(63, 0): (63, 2), (0, 0): (63, 15)}
    profile = KernelProfile(entry, co)
    for v in verified.values():
        before, after = wait_change_cycles(profile, {v.pc: v.confirmed})
        assert after <= before  # a looser wait never costs cycles in the model


def test_a_loosened_needed_wait_is_reported_missing(shipped, tmp_path, capsys):
    """lgkmcnt(5) in the main loop is what the registers need: lgkmcnt(6) exposes a DS read."""
    entry, co = shipped
    program = Program.load(co, entry.symbol)
    pc = next(a.pc for a in advise(program) if a.actual == (12, 5))
    broken = tmp_path / "broken.co"
    patch_waits(co, broken, {pc: (12, 6)})
    assert main(["waits", str(broken), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    missing = {m["before_pc"] for m in out["missing"] if m["kind"] == "wait"}
    assert missing and min(missing) > pc  # readers of the DS op the wait no longer retires
    assert out["waits"] == []  # advice waits until what is missing is fixed


def test_explain_lists_the_outstanding_ops_oldest_first(shipped, capsys):
    entry, co = shipped
    program = Program.load(co, entry.symbol)
    cfg = build_cfg(program)
    _model, at = states_by_pc(program, cfg)
    pc = next(a.pc for a in advise(program) if a.actual == (12, 5))
    assert main(["waits", str(co), "--explain", hex(pc)]) == 0
    text = capsys.readouterr().out
    assert f"reached in {len(at[pc])} state(s)" in text
    assert "vmcnt: " in text and "[0 younger]" in text
    assert "lgkmcnt: pc" in text and "needs pc" in text  # who needs which DS read
