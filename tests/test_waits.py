"""Waits computed (f4pipe.analysis.waits, `f4pipe waits`): on llvm-mc-assembled snippets whose
loosest waits are derived by hand from the in-order counter rules, and on a shipped kernel
whose every loosening the emulator then tries."""

from __future__ import annotations

import json
import re

import pytest
from emu_snippets import assemble

from f4pipe.aiter.manifest import read_manifest
from f4pipe.analysis.cfg import build_cfg
from f4pipe.analysis.waits import advise, patch_waits, states_by_pc
from f4pipe.arch.waitcnt import decode_waitcnt, encode_waitcnt
from f4pipe.cli import main
from f4pipe.codeobj.program import Program
from f4pipe.edits.trykernel import open_devices, quick_cases
from f4pipe.edits.waitcheck import verify_loosening
from f4pipe.perf.predict import wait_change_cycles
from f4pipe.perf.profile import KernelProfile

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


def test_every_immediate_is_its_own_counts_re_encoded():
    """Decoding and encoding are one layout: any immediate, taken apart and put back, is itself
    (expcnt and the unused bits kept)."""
    assert all(encode_waitcnt(s, *decode_waitcnt(s)) == s for s in range(1 << 16))


@pytest.fixture(scope="module")
def shipped(f4gemm_dir):
    manifest = read_manifest(f4gemm_dir)
    entry = manifest.get(KERNEL)
    return entry, manifest.co_path(entry)


def test_the_shipped_kernel_misses_no_wait_and_its_vmcnt_lore_is_exactly_tight(shipped, tmp_path):
    """32x128's vmcnt(12) waits look loose for registers (14 would do), but they retire the
    LDS DMA the other waves read after the next barrier: the static analysis now proves them
    exactly tight (the barrier publishes that DMA's bytes, which a DS read after it may touch),
    and the emulator agrees (vmcnt(13) is an lds-visibility hazard). Its lgkmcnt(0) before the
    epilogue could be lgkmcnt(2), and the final wait retires nothing."""
    from f4pipe.edits.waitcheck import first_problem

    entry, co = shipped
    program = Program.load(co, entry.symbol)
    advice = advise(program)
    assert len(advice) == 12
    loops = [a for a in advice if a.actual == (12, 5)]
    assert len(loops) == 8 and all(a.loosest == (12, 5) and not a.dma_released for a in loops)
    for a in loops:
        binding = [n for n in a.needs if n.counter == "vmcnt" and n.younger == 12]
        assert any("publishes LDS bytes" in n.message for n in binding)
        assert all("LDS bytes" in n.message for n in binding)  # LDS DMA, not registers
    (dev,) = open_devices("emulator", True)
    try:
        looser = tmp_path / "looser.co"
        patch_waits(co, looser, {loops[0].pc: (13, 5)})
        assert "lds-visibility" in first_problem(dev, entry, looser, quick_cases(entry))
        verified = {v.pc: v for v in verify_loosening(entry, co, advice, dev, quick_cases(entry))}
    finally:
        dev.close()
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


@pytest.fixture(scope="module")
def shipped_asm(shipped, toolchain) -> list[str]:
    from f4pipe.codeobj.co2asm import co2asm

    return co2asm(shipped[1], toolchain).splitlines()


def first(lines: list[str], text: str) -> int:
    return next(i for i, line in enumerate(lines) if line.strip() == text)


def broken_variants(asm: list[str]) -> dict[str, tuple[list[str], str]]:
    """Edits that break the kernel, and the line --apply must insert to repair each."""
    wait = first(asm, "s_waitcnt lgkmcnt(0)")  # retires the prologue's scalar loads
    nop = first(asm, "s_nop 1")  # VALU writes VCC, then v_cndmask reads it (rule B1.4)
    dropped = asm[:wait] + asm[wait + 1 :]
    short = [*asm[:nop], "\ts_nop 0", *asm[nop + 1 :]]
    no_nop = asm[:nop] + asm[nop + 1 :]
    moved = [*asm[:wait], asm[wait + 1], asm[wait], *asm[wait + 2 :]]
    return {
        "dropped wait": (dropped, "s_waitcnt lgkmcnt(0)"),
        "shortened s_nop": (short, "s_nop 0"),
        "dropped s_nop": (no_nop, "s_nop 1"),
        "wait moved below its reader": (moved, "s_waitcnt lgkmcnt(0)"),
    }


