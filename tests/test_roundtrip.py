"""co2asm -> assemble -> equivalence on real code objects, and on broken ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from f4pipe.aiter.manifest import read_manifest
from f4pipe.cli import main
from f4pipe.codeobj.co2asm import co2asm, encode_granulated_sgpr, invert_next_free_sgpr
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.codeobj.equivalence import EXPLAINED_MFMA_SCALE, compare
from f4pipe.core.errors import CodeObjectError
from f4pipe.pipeline.roundtrip import roundtrip

KERNEL_256 = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"


@pytest.fixture(scope="module")
def all_35(f4gemm_dir: Path, toolchain, tmp_path_factory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("rt35")
    return {
        e.name: roundtrip(f4gemm_dir / e.co_name, out, toolchain) for e in read_manifest(f4gemm_dir)
    }


def test_all_35_f4gemm_objects_are_equivalent_with_no_unexplained_byte(all_35) -> None:
    assert len(all_35) == 35
    for name, rt in all_35.items():
        eq = rt.equivalence
        assert eq.equivalent, f"{name}: {eq.problems}"
        assert eq.unexplained == 0
        assert all(d.reason == EXPLAINED_MFMA_SCALE for d in eq.byte_diffs)


def test_256x256_differs_in_exactly_the_known_508_mfma_scale_bytes(all_35) -> None:
    eq = all_35[KERNEL_256].equivalence
    assert len(eq.byte_diffs) == 508
    assert eq.num_instructions == 3379
    # every differing byte is byte 1 of a 0xD3AC.... dword, bits 13-14 only
    for d in eq.byte_diffs:
        assert d.insn_text.startswith("v_mfma_scale_f32_16x16x128_f8f6f4")
        assert d.offset - (d.insn_addr - 0x2C00) == 1
        assert (d.original ^ d.rebuilt) & ~0x60 == 0


def test_differing_byte_counts_span_64_to_512(all_35) -> None:
    counts = {name: len(rt.equivalence.byte_diffs) for name, rt in all_35.items()}
    assert min(counts.values()) == 64
    assert max(counts.values()) == 512
    assert counts["f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"] == 64
    assert counts["f4gemm_bf16_per1x32Fp4_BpreShuffle_32x1024"] == 512


def test_code_object_versions_come_from_each_header(all_35, f4gemm_dir: Path) -> None:
    versions = {n: CodeObject.read(rt.rebuilt).code_object_version for n, rt in all_35.items()}
    assert versions.pop("f4gemm_bf16_per1x32Fp4_noBpreShuffle_256x256") == 5
    assert set(versions.values()) == {6}
    asm = all_35["f4gemm_bf16_per1x32Fp4_noBpreShuffle_256x256"].asm.read_text()
    assert ".amdhsa_code_object_version 5" in asm


def test_rebuilt_differs_from_original_only_in_comment_among_sections(all_35) -> None:
    rt = all_35[KERNEL_256]
    a, b = CodeObject.read(rt.original), CodeObject.read(rt.rebuilt)
    differing = [n for n in a.sections if n != ".text" and a.section_bytes(n) != b.section_bytes(n)]
    assert differing == [".comment"]
    assert a.section_bytes(".comment") != b.section_bytes(".comment")


def test_sgpr_inversion_reproduces_every_granule() -> None:
    for granulated in range(14):
        nfs = invert_next_free_sgpr(granulated, "gfx950")
        assert 0 <= nfs <= 102
        assert encode_granulated_sgpr(nfs, "gfx950") == granulated
    # the seed's "subtract 6" would give 106 for granule 13: out of range
    assert invert_next_free_sgpr(13, "gfx942") == 102
    with pytest.raises(CodeObjectError):
        invert_next_free_sgpr(14, "gfx950")


def _corpus_spread(root: Path, per_family: int = 2) -> list[Path]:
    """A few objects of every kernel family (directory) of both architectures."""
    picked = []
    for family in sorted({p.parent for p in root.rglob("*.co")}):
        objs = sorted(family.glob("*.co"))
        step = max(1, len(objs) // per_family)
        picked.extend(objs[::step][:per_family])
    return picked


def test_co2asm_is_general_across_aiters_other_code_objects(
    aiter_hsa_dir: Path, toolchain, tmp_path
) -> None:
    objects = _corpus_spread(aiter_hsa_dir)
    archs = {CodeObject.read(p).arch for p in objects}
    versions = {CodeObject.read(p).code_object_version for p in objects}
    assert archs == {"gfx942", "gfx950"}
    assert len(versions) >= 2
    assert len(objects) >= 30
    for p in objects:
        rt = roundtrip(p, tmp_path / p.parent.name, toolchain)
        assert rt.equivalence.equivalent, f"{p}: {rt.equivalence.problems}"


def test_objects_needing_13_sgpr_granules_reassemble(
    aiter_hsa_dir: Path, toolchain, tmp_path
) -> None:
    """Where the seed's subtract-6 rule yields 106 and the assembler says 'value out of range'."""
    from f4pipe.codeobj.descriptor import field

    found = None
    for p in sorted((aiter_hsa_dir / "gfx942").rglob("*.co")):
        co = CodeObject.read(p)
        kd = co.kernel_descriptor(co.kernel_symbols()[0].name)
        if field(kd, "granulated_wavefront_sgpr_count") == 13:
            found = p
            break
    assert found is not None
    rt = roundtrip(found, tmp_path, toolchain)
    assert rt.equivalence.descriptor_ok and rt.equivalence.equivalent
    assert ".amdhsa_next_free_sgpr 102" in rt.asm.read_text()


