"""Instruction-level diff and static checks of hand edits (f4pipe.edits), on the real 32x128
kernel. Edited .s files are made here from co2asm output, never committed."""

from __future__ import annotations

from pathlib import Path

import pytest
from asm_edits import edited

from f4pipe.aiter.manifest import read_manifest
from f4pipe.cli import main
from f4pipe.core.errors import ConfigError, InputError
from f4pipe.edits import StaticCheckError, build_edit_variant, prepare_edit
from f4pipe.edits.checks import kernarg_read, lds_extent, registers_of, static_checks
from f4pipe.edits.listing import read_listing
from f4pipe.edits.spec import parse_edit_specs

KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
STORE = "\tbuffer_store_dwordx4 v[16:19], v158, s[4:7], 0 offen\n"


def prepare(tmp_path: Path, text: str, toolchain, f4gemm_dir, name: str = "edit"):
    asm = tmp_path / f"{name}.s"
    asm.write_text(text)
    return prepare_edit(asm, f4gemm_dir, tmp_path / f"{name}.co", toolchain)


def line_of(path: Path, text: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if line.strip() == text)


# --- operand parsing --------------------------------------------------------------------------


def test_registers_of_parses_every_operand_form():
    uses = registers_of(
        "v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3], v[72:75], v[8:11], a[0:3], v140, v136 "
        "op_sel:[0,1,0] cbsz:4 blgp:4"
    )
    assert [(u.kind, u.first, u.last) for u in uses] == [
        ("a", 0, 3),
        ("v", 72, 75),
        ("v", 8, 11),
        ("a", 0, 3),
        ("v", 140, 140),
        ("v", 136, 136),
    ]
    assert [(u.kind, u.first) for u in registers_of("v_accvgpr_read_b32 v8, acc12")] == [
        ("v", 8),
        ("a", 12),
    ]
    # vcc, exec, counters and the mnemonic's own letters are not numbered registers.
    assert registers_of("v_cndmask_b32_e32 v4, v4, v6, vcc") == registers_of("x v4, v4, v6")
    assert registers_of("s_waitcnt vmcnt(0) lgkmcnt(0)") == []
    assert [
        (u.kind, u.first, u.last) for u in registers_of("s_load_dwordx2 s[4:5], s[0:1], 0x0")
    ] == [
        ("s", 4, 5),
        ("s", 0, 1),
    ]


def test_lds_extent_and_kernarg_read():
    assert lds_extent("ds_read_b128 v[16:19], v145 offset:64") == (64, 80)
    assert lds_extent("ds_read_b32 v136, v150") == (0, 4)
    assert lds_extent("ds_read2_b32 v[0:1], v2 offset0:4 offset1:9") == (16, 40)
    assert lds_extent("ds_read2st64_b64 v[0:3], v2 offset1:2") == (0, 1032)
    assert lds_extent("ds_read_b64_tr_b4 v[0:1], v2 offset:8") == (8, 16)
    assert lds_extent("ds_bpermute_b32 v1, v2, v3 offset:4") is None
    assert lds_extent("v_add_u32_e32 v1, v2, v3") is None
    assert kernarg_read("s_load_dwordx2 s[8:9], s[0:1], 0x10", 0) == (16, 8)
    assert kernarg_read("s_load_dwordx4 s[8:11], s[0:1], 0x20 glc", 0) == (32, 16)
    assert kernarg_read("s_load_dword s8, s[6:7], 0x10", 0) is None  # not the kernarg pointer
    assert kernarg_read("s_load_dword s8, s[0:1], s5", 0) is None  # offset not static


# --- the diff ---------------------------------------------------------------------------------


def test_unedited_assembly_has_an_empty_diff_and_no_findings(
    tmp_path, base_asm, toolchain, f4gemm_dir
):
    p = prepare(tmp_path, base_asm, toolchain, f4gemm_dir)
    assert p.entry.name == KERNEL  # inferred from the .s's kernel symbol
    assert p.diff.identical and p.findings == []
    assert p.diff.usage_original == p.diff.usage_edited


