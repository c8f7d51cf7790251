"""LLVM as the independent check of f4pipe's timing rules (f4research.oracle): a fixed set of
generated kernels compiled by the provisioned llc for gfx950, where f4pipe must add nothing to
LLVM's output and catch every s_nop and s_waitcnt LLVM needed, each disagreement explained by
a documented class (docs/reference/timing.md, section D)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from f4research import oracle, oraclegen, oraclemodel

from f4pipe.arch import waitstates
from f4pipe.codeobj.toolchain import llc_path

#: The CI set: seeds 0..26 and four that meet the explained classes 0..26 do not (nox -s fuzz
#: runs 400 more from seed 1000).
CI_SEEDS = (*range(27), 123, 267, 316, 1023)
TIMING_DOC = Path(__file__).resolve().parents[1] / "docs" / "reference" / "timing.md"


@pytest.fixture(scope="module")
def ci_tally(toolchain, tmp_path_factory):
    return oracle.run(CI_SEEDS, toolchain, tmp_path_factory.mktemp("oracle"))


def test_the_fixed_set_has_no_unexplained_disagreement(ci_tally) -> None:
    assert ci_tally.unexplained == [], ci_tally.summary()
    assert ci_tally.kept >= 20, ci_tally.refused
    # the set exercises both mutations many times, and f4pipe catches LLVM's padding
    assert ci_tally.count("agree", check="s_nop") >= 20
    assert ci_tally.count("agree", check="s_waitcnt") >= 80
    # every documented difference is met, so each class's recogniser runs in CI
    assert {o.explained for o in ci_tally.outcomes if o.explained} == set(oracle.EXPLAINED)


def test_every_explained_class_is_documented() -> None:
    doc = TIMING_DOC.read_text()
    for name, why in oracle.EXPLAINED.items():
        section = why.split(" ")[0].rstrip(":")
        assert re.search(rf"\*\*{re.escape(section)}\.", doc), (name, section)
        assert f"`{name}`" in doc, name


def test_a_rule_f4pipe_lacked_would_be_caught(toolchain, tmp_path, monkeypatch) -> None:
    """The check has teeth: without the XDL result rule (B3.3), LLVM's s_nop after an MFMA
    become unexplained false negatives."""
    weakened = tuple(r for r in waitstates.RULES if r.rule != "B3.3")
    monkeypatch.setattr(waitstates, "RULES", weakened)
    tally = oracle.run(range(8), toolchain, tmp_path)
    missed = [o for o in tally.unexplained if o.check == "s_nop"]
    assert missed and all(o.verdict == "false negative" for o in missed)


def test_a_wait_f4pipe_misread_would_be_caught(toolchain, tmp_path, monkeypatch) -> None:
    """The counter side too: if f4pipe let lgkmcnt(N > 0) retire a scalar load, loosening
    LLVM's lgkmcnt(0) would expose it without f4pipe noticing."""
    from f4pipe.analysis import timing

    real = timing.TimingModel._step

    def smem_retired_by_any_wait(self, s, pc, offsets):
        e = self.effects(pc, offsets)
        if e.wait is not None and e.wait[1] < timing.LGKM_MAX:
            s = timing.State(s.vm, s.lds, (), s.window, s.pending)
        return real(self, s, pc, offsets)

    monkeypatch.setattr(timing.TimingModel, "_step", smem_retired_by_any_wait)
    tally = oracle.run(range(8), toolchain, tmp_path)
    assert any(o.check == "s_waitcnt" and o.verdict == "false negative" for o in tally.unexplained)


def _asm(*lines: str) -> tuple[oraclemodel.AsmInstruction, ...]:
    return tuple(oraclemodel.AsmInstruction(text, 4 * i, 4) for i, text in enumerate(lines))


def test_the_model_keeps_a_ds_load_outstanding_while_a_scalar_load_may_have_returned() -> None:
    """lgkmcnt(1) with a scalar and a DS load outstanding proves neither back (the scalar load
    may be the one that returned)."""
    code = _asm(
        "s_load_dword s20, s[0:1], 0x0",
        "ds_read_b32 v1, v0",
        "s_waitcnt lgkmcnt(1)",
        "v_add_u32_e32 v2, v1, v1",
        "s_endpgm",
    )
    assert oraclemodel.exposures(code, {}) == {(1, 3)}
    assert oraclemodel.exposures(code, {2: (63, 0)}) == set()


def test_the_model_lets_a_younger_load_on_the_same_counter_overwrite() -> None:
    code = _asm(
        "buffer_load_dword v1, v0, s[8:11], 0 offen",
        "buffer_load_dword v1, v0, s[8:11], 0 offen offset:4",
        "s_waitcnt vmcnt(0)",
        "v_add_u32_e32 v2, v1, v1",
        "s_endpgm",
    )
    assert oraclemodel.exposures(code, {}) == set()
    assert oraclemodel.exposures(code, {2: (1, 15)}) == {(1, 3)}


def test_registers_and_waits_read_from_llvm_text() -> None:
    assert oraclemodel.registers("v[2:4], s7, a0, exec") == {"v2", "v3", "v4", "s7", "a0", "exec"}
    assert oraclemodel.waitcnt("s_waitcnt vmcnt(3) lgkmcnt(0)") == (3, 0)
    assert oraclemodel.waitcnt("s_waitcnt lgkmcnt(2)") == (63, 2)
    assert oraclemodel.waitcnt("s_nop 0") is None


def test_the_generator_is_deterministic_and_seed_dependent() -> None:
    assert oraclegen.kernel_ir(7) == oraclegen.kernel_ir(7)
    assert oraclegen.kernel_ir(7) != oraclegen.kernel_ir(8)


def test_llc_is_found_beside_the_toolchain(toolchain) -> None:
    assert llc_path(toolchain).exists()