def test_local_symbols_that_are_not_kernels_stay_local(aiter_hsa_dir: Path, toolchain) -> None:
    """A gfx942 flatmm object branches to a local `L_end0`: a label, not a kernel."""
    path = aiter_hsa_dir / "gfx942" / "flatmm_uk_gfx9_f16f8_128x256x128_1x4x1_16x16x32.co"
    co = CodeObject.read(path)
    text_syms = {s.name: s for s in co.symbols if s.section == ".text"}
    local = [
        n for n, s in text_syms.items() if s.bind == "STB_LOCAL" and not n.startswith("label_")
    ]
    assert local, "expected a non-label_ local symbol in this object"
    asm = co2asm(path, toolchain)
    for name in local:
        assert f".globl\t{name}" not in asm
        assert f"{name}:" in asm
    assert [k.name for k in co.kernel_symbols()] == [
        n for n, s in text_syms.items() if s.bind == "STB_GLOBAL"
    ]


def test_dwarf_sections_are_carried(aiter_hsa_dir: Path, toolchain, tmp_path) -> None:
    """The one aiter object with DWARF (.debug_*) round-trips with those sections, byte for
    byte, in the original's order, and is equivalent."""
    path = aiter_hsa_dir / "gfx942" / "fmoe_int8_g1u1_smf_subGU_256.co"
    debug = [s.name for s in CodeObject.read(path).section_list if s.name.startswith(".debug_")]
    assert len(debug) == 5
    rt = roundtrip(path, tmp_path, toolchain)
    rebuilt = CodeObject.read(rt.rebuilt)
    assert [s.name for s in rebuilt.section_list if s.name.startswith(".debug_")] == debug
    assert rt.equivalence.equivalent, rt.equivalence.problems


# --- broken input -------------------------------------------------------------------------


def _copy(f4gemm_dir: Path, tmp_path: Path, name: str = KERNEL_256) -> Path:
    dst = tmp_path / f"{name}.co"
    shutil.copy(f4gemm_dir / f"{name}.co", dst)
    return dst


def _flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def test_truncated_object_is_a_clean_error(f4gemm_dir: Path, tmp_path: Path, toolchain) -> None:
    path = _copy(f4gemm_dir, tmp_path)
    data = path.read_bytes()
    for size in (0, 16, 100, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:size])
        with pytest.raises(CodeObjectError):
            co2asm(path, toolchain)


def test_non_elf_and_wrong_machine_are_clean_errors(tmp_path: Path, toolchain) -> None:
    text = tmp_path / "notes.co"
    text.write_text("not a code object\n")
    with pytest.raises(CodeObjectError, match="not an ELF"):
        co2asm(text, toolchain)
    host = tmp_path / "host.co"
    shutil.copy("/bin/true" if Path("/bin/true").exists() else "/usr/bin/true", host)
    with pytest.raises(CodeObjectError, match="not AMDGPU"):
        co2asm(host, toolchain)