def test_inserted_nop_is_one_added_instruction_at_its_label(
    tmp_path, base_asm, toolchain, f4gemm_dir
):
    text = edited(base_asm, "label_0064:\n", "label_0064:\n\ts_nop 4\n")
    p = prepare(tmp_path, text, toolchain, f4gemm_dir)
    assert p.findings == []
    [change] = p.diff.changes
    assert (change.kind, change.block, change.new.index, change.new.text) == (
        "added",
        "label_0064",
        0,
        "s_nop 4",
    )
    # Every later address moved by 4 bytes, yet nothing else is reported.
    assert p.diff.count("changed") == p.diff.count("removed") == p.diff.count("moved") == 0
    assert "+ label_0064+0" in p.diff.render()


def test_reordered_independent_loads_are_a_move(tmp_path, base_asm, toolchain, f4gemm_dir):
    a, b = "\ts_load_dword s36, s[0:1], 0x80\n", "\ts_load_dword s37, s[0:1], 0xa0\n"
    p = prepare(tmp_path, edited(base_asm, a + b, b + a), toolchain, f4gemm_dir)
    assert [c.kind for c in p.diff.changes] == ["moved"]
    assert p.diff.changes[0].old.text in (a.strip(), b.strip())


def test_changed_immediate_is_one_changed_instruction(tmp_path, base_asm, toolchain, f4gemm_dir):
    text = edited(base_asm, "\tv_lshlrev_b32_e32 v4, 4, v4\n", "\tv_lshlrev_b32_e32 v4, 3, v4\n")
    p = prepare(tmp_path, text, toolchain, f4gemm_dir)
    [change] = p.diff.changes
    assert change.kind == "changed"
    assert (change.old.text, change.new.text) == (
        "v_lshlrev_b32_e32 v4, 4, v4",
        "v_lshlrev_b32_e32 v4, 3, v4",
    )


def test_dropped_store_is_one_removed_instruction(tmp_path, base_asm, toolchain, f4gemm_dir):
    i = base_asm.index(STORE)
    p = prepare(tmp_path, base_asm[:i] + base_asm[i + len(STORE) :], toolchain, f4gemm_dir)
    [change] = p.diff.changes
    assert change.kind == "removed" and change.old.mnemonic == "buffer_store_dwordx4"
    assert len(p.diff.edited.lines) == len(p.diff.original.lines) - 1


def test_descriptor_and_metadata_changes_are_named(tmp_path, base_asm, toolchain, f4gemm_dir):
    text = edited(
        base_asm, ".amdhsa_group_segment_fixed_size 163840", ".amdhsa_group_segment_fixed_size 2048"
    )
    text = edited(text, ".group_segment_fixed_size: 163840", ".group_segment_fixed_size: 2048")
    p = prepare(tmp_path, text, toolchain, f4gemm_dir)
    assert {(c.name, c.old, c.new) for c in p.diff.descriptor} == {
        ("group_segment_fixed_size", 163840, 2048)
    }
    [meta] = p.diff.metadata
    assert meta.name.endswith(".group_segment_fixed_size") and (meta.old, meta.new) == (
        163840,
        2048,
    )
    # ds_read immediates reach byte 3076 of LDS: beyond 2048, caught statically.
    lds = [f for f in p.findings if f.check == "lds"]
    assert lds and all("2048" in f.message for f in lds)


# --- static checks ----------------------------------------------------------------------------


def test_sgpr_beyond_the_descriptor_is_caught_with_its_source_line(
    tmp_path, base_asm, toolchain, f4gemm_dir
):
    text = edited(base_asm, "\ts_mov_b32 s47, s2\n", "\ts_mov_b32 s100, s2\n")
    p = prepare(tmp_path, text, toolchain, f4gemm_dir)
    [finding] = p.findings
    assert finding.check == "sgpr" and "s100" in finding.message and "s0..s97" in finding.message
    assert (
        finding.where
        == f"{tmp_path / 'edit.s'}:{line_of(tmp_path / 'edit.s', 's_mov_b32 s100, s2')}"
    )


def test_vgpr_beyond_accum_offset_is_caught(tmp_path, base_asm, toolchain, f4gemm_dir):
    text = edited(base_asm, ".amdhsa_accum_offset 256", ".amdhsa_accum_offset 128")
    p = prepare(tmp_path, text, toolchain, f4gemm_dir)
    assert {f.check for f in p.findings} == {"vgpr"}
    assert all("v0..v127" in f.message for f in p.findings)
    assert ("accum_offset", 256, 128) in {(c.name, c.old, c.new) for c in p.diff.descriptor}


