"""Deliberately broken timing in real aiter kernels must fail `f4pipe try`, naming the pair.

Edits are made here from co2asm output of the wheel's code objects (never committed): every
s_waitcnt dropped, every wait field loosened by one, the s_nops that a rule needs shrunk,
values-neutral instructions placed too close to an MFMA. Controls (an extra s_nop, an extra
wait, a wait that s_endpgm makes redundant) pass bit-identically, so the checks can pass too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from f4pipe.aiter.manifest import read_manifest
from f4pipe.analysis.hazards import analyse
from f4pipe.codeobj.co2asm import co2asm
from f4pipe.codeobj.program import Program
from f4pipe.edits.trykernel import quick_cases, try_edit
from f4pipe.host.matrices import Case

PREFIX = "f4gemm_bf16_per1x32Fp4_BpreShuffle_"


@pytest.fixture(scope="module")
def asm_of(toolchain, f4gemm_dir):
    cache: dict[str, list[str]] = {}

    def get(tile: str) -> list[str]:
        if tile not in cache:
            text = co2asm(f4gemm_dir / f"{PREFIX}{tile}.co", toolchain)
            cache[tile] = text.splitlines(keepends=True)
        return cache[tile]

    return get


def try_lines(tmp_path: Path, name: str, lines: list[str], toolchain, f4gemm_dir, **kw):
    path = tmp_path / f"{name}.s"
    path.write_text("".join(lines))
    return try_edit(path, f4gemm_dir, toolchain, device="emulator", **kw)


def waits(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if line.strip().startswith("s_waitcnt")]


def before_endpgm(lines: list[str], i: int) -> bool:
    return lines[i + 1].strip() == "s_endpgm"


def caught(result) -> bool:
    """The edit failed on timing (a run's hazard, or a static finding on another path) or on
    values; and it says which instructions."""
    if result.passed:
        return False
    line = result.verdict_line()
    return "hazard [" in line or "elements wrong" in line


#: Waits whose removal is harmless by the ISA's own rules, and why: right before s_endpgm
#: (which waits for everything itself, ISA §12.5), and 256x256's wait at the loop exit
#: (label_0EC7), whose outstanding loads are the next K step's prefetch that the epilogue never
#: reads: their registers and LDS words are untouched until s_endpgm retires them.
HARMLESS_DROPS = {"32x128": set(), "64x128": set(), "256x256": {"label_0EC7:"}}


@pytest.mark.parametrize(("tile", "count"), [("32x128", 12), ("64x128", 20), ("256x256", 12)])
def test_every_dropped_s_waitcnt_is_caught(tile, count, tmp_path, asm_of, toolchain, f4gemm_dir):
    """Each s_waitcnt removed on its own: caught as a hazard (dynamic or all-paths static) or
    as wrong values, except the harmless ones, which pass both checks."""
    base = asm_of(tile)
    assert len(waits(base)) == count
    entry = read_manifest(f4gemm_dir).get(PREFIX + tile)
    for i in waits(base):
        result = try_lines(
            tmp_path, f"drop{i}", base[:i] + base[i + 1 :], toolchain, f4gemm_dir,
            baseline=False, cases=quick_cases(entry)[:1],
        )  # fmt: skip
        if before_endpgm(base, i) or base[i - 1].strip() in HARMLESS_DROPS[tile]:
            assert result.passed and not result.static_hazards, result.verdict_line()
        else:
            assert caught(result), f"dropping line {i} `{base[i].strip()}` passed"


def test_every_loosened_wait_of_32x128_is_caught_where_it_matters(
    tmp_path, asm_of, toolchain, f4gemm_dir
):
    """vmcnt(N) -> vmcnt(N+1), lgkmcnt(N) -> lgkmcnt(N+1), one field at a time. Two do not
    matter, and the static all-paths check proves no register is read early there: the
    epilogue's lgkmcnt(0) (its only pending DS reads have landed by the loop's last wait) and
    the waits right before s_endpgm."""
    base = asm_of("32x128")
    passed = []
    for i in waits(base):
        for field in re.finditer(r"(vmcnt|lgkmcnt)\((\d+)\)", base[i]):
            looser = base[i].replace(field.group(0), f"{field.group(1)}({int(field.group(2)) + 1})")
            lines = [*base[:i], looser, *base[i + 1 :]]
            result = try_lines(tmp_path, "loose", lines, toolchain, f4gemm_dir, baseline=False)
            if caught(result):
                continue
            assert result.passed and not result.static_hazards
            passed.append((i, field.group(0)))
    last_loop_exit = waits(base)[-2]
    assert passed == [
        (last_loop_exit, "lgkmcnt(0)"),
        (waits(base)[-1], "vmcnt(0)"),
        (waits(base)[-1], "lgkmcnt(0)"),
    ]


@pytest.mark.parametrize(("tile", "tight_nops"), [("32x128", 3), ("256x256", 3), ("96x256", 6)])
def test_shrinking_an_s_nop_a_rule_needs_is_caught_with_the_pair_named(
    tile, tight_nops, tmp_path, asm_of, toolchain, f4gemm_dir
):
    """The kernels' integer-division code pads v_rcp_iflag -> v_mul (B1.9, 1) and
    v_cmp vcc -> v_cndmask (B1.4, 2) with exactly the wait states the rules ask (their other
    s_nops pad more than any rule needs: shrinking one of those by one passes)."""
    base = asm_of(tile)
    entry = read_manifest(f4gemm_dir).get(PREFIX + tile)
    small = [Case(entry.tile_m + 1, entry.tile_n, 256, 0, entry.name)]
    tight = {
        "v_rcp_iflag_f32_e32": ("B1.9", "v_rcp_iflag_f32_e32 v4, v4"),
        "v_subrev_u32_e32": ("B1.4", "v_cmp_le_u32_e32 vcc"),
        "v_cmp_le_u32_e32": ("B1.4", "v_cmp_le_u32_e32 vcc"),
    }
    found = 0
    for i, line in enumerate(base):
        prev = base[i - 1].split()[0] if base[i - 1].split() else ""
        if not line.strip().startswith("s_nop") or prev not in tight:
            continue
        rule, producer = tight[prev]
        n = int(line.split()[1])
        shrunk = [] if n == 0 else [line.replace(f"s_nop {n}", f"s_nop {n - 1}")]
        result = try_lines(
            tmp_path, "nop", [*base[:i], *shrunk, *base[i + 1 :]], toolchain, f4gemm_dir,
            baseline=False, cases=small,
        )  # fmt: skip
        assert not result.passed
        text = result.verdict_line()
        assert f"hazard [{rule}]" in text and producer in text, text
        found += 1
    assert found == tight_nops


def test_values_neutral_read_too_soon_after_an_mfma_is_a_hazard(
    tmp_path, asm_of, toolchain, f4gemm_dir
):
    """v_accvgpr_read of an MFMA's result right after it, into a register nothing reads: the
    values are unchanged (so a values-only check passes), but the 4-pass XDL result needs 8
    wait states first (B3.3)."""
    base = asm_of("32x128")
    first = next(i for i, x in enumerate(base) if "v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3]" in x)
    lines = [*base[: first + 1], "\tv_accvgpr_read_b32 v159, a1\n", *base[first + 1 :]]
    result = try_lines(tmp_path, "early", lines, toolchain, f4gemm_dir, baseline=False)
    assert not result.passed
    assert "hazard [B3.3]" in result.verdict_line() and "v_accvgpr_read_b32 v159, a1" in (
        result.verdict_line()
    )
    unchecked = try_lines(
        tmp_path, "early", lines, toolchain, f4gemm_dir, baseline=False, check_hazards=False
    )
    assert unchecked.passed  # the values alone cannot see it


def test_256x256_main_loop_without_waits_is_a_hazard(tmp_path, asm_of, toolchain, f4gemm_dir):
    """The issue's reproducer: every s_waitcnt of the main loop replaced by s_nop 0."""
    base = asm_of("256x256")
    loop = waits(base)[1:-2]  # after the kernarg wait, before the epilogue's and the last
    assert len(loop) == 9
    lines = ["\ts_nop 0\n" if i in loop else x for i, x in enumerate(base)]
    entry = read_manifest(f4gemm_dir).get(PREFIX + "256x256")
    result = try_lines(
        tmp_path, "nowait", lines, toolchain, f4gemm_dir, baseline=False,
        cases=quick_cases(entry)[:1],
    )  # fmt: skip
    assert not result.passed
    assert result.runs[0].status == "hazard"
    assert "lds-visibility" in result.runs[0].message or "cnt]" in result.runs[0].message


@pytest.mark.parametrize(
    "edit",
    [
        lambda lines, i: [*lines[:i], "\ts_nop 7\n", *lines[i:]],
        lambda lines, i: [*lines[:i], "\ts_waitcnt vmcnt(0) lgkmcnt(0)\n", *lines[i:]],
    ],
    ids=["extra-nop", "extra-wait"],
)
def test_controls_extra_padding_or_waiting_pass_bit_identically(
    edit, tmp_path, asm_of, toolchain, f4gemm_dir
):
    base = asm_of("32x128")
    i = waits(base)[3] + 1  # inside the main loop, after its barrier
    result = try_lines(tmp_path, "control", edit(base, i), toolchain, f4gemm_dir)
    assert result.passed, result.verdict_line()
    assert all(r.identical for r in result.runs)


def test_all_35_originals_have_no_static_timing_finding(f4gemm_dir):
    manifest = read_manifest(f4gemm_dir)
    for entry in manifest:
        report = analyse(Program.load(manifest.co_path(entry), entry.symbol))
        assert report.count == 0, (entry.name, report.wait_states[:1], report.counters[:1])
        assert report.instructions > 800
