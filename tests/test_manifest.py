"""The f4gemm manifest CSV: both header cases, malformed files, missing objects, AITER_ASM_DIR."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from f4pipe.aiter.manifest import MANIFEST_NAME, find_f4gemm_dir, parse_manifest_text, read_manifest
from f4pipe.core.errors import ManifestError

HEADER_WHEEL = "tile_m,tile_n,splitK,bpreshuffle,knl_name,co_name"
HEADER_HEAD = "tile_M,tile_N,splitK,bpreshuffle,knl_name,co_name"
ROW = (
    "256,256,1,1,_ZN5aiter42f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256E,"
    "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256.co"
)


def test_the_wheels_manifest_lists_35_kernels_in_file_order(f4gemm_dir: Path) -> None:
    m = read_manifest(f4gemm_dir)
    assert len(m) == 35
    assert m.entries[0].name == "f4gemm_bf16_per1x32Fp4_noBpreShuffle_256x256"
    assert not m.entries[0].bpreshuffle
    assert sum(e.bpreshuffle for e in m) == 34
    assert {e.name for e in m if e.splitk} == {
        "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256",
        "f4gemm_bf16_per1x32Fp4_BpreShuffle_128x512",
    }
    assert not m.csv_path.read_text().endswith("\n")  # the wheel's CSV has no trailing newline


@pytest.mark.parametrize("header", [HEADER_WHEEL, HEADER_HEAD, HEADER_HEAD.upper()])
def test_header_case_does_not_matter(header: str) -> None:
    (e,) = parse_manifest_text(f"{header}\n{ROW}", Path("m.csv"))
    assert (e.tile_m, e.tile_n, e.splitk, e.bpreshuffle) == (256, 256, True, True)
    assert e.matches("f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256.co")
    assert e.matches(e.symbol) and e.matches(e.name)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty manifest"),
        ("tile_m,tile_n,knl_name\n", "lacks column"),
        (f"{HEADER_WHEEL}\n", "lists no kernels"),
        (f"{HEADER_WHEEL}\n256,256,1,1,sym", "fields"),
        (f"{HEADER_WHEEL}\nabc,256,1,1,sym,x.co", "integer"),
        (f"{HEADER_WHEEL}\n250,256,1,1,sym,x.co", "multiple of 16"),
        (f"{HEADER_WHEEL}\n256,256,2,1,sym,x.co", "0 or 1"),
        (f"{HEADER_WHEEL}\n256,256,1,1,sym,../x.co", "plain .co"),
        (f"{HEADER_WHEEL}\n256,256,1,1,,x.co", "empty knl_name"),
        (f"{HEADER_WHEEL}\n{ROW}\n{ROW}", "listed twice"),
    ],
)
def test_malformed_manifests_are_named_errors(text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest_text(text, Path("m.csv"))


def test_missing_object_names_file_and_directory(f4gemm_dir: Path, tmp_path: Path) -> None:
    shutil.copy(f4gemm_dir / MANIFEST_NAME, tmp_path / MANIFEST_NAME)
    with pytest.raises(ManifestError, match=r"no such code object: .*noBpreShuffle_256x256\.co"):
        read_manifest(tmp_path)


def test_both_meanings_of_aiter_asm_dir(f4gemm_dir: Path, tmp_path: Path) -> None:
    f4 = tmp_path / "aiter" / "hsa" / "gfx950" / "f4gemm"
    f4.mkdir(parents=True)
    shutil.copy(f4gemm_dir / MANIFEST_NAME, f4 / MANIFEST_NAME)
    assert find_f4gemm_dir(tmp_path / "aiter" / "hsa") == f4  # the seed driver's meaning
    assert find_f4gemm_dir(tmp_path / "aiter" / "hsa" / "gfx950") == f4  # aiter's meaning
    assert find_f4gemm_dir(f4) == f4
    with pytest.raises(ManifestError, match=r"no f4gemm_bf16_per1x32Fp4\.csv"):
        find_f4gemm_dir(tmp_path)
    with pytest.raises(ManifestError, match="does not exist"):
        find_f4gemm_dir(tmp_path / "nowhere")


def test_binary_manifest_is_an_error(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ManifestError, match="UTF-8"):
        read_manifest(tmp_path)


def test_a_kernel_is_named_as_the_report_or_by_its_tile_where_unique(f4gemm_dir: Path) -> None:
    manifest = read_manifest(f4gemm_dir)
    full = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"
    entry = manifest.get(full)
    for name in (entry.symbol, f"{full}.co", "BpreShuffle_256x256"):
        assert manifest.get(name) == entry
    assert manifest.get("32x128").name == "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
    with pytest.raises(ManifestError, match="ambiguous") as found:
        manifest.get("256x256")
    listed = str(found.value).rsplit(": ", 1)[1].split("; ")[0].split(", ")
    assert sorted(listed) == [
        "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256",
        "f4gemm_bf16_per1x32Fp4_noBpreShuffle_256x256",
    ]
    with pytest.raises(ManifestError, match="no kernel named '7x7'"):
        manifest.get("7x7")


def test_the_command_line_takes_the_report_s_kernel_names(f4gemm_dir: Path, capsys) -> None:
    from f4pipe.cli import main

    common = ["-m", "256", "-n", "256", "-k", "512", "--co-dir", str(f4gemm_dir)]
    assert main(["predict", *common, "--kernel", "BpreShuffle_256x256"]) == 0
    assert "BpreShuffle_256x256" in capsys.readouterr().out
    assert main(["predict", *common, "--kernel", "256x256"]) == 2
    assert "ambiguous" in capsys.readouterr().err


def test_commands_that_read_a_code_object_take_a_kernel_name_too(
    f4gemm_dir: Path, capsys, monkeypatch
) -> None:
    """`hazards` and `waits` read a .co or a .s; a name that is no file is the kernel it names
    in the aiter directory (--co-dir, else $AITER_ASM_DIR, ...), by the names --kernel takes."""
    from f4pipe.cli import main

    assert main(["waits", "32x128", "--co-dir", str(f4gemm_dir)]) == 0
    assert "_ZN5aiter41f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128E" in capsys.readouterr().out
    monkeypatch.setenv("AITER_ASM_DIR", str(f4gemm_dir))
    assert main(["hazards", "BpreShuffle_256x256"]) == 0
    assert "3379 reachable instructions" in capsys.readouterr().out
    assert main(["hazards", "256x256"]) == 2
    err = capsys.readouterr().err
    assert "ambiguous" in err and "noBpreShuffle_256x256" in err
    assert main(["hazards", "missing.co"]) == 2
    assert "missing.co: no such code object" in capsys.readouterr().err