def test_agpr_beyond_the_granted_count_is_caught(tmp_path, base_asm, toolchain, f4gemm_dir):
    # 264 unified VGPRs - accum_offset 256 leaves a0..a7; the kernel accumulates in a0..a15.
    text = edited(base_asm, ".amdhsa_next_free_vgpr 512", ".amdhsa_next_free_vgpr 264")
    p = prepare(tmp_path, text, toolchain, f4gemm_dir)
    assert {f.check for f in p.findings} == {"agpr"}
    assert any("a[12:15]" in f.message and "a0..a7" in f.message for f in p.findings)


def test_kernarg_read_past_the_segment_is_caught(tmp_path, base_asm, toolchain, f4gemm_dir):
    text = edited(
        base_asm, "s_load_dword s40, s[0:1], 0x150\n", "s_load_dword s40, s[0:1], 0x180\n"
    )
    [finding] = prepare(tmp_path, text, toolchain, f4gemm_dir).findings
    assert finding.check == "kernarg" and "384..387" in finding.message and "384" in finding.message


def test_descriptor_metadata_disagreement_is_caught(tmp_path, base_asm, toolchain, f4gemm_dir):
    text = edited(
        base_asm,
        ".amdhsa_group_segment_fixed_size 163840",
        ".amdhsa_group_segment_fixed_size 65536",
    )
    [finding] = prepare(tmp_path, text, toolchain, f4gemm_dir).findings
    assert finding.check == "metadata" and "65536" in finding.message


@pytest.mark.parametrize(
    "kernel",
    [
        KERNEL,
        "f4gemm_bf16_per1x32Fp4_noBpreShuffle_256x256",
        "f4gemm_bf16_per1x32Fp4_BpreShuffle_128x512",
    ],
)
def test_aiter_originals_pass_the_static_checks(kernel, toolchain, f4gemm_dir):
    assert static_checks(read_listing(f4gemm_dir / f"{kernel}.co", toolchain)) == []


# --- pipeline variant and config --------------------------------------------------------------


def test_edit_variant_directory_is_a_one_kernel_f4gemm_dir(
    tmp_path, base_asm, toolchain, f4gemm_dir
):
    asm = tmp_path / "nop.s"
    asm.write_text(edited(base_asm, "label_0064:\n", "label_0064:\n\ts_nop 0\n"))
    out = tmp_path / "variants" / "edit-nop"
    build_edit_variant(
        asm,
        f4gemm_dir,
        KERNEL,
        out,
        toolchain,
        tmp_path / "nop.diff.txt",
        tmp_path / "nop.json",
        "nop",
    )
    manifest = read_manifest(out)
    [entry] = manifest.entries
    assert entry == read_manifest(f4gemm_dir).get(KERNEL)
    assert manifest.co_path(entry).is_file()
    assert "+1 added" in (tmp_path / "nop.diff.txt").read_text()


def test_edit_variant_refuses_an_edit_that_fails_static_checks(
    tmp_path, base_asm, toolchain, f4gemm_dir
):
    asm = tmp_path / "bad.s"
    asm.write_text(edited(base_asm, "\ts_mov_b32 s47, s2\n", "\ts_mov_b32 s100, s2\n"))
    out = tmp_path / "variants" / "edit-bad"
    with pytest.raises(StaticCheckError, match="s100"):
        build_edit_variant(asm, f4gemm_dir, KERNEL, out, toolchain, tmp_path / "bad.diff.txt")
    assert not out.exists()
    assert "static checks: 1 finding" in (tmp_path / "bad.diff.txt").read_text()


def test_edit_for_another_kernel_is_an_error(tmp_path, base_asm, toolchain, f4gemm_dir):
    asm = tmp_path / "x.s"
    asm.write_text(base_asm)
    with pytest.raises(InputError, match="64x128"):
        prepare_edit(
            asm,
            f4gemm_dir,
            tmp_path / "x.co",
            toolchain,
            "f4gemm_bf16_per1x32Fp4_BpreShuffle_64x128",
        )