@pytest.mark.parametrize(
    "case", ["dropped wait", "shortened s_nop", "dropped s_nop", "wait moved below its reader"]
)
def test_apply_repairs_a_broken_edit_with_one_inserted_line(
    shipped_asm, f4gemm_dir, tmp_path, case, capsys
):
    """Minimal: the repaired file is the broken one plus exactly one commented line, right
    before the instruction that needed it; it has 0 static findings and runs clean on the
    emulator (--apply checks both before it writes)."""
    lines, inserted = broken_variants(shipped_asm)[case]
    broken, fixed = tmp_path / "broken.s", tmp_path / "fixed.s"
    broken.write_text("\n".join(lines) + "\n")
    assert main(["waits", str(broken)]) == 1  # reported missing first
    capsys.readouterr()
    apply = ["--co-dir", str(f4gemm_dir), "--apply", "-o", str(fixed)]
    assert main(["waits", str(broken), *apply]) == 0
    assert "0 static findings; the emulator runs it clean" in capsys.readouterr().out
    out = fixed.read_text().splitlines()
    assert len(out) == len(lines) + 1
    (at,) = [i for i, (a, b) in enumerate(zip(out, [*lines, ""], strict=True)) if a != b][:1]
    assert out[at].split("//")[0].strip() == inserted and "// f4pipe waits: inserted" in out[at]
    assert out[:at] + out[at + 1 :] == lines


def test_apply_repairs_a_dropped_barrier_with_one_wait_and_one_barrier(
    shipped_asm, f4gemm_dir, tmp_path, capsys
):
    """The main loop's s_barrier dropped. Statically, the barrier before it now publishes the
    LDS DMA bytes the reads after the dropped one touch, so the static check reports waits
    missing before the barriers that remain (f4pipe.analysis.ldsdma). That a barrier is
    missing no static check can see (which LDS words two waves share is data), so --apply also
    runs the kernel, finds a DMA overwriting words another wave still reads with no barrier
    between, and inserts right before it one wait and one s_barrier. The repair runs clean."""
    loop_wait = first(shipped_asm, "s_waitcnt vmcnt(12) lgkmcnt(5)")
    barrier = next(i for i in range(loop_wait, len(shipped_asm)) if "s_barrier" in shipped_asm[i])
    lines = shipped_asm[:barrier] + shipped_asm[barrier + 1 :]
    broken, fixed = tmp_path / "broken.s", tmp_path / "fixed.s"
    broken.write_text("\n".join(lines) + "\n")
    assert main(["waits", str(broken)]) == 1
    assert "`s_barrier` publishes LDS bytes" in capsys.readouterr().out
    apply = ["--co-dir", str(f4gemm_dir), "--apply", "-o", str(fixed)]
    assert main(["waits", str(broken), *apply]) == 0
    said = capsys.readouterr().out
    assert "0 static findings; the emulator runs it clean" in said
    # what the repair costs, beside it: the cycle model's main loop before and after
    before, after = map(float, re.search(r"main loop (\d+) -> (\d+) clk", said).groups())
    assert "PREDICTED" in said and after >= before
    out = fixed.read_text().splitlines()
    added = [i for i, line in enumerate(out) if "// f4pipe waits: inserted" in line]
    barriers = [i for i in added if out[i].split("//")[0].strip() == "s_barrier"]
    assert len(barriers) == 1 and barriers[0] - 1 in added
    assert out[barriers[0] - 1].split("//")[0].strip().startswith("s_waitcnt")
    statics = [i for i in added if "publishes LDS bytes" in out[i]]
    assert statics and all("s_barrier" in out[i + 1] for i in statics)
    assert [line for i, line in enumerate(out) if i not in added] == lines


def test_apply_on_a_correct_kernel_changes_nothing(shipped, f4gemm_dir, tmp_path, capsys):
    _, co = shipped
    out = tmp_path / "same.s"
    assert main(["waits", str(co), "--co-dir", str(f4gemm_dir), "--apply", "-o", str(out)]) == 0
    assert "0 change(s)" in capsys.readouterr().out
    assert "f4pipe waits:" not in out.read_text()