def test_flipped_text_byte_is_reported_not_equivalent(
    f4gemm_dir: Path, tmp_path: Path, toolchain
) -> None:
    orig = f4gemm_dir / f"{KERNEL_256}.co"
    rt = roundtrip(orig, tmp_path / "rt", toolchain)
    bad = tmp_path / "bad.co"
    shutil.copy(rt.rebuilt, bad)
    text = CodeObject.read(bad).sections[".text"]
    _flip(bad, text.offset + 0x100, 0x01)  # inside an s_load / VALU instruction
    eq = compare(orig, bad, toolchain)
    assert not eq.equivalent
    assert eq.unexplained >= 1
    assert not eq.text_disasm_ok


def test_flipped_mfma_scale_bit_outside_dont_care_is_unexplained(
    f4gemm_dir: Path, tmp_path: Path, toolchain
) -> None:
    orig = f4gemm_dir / f"{KERNEL_256}.co"
    rt = roundtrip(orig, tmp_path / "rt", toolchain)
    diff = rt.equivalence.byte_diffs[0]
    text = CodeObject.read(rt.rebuilt).sections[".text"]
    for mask, explained in ((0x20, True), (0x08, False)):  # bit 13 vs bit 11 (op_sel[0])
        bad = tmp_path / f"bad{mask}.co"
        shutil.copy(rt.rebuilt, bad)
        _flip(bad, text.offset + diff.offset, mask)
        eq = compare(orig, bad, toolchain)
        assert eq.equivalent == explained, eq.summary()


def test_flipped_descriptor_byte_is_reported(f4gemm_dir: Path, tmp_path: Path, toolchain) -> None:
    orig = f4gemm_dir / f"{KERNEL_256}.co"
    bad = _copy(f4gemm_dir, tmp_path)
    rodata = CodeObject.read(bad).sections[".rodata"]
    _flip(bad, rodata.offset + 48, 0x40)  # compute_pgm_rsrc1: one SGPR granule
    eq = compare(orig, bad, toolchain)
    assert not eq.descriptor_ok and not eq.equivalent
    # and the corrupted object itself still round-trips faithfully (co2asm inverts its encoding)
    rt = roundtrip(bad, tmp_path / "rt", toolchain)
    assert rt.equivalence.equivalent


def test_roundtrip_cli_exit_codes_and_json(f4gemm_dir: Path, tmp_path: Path, capsys) -> None:
    orig = f4gemm_dir / f"{KERNEL_256}.co"
    assert main(["roundtrip", str(orig), "--out", str(tmp_path / "o"), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["equivalent"] and row["text_bytes_explained"] == 508
    broken = tmp_path / "broken.co"
    broken.write_bytes(orig.read_bytes()[:1000])
    assert main(["roundtrip", str(broken), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert "truncated" in err and "Traceback" not in err
    assert not (tmp_path / "o2" / "broken.co").exists()


def test_co2asm_and_assemble_cli(f4gemm_dir: Path, tmp_path: Path, capsys) -> None:
    orig = f4gemm_dir / "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128.co"
    asm, rebuilt = tmp_path / "k.s", tmp_path / "k.co"
    assert main(["co2asm", str(orig), "-o", str(asm)]) == 0
    capsys.readouterr()
    assert main(["co2asm", str(orig), "-o", "-"]) == 0  # `-o -`: the text on stdout, no file
    assert capsys.readouterr().out == asm.read_text() and not Path("-").exists()
    assert main(["assemble", str(asm), "-o", str(rebuilt)]) == 0
    a, b = CodeObject.read(orig), CodeObject.read(rebuilt)
    assert a.kernel_descriptor(a.kernel_symbols()[0].name) == b.kernel_descriptor(
        b.kernel_symbols()[0].name
    )
    no_target = tmp_path / "plain.s"
    no_target.write_text("\t.text\n\ts_endpgm\n")
    assert main(["assemble", str(no_target), "-o", str(tmp_path / "p.co")]) == 2
    assert ".amdgcn_target" in capsys.readouterr().err
    bad = tmp_path / "bad.s"
    bad.write_text(asm.read_text().replace("s_and_b32 s1, s1, 0xffff", "s_bogus_op s1", 1))
    assert main(["assemble", str(bad), "-o", str(tmp_path / "bad.co")]) == 2
    err = capsys.readouterr().err
    assert "llvm-mc failed" in err and "s_bogus_op" in err
    assert not (tmp_path / "bad.co").exists()