def test_parse_edit_specs():
    [spec] = parse_edit_specs([{"name": "nop-pad", "kernel": KERNEL, "asm": "edits/a.s"}])
    assert spec.variant == "edit-nop-pad" and spec.asm == Path("edits/a.s")
    with pytest.raises(ConfigError, match="twice"):
        parse_edit_specs([{"name": "a", "kernel": "k", "asm": "x"}] * 2)
    with pytest.raises(ConfigError, match="edit-<name>"):
        parse_edit_specs([{"name": "a/b", "kernel": "k", "asm": "x"}])
    with pytest.raises(ConfigError, match="needs name"):
        parse_edit_specs([{"name": "a"}])


def test_asmdiff_cli(tmp_path, base_asm, toolchain, f4gemm_dir, capsys):
    good, bad = tmp_path / "good.s", tmp_path / "bad.s"
    good.write_text(edited(base_asm, "label_0064:\n", "label_0064:\n\ts_nop 0\n"))
    bad.write_text(edited(base_asm, "\ts_mov_b32 s47, s2\n", "\ts_mov_b32 s100, s2\n"))
    original = str(f4gemm_dir / f"{KERNEL}.co")
    tc = ["--toolchain-bin", str(toolchain.bin_dir)]
    assert main(["asmdiff", original, str(good), "-o", str(tmp_path / "d.txt"), *tc]) == 0
    assert "+ label_0064+0" in capsys.readouterr().out
    assert "s_nop 0" in (tmp_path / "d.txt").read_text()
    assert main(["asmdiff", original, str(bad), *tc]) == 1
    assert main(["asmdiff", original, str(tmp_path / "missing.s"), *tc]) == 2


def test_the_safety_sweep_runs_an_edit_beside_its_original(
    tmp_path, base_asm, toolchain, f4gemm_dir
):
    """A real edit (one D store dropped) swept as the pipeline sweeps an edit variant: its rows
    carry the variant, the original's rows are the same swept alone or beside it, and the
    report names the edges the edit breaks where the original is safe."""
    import pandas as pd

    from f4pipe.core.schemas import SAFETY, read_table
    from f4pipe.report.safety import safety_section

    i = base_asm.index(STORE)
    (tmp_path / "drop.s").write_text(base_asm[:i] + base_asm[i + len(STORE) :])
    variant = tmp_path / "edit-drop"
    build_edit_variant(
        tmp_path / "drop.s", f4gemm_dir, KERNEL, variant, toolchain, tmp_path / "drop.diff.txt"
    )
    tc = ["--toolchain-id", toolchain.toolchain_id, "--record"]
    sweeps = {
        "original": ["--co-dir", str(f4gemm_dir), "--kernel", KERNEL],
        "edit-drop": ["--co-dir", str(variant), "--kernel", KERNEL, "--variant", "edit-drop"],
    }
    for name, args in sweeps.items():
        assert main(["safety", *args, *tc, "-o", str(tmp_path / f"{name}.parquet")]) == 0
    tables = {n: read_table(tmp_path / f"{n}.parquet", SAFETY).to_pandas() for n in sweeps}
    assert set(tables["original"].variant) == {"original"}
    assert set(tables["edit-drop"].variant) == {"edit-drop"}
    assert set(tables["edit-drop"].kernel) == {KERNEL}
    rows = pd.concat(tables.values(), ignore_index=True)

    class Swept:  # the one table the section reads
        def table(self, name):
            return rows if name == "safety" else None

    sec = safety_section(Swept(), None)
    assert list(sec.table.kernel) == ["BpreShuffle_32x128", "BpreShuffle_32x128 (edit-drop)"]
    original, edit = sec.table.set_index("kernel").iloc[0], sec.table.set_index("kernel").iloc[1]
    assert original["n%tile_n"] == "safe" and edit["n%tile_n"].startswith("wrong")
    (broke,) = [n for n in sec.notes if n.startswith("edit-drop breaks")]
    assert "n%tile_n wrong" in broke and "m%tile_m wrong" in broke
    assert sec.state == "bad" and sec.headline == "1 edit(s) break a safe edge"
    # the originals' part of the section is what the original alone gives
    alone = safety_section(type("Alone", (), {"table": lambda self, n: tables["original"]})(), None)
    assert alone.table.iloc[0].to_dict() == sec.table.iloc[0].to_dict()
    assert alone.state == "info"