def test_loosen_relaxes_only_the_waits_the_emulator_confirms(
    shipped, shipped_asm, f4gemm_dir, tmp_path, capsys
):
    _, co = shipped
    out = tmp_path / "loose.s"
    args = ["waits", str(co), "--co-dir", str(f4gemm_dir), "--apply", "--loosen", "-o", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    new = out.read_text().splitlines()
    pairs = zip(shipped_asm, new, strict=True)
    changed = [(a.strip(), b.split("//")[0].strip()) for a, b in pairs if a != b]
    assert changed == [
        ("s_waitcnt lgkmcnt(0)", "s_waitcnt lgkmcnt(2)"),
        ("s_waitcnt vmcnt(0) expcnt(0) lgkmcnt(0)", "s_waitcnt expcnt(0)"),
    ]


def test_thorough_checks_add_the_seed_and_safety_sweep_shapes(shipped):
    """--thorough: every emulated check also runs M=300 N=2048 K=1024 and the sweep's edges."""
    import argparse

    from f4pipe.cli.waits import _cases
    from f4pipe.pipeline.edgesweep import edge_shapes

    entry, _ = shipped
    quick = _cases(argparse.Namespace(case=[], thorough=False), entry)
    thorough = _cases(argparse.Namespace(case=["64,256,512"], thorough=True), entry)
    shapes = {(c.m, c.n, c.k) for c in thorough}
    assert quick == quick_cases(entry)
    assert (300, 2048, 1024) in shapes and (64, 256, 512) in shapes
    assert {(s.m, s.n, s.k) for s in edge_shapes(entry)} <= shapes
    assert all(c.kernel == entry.name for c in thorough)


def test_apply_with_no_manifest_reachable_writes_nothing_unless_static_only(
    shipped_asm, tmp_path, monkeypatch, capsys
):
    """An f4gemm kernel's repair must also run clean on the emulator, which needs the manifest:
    with none reachable (no --co-dir, no AITER_ASM_DIR, no fetched aiter here) --apply and
    --loosen stop naming --co-dir; --static-only writes the statically checked repair and
    says that LDS between waves went unchecked."""
    monkeypatch.delenv("AITER_ASM_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./resources/aiter to fall back on
    lines, _ = broken_variants(shipped_asm)["dropped wait"]
    broken, fixed = tmp_path / "broken.s", tmp_path / "fixed.s"
    broken.write_text("\n".join(lines) + "\n")
    for extra in ([], ["--loosen"], ["--loosen", "--static-only"]):
        assert main(["waits", str(broken), "--apply", *extra, "-o", str(fixed)]) == 2
        err = capsys.readouterr().err
        assert "--co-dir" in err and "Traceback" not in err
        assert not fixed.exists()
    assert main(["waits", str(broken), "--apply", "--static-only", "-o", str(fixed)]) == 0
    said = capsys.readouterr().out
    assert "0 static findings" in said and "emulator runs it clean" not in said
    assert "LDS visibility between waves was not checked" in said
    assert fixed.read_text().count("// f4pipe waits: inserted") == 1


def test_try_hazards_and_waits_report_the_same_static_findings(
    shipped_asm, f4gemm_dir, toolchain, tmp_path, capsys
):
    """One edited kernel (a scalar wait and an s_nop dropped), as .s and as .co: `hazards`
    and `waits` list the same findings, and `try` the same ones as new (the original has none)."""
    from f4pipe.edits.trykernel import try_edit

    lines, _ = broken_variants(shipped_asm)["dropped wait"]
    nop = first(lines, "s_nop 1")
    lines = lines[:nop] + lines[nop + 1 :]
    asm, co = tmp_path / f"{KERNEL}.s", tmp_path / f"{KERNEL}.co"
    asm.write_text("\n".join(lines) + "\n")
    tried = try_edit(asm, f4gemm_dir, toolchain, cases=[], out_co=co, baseline=False)
    expected = tried.static_hazards
    assert {"hazard [B1.4]", "hazard [lgkmcnt]"} <= {m.split(":")[0] for m in expected}
    for path in (asm, co):
        assert main(["hazards", str(path), "--json"]) == 1
        (report,) = json.loads(capsys.readouterr().out)
        assert [f["message"] for f in report["findings"]] == expected, path.suffix
        assert main(["waits", str(path), "--json"]) == 1
        assert json.loads(capsys.readouterr().out)["findings"] == expected, path.suffix


@pytest.mark.parametrize("tile", ["32x128", "BpreShuffle_256x256"])
def test_apply_repairs_every_wait_but_the_first_dropped(
    tile, f4gemm_dir, toolchain, tmp_path, capsys
):
    """Every s_waitcnt but the first dropped: the static analysis sees the LDS DMA now
    (f4pipe.analysis.ldsdma), so the waits that retire it come from it, with the loosest
    vmcnt: before a barrier that publishes a DMA's bytes to the other waves, or before a DS
    access of the wave's own DMA bytes. The emulator then finds nothing more to add (no
    lds-visibility or lds-war repair, no new barrier), and the repair runs clean at try's
    shapes and at the seed's every-kernel shape (M=300 N=2048 K=1024)."""
    from f4pipe.codeobj.co2asm import co2asm

    manifest = read_manifest(f4gemm_dir)
    asm = co2asm(manifest.co_path(manifest.get(tile)), toolchain).splitlines()
    waits = [i for i, line in enumerate(asm) if line.strip().startswith("s_waitcnt")]
    lines = [line for i, line in enumerate(asm) if i not in set(waits[1:])]
    broken, fixed = tmp_path / "broken.s", tmp_path / "fixed.s"
    broken.write_text("\n".join(lines) + "\n")
    assert main(["waits", str(broken), "--json"]) == 1
    missing = json.loads(capsys.readouterr().out)["missing"]
    assert any("publishes LDS bytes" in f for m in missing for f in m["findings"])
    apply = ["--co-dir", str(f4gemm_dir), "--apply", "-o", str(fixed), "--case", "300,2048,1024"]
    assert main(["waits", str(broken), *apply]) == 0
    assert "0 static findings; the emulator runs it clean" in capsys.readouterr().out
    text = fixed.read_text().splitlines()
    added = [i for i, line in enumerate(text) if "waits: inserted" in line]
    dma = [i for i in added if "LDS bytes" in text[i]]
    assert dma and all("vmcnt(" in text[i] and "lgkmcnt" not in text[i].split("//")[0] for i in dma)
    assert all(text[i + 1].strip() == "s_barrier" for i in dma if "publishes" in text[i])
    assert not any("lds-visibility" in text[i] or "lds-war" in text[i] for i in added)
    assert not any(text[i].split("//")[0].strip() == "s_barrier" for i in added)


def test_lds_dma_waits_follow_the_bytes_each_access_may_touch(toolchain):
    """The DMA writes LDS 0..255 (M0 = 0, 64 lanes x 4 bytes). A DS read of 1024..1279 may run
    while it is in flight; one of 0..255 needs it retired (vmcnt(0): nothing younger); a
    barrier before a read of its bytes needs it retired before the barrier (another wave
    reads them after it), one before a read of other bytes does not."""
    from f4pipe.analysis.hazards import analyse
    from f4pipe.analysis.waits import repairs

    head = """
        v_and_b32 v3, 0xfc, v0
        s_mov_b32 m0, 0
        buffer_load_dword v1, s[8:11], 0 offen lds
    """
    cases = {
        "ds_read_b32 v4, v3 offset:1024": [],
        "ds_read_b32 v4, v3": ["may touch LDS bytes"],
        "ds_write_b32 v3, v0": ["may touch LDS bytes"],
        "s_barrier\nds_read_b32 v4, v3 offset:1024": [],
        "s_barrier\nds_read_b32 v4, v3": ["publishes LDS bytes", "may touch LDS bytes"],
    }
    for tail, expected in cases.items():
        program = Program.from_code(assemble(toolchain, head + tail + "\ns_endpgm"))
        found = [m for m in analyse(program).messages() if "LDS bytes" in m]
        assert [next(e for e in expected if e in m) for m in found] == expected, tail
        if expected:  # the first access (or the barrier) gets the loosest wait: vmcnt(0)
            (fix,) = repairs(program)
            assert fix.wait == (0, 15)
