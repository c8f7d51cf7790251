"""gfx1250 beside gfx950: objects the test builds with the provisioned LLVM (no network) go through
co2asm -> assemble -> equivalence, and a byte that matters, changed, is caught."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from gfx1250_objects import GFX1250_MANIFEST, KERNEL, build, two_architecture_repo

from f4pipe.aiter.aiterdir import content_digest, content_files, content_id, local_id
from f4pipe.aiter.manifest import MANIFEST_NAME, manifest_text, parse_manifest_text, read_manifest
from f4pipe.cli import main
from f4pipe.codeobj.codeobject import MACH_NAMES, CodeObject, gfx_generation
from f4pipe.codeobj.equivalence import compare
from f4pipe.codeobj.toolchain import Toolchain, llc_path
from f4pipe.compare.changes import fetch_record_changes
from f4pipe.core.errors import ChecksumError, InputError, ManifestError
from f4pipe.core.fsio import sha256_file
from f4pipe.fetch import GIT_F4GEMM_PATH, fetch_aiter
from f4pipe.pipeline.facts import local_source_files
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.pipeline.roundtrip import roundtrip


@pytest.fixture(scope="module")
def tiny(toolchain: Toolchain, tmp_path_factory) -> Path:
    return build(toolchain, KERNEL, tmp_path_factory.mktemp("g1250") / "f4_tiny.co")


def test_mach_table_agrees_with_every_processor_llvm_lists(toolchain: Toolchain, tmp_path) -> None:
    """The EF_AMDGPU_MACH table is LLVM's: each processor `llc -mcpu=help` lists, assembled,
    carries the value the table names it by, and the table names nothing LLVM does not list."""
    help_text = subprocess.run(
        [llc_path(toolchain), "-mtriple=amdgcn", "-mcpu=help"], capture_output=True, check=False
    )
    listing = (help_text.stdout + help_text.stderr).decode()
    cpus_block = listing.split("Available CPUs")[1].split("Available features")[0]
    cpus = re.findall(r"^\s+(gfx[0-9a-z-]+)\s", cpus_block, re.M)
    assert "gfx950" in cpus and "gfx1250" in cpus
    found = {}
    for cpu in cpus:
        src = tmp_path / f"{cpu}.s"
        src.write_text(f'\t.amdgcn_target "amdgcn-amd-amdhsa--{cpu}"\n')
        obj = tmp_path / f"{cpu}.o"
        toolchain.run(
            "llvm-mc",
            [
                "-triple=amdgcn-amd-amdhsa",
                f"-mcpu={cpu}",
                "-filetype=obj",
                str(src),
                "-o",
                str(obj),
            ],
        )
        found[int.from_bytes(obj.read_bytes()[48:52], "little") & 0xFF] = cpu  # e_flags
    assert found == MACH_NAMES


def test_generation_of_processor_names() -> None:
    assert [gfx_generation(a) for a in ("gfx950", "gfx90a", "gfx1250", "gfx9-4-generic")] == [
        9,
        9,
        12,
        9,
    ]


def test_self_built_gfx1250_kernel_round_trips_byte_for_byte(
    tiny: Path, toolchain, tmp_path
) -> None:
    co = CodeObject.read(tiny)
    assert str(co.target) == "gfx1250"
    assert co.code_object_version == 5
    rt = roundtrip(tiny, tmp_path / "rt", toolchain)
    eq = rt.equivalence
    assert eq.equivalent, eq.problems
    assert eq.byte_diffs == [] and eq.unexplained == 0
    assert "(op_sel_hi on an SGPR source" in rt.asm.read_text()


def test_changed_descriptor_byte_is_not_equivalent(tiny: Path, toolchain, tmp_path) -> None:
    bad = tmp_path / "bad.co"
    shutil.copy(tiny, bad)
    rodata = CodeObject.read(bad).sections[".rodata"]
    data = bytearray(bad.read_bytes())
    data[rodata.offset + 52] ^= 0x80  # compute_pgm_rsrc2: enable_sgpr_workgroup_id_x
    bad.write_bytes(bytes(data))
    eq = compare(tiny, bad, toolchain)
    assert not eq.descriptor_ok and not eq.equivalent


def test_changed_text_byte_is_unexplained(tiny: Path, toolchain, tmp_path) -> None:
    bad = tmp_path / "bad.co"
    shutil.copy(tiny, bad)
    text = CodeObject.read(bad).sections[".text"]
    data = bytearray(bad.read_bytes())
    data[text.offset + 8] ^= 0x01  # v_mov_b32's destination: v1 -> v0
    bad.write_bytes(bytes(data))
    eq = compare(tiny, bad, toolchain)
    assert not eq.equivalent and eq.unexplained >= 1


#: An f4gemm-shaped gfx1250 manifest (aiter's column set), listing the kernel this file builds.
def test_manifest_reader_takes_gfx1250_columns_and_writes_them_back(tmp_path) -> None:
    entries = parse_manifest_text(GFX1250_MANIFEST, tmp_path / "f4gemm.csv")
    (entry,) = entries
    assert (entry.tile_m, entry.tile_n, entry.symbol, entry.name) == (
        256,
        256,
        "f4_tiny",
        "f4_tiny",
    )
    assert dict(entry.extra) == {
        "intype": "mxfp4",
        "a_preshuffle": "1",
        "cluster_x": "4",
        "cluster_y": "4",
        "scale": "1",
        "outtype": "bf16",
    }
    assert (entry.splitk, entry.bpreshuffle) == (False, True)
    assert manifest_text(entries) == GFX1250_MANIFEST


def test_manifest_header_of_neither_set_names_both(tmp_path) -> None:
    with pytest.raises(ManifestError, match=r"\(gfx950\) or tile_m,tile_n,intype"):
        parse_manifest_text("tile_m,tile_n,intype,knl_name,co_name\n", tmp_path / "f4gemm.csv")


def test_gfx1250_f4gemm_dir_round_trips_from_its_manifest(tiny: Path, tmp_path, capsys) -> None:
    f4gemm = tmp_path / "hsa" / "gfx1250" / "f4gemm"
    f4gemm.mkdir(parents=True)
    shutil.copy(tiny, f4gemm / "f4_tiny.co")
    (f4gemm / "f4gemm.csv").write_text(GFX1250_MANIFEST)
    assert [e.name for e in read_manifest(f4gemm)] == ["f4_tiny"]
    code = main(["roundtrip", "--co-dir", str(f4gemm), "--out", str(tmp_path / "rt")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "f4_tiny" in out


def test_git_source_takes_every_f4gemm_directory_with_kernels(
    tiny: Path, f4gemm_dir: Path, tmp_path: Path
) -> None:
    """aiter's layout at a 2026-08 commit: gfx950's f4gemm/, gfx1250's (kernels, its own
    manifest) and gfx942's header-only manifest. The fetch keeps gfx950 where it always was,
    adds gfx1250 under gfx1250/f4gemm/ with a checksum per file, and leaves gfx942 out."""
    entries = [e for e in read_manifest(f4gemm_dir)][:1]
    repo = two_architecture_repo(tmp_path / "aiter-src", f4gemm_dir, entries[0].name, tiny)

    result = fetch_aiter({"kind": "git", "url": repo.as_uri(), "rev": "main"}, tmp_path / "res")
    fetched = result.aiter
    assert fetched.architectures() == ["gfx950", "gfx1250"]
    assert sorted(p.name for p in result.f4gemm_dir.iterdir()) == sorted(
        [MANIFEST_NAME, entries[0].co_name]
    )
    record = fetched.verify()
    assert record["architectures"]["gfx1250"]["files"]["f4_tiny.co"] == {
        "sha256": sha256_file(tiny),
        "size": tiny.stat().st_size,
    }
    copied = fetched.arch_f4gemm("gfx1250")
    assert [e.name for e in read_manifest(copied)] == ["f4_tiny"]
    (copied / "f4_tiny.co").write_bytes(b"\x7fELF changed")
    with pytest.raises(ChecksumError, match=r"f4_tiny\.co changed after it was fetched"):
        fetched.verify()


def test_local_source_takes_the_architectures_beside_gfx950_into_its_id(
    tiny: Path, f4gemm_dir: Path, tmp_path: Path
) -> None:
    """A local aiter tree (AITER_ASM_DIR's `<aiter>/hsa`) with gfx1250 beside gfx950: the fetch
    takes both, the content id and its pin cover gfx1250's bytes, and the same gfx950 files
    without gfx1250 keep the id they always had."""
    kernel = read_manifest(f4gemm_dir).entries[0].name
    tree = two_architecture_repo(tmp_path / "aiter", f4gemm_dir, kernel, tiny)
    hsa = tree / "hsa"
    alone = tmp_path / "alone"
    shutil.copytree(tree / GIT_F4GEMM_PATH, alone)

    both = content_files(hsa)
    assert list(both.others) == ["gfx1250"]
    assert content_id(alone) == local_id(content_digest(both.files, both.tables))
    assert content_id(hsa) != content_id(alone)
    listed = {p.name for p in local_source_files({"kind": "local", "path": str(hsa)})}
    assert {"f4_tiny.co", "f4gemm.csv"} <= listed

    result = fetch_aiter({"kind": "local", "path": str(hsa)}, tmp_path / "res")
    assert result.aiter_id == content_id(hsa)
    assert result.aiter.architectures() == ["gfx950", "gfx1250"]
    record = result.aiter.verify()
    assert record["content_sha256"] == both.digest()
    assert (result.aiter.arch_f4gemm("gfx1250") / "f4_tiny.co").read_bytes() == tiny.read_bytes()

    pin = both.digest()
    gfx1250_co = hsa / "gfx1250" / "f4gemm" / "f4_tiny.co"
    gfx1250_co.write_bytes(gfx1250_co.read_bytes() + b"\0")
    assert content_id(hsa) != result.aiter_id
    with pytest.raises(ChecksumError, match=r"changed: gfx1250/f4gemm/f4_tiny\.co: expected"):
        fetch_aiter({"kind": "local", "path": str(hsa), "sha256": pin}, tmp_path / "res")


def test_compare_names_an_architecture_that_appeared_or_disappeared() -> None:
    gfx950 = {"source": {"kind": "git"}, "content_sha256": "c", "files": {}, "tables": {}}
    both = {
        **gfx950,
        "architectures": {
            "gfx1250": {"files": {"f4gemm.csv": {"sha256": "m"}, "a.co": {}, "b.co": {}}}
        },
    }
    appeared = fetch_record_changes(gfx950, both)
    rows = {r["item"]: (r["A"], r["B"]) for _, r in appeared.iterrows()}
    assert rows == {
        "architecture gfx1250": ("absent", "2 code objects"),
        "gfx1250 manifest f4gemm.csv sha256": ("-", "m"),
    }
    gone = fetch_record_changes(both, gfx950)
    assert ("architecture gfx1250", "2 code objects", "absent") in [
        (r["item"], r["A"], r["B"]) for _, r in gone.iterrows()
    ]
    assert fetch_record_changes(gfx950, gfx950).empty


@pytest.mark.parametrize(
    "command",
    [
        ["verify"],
        ["splitk"],
        ["safety"],
        ["audit-tuned"],
        ["predict", "-m", "256", "-n", "256", "-k", "256"],
    ],
)
def test_gfx950_only_stages_say_so_for_gfx1250_in_one_line(
    command: list[str], tiny: Path, tmp_path: Path, capsys
) -> None:
    f4gemm = tmp_path / "f4gemm"
    f4gemm.mkdir()
    shutil.copy(tiny, f4gemm / "f4_tiny.co")
    (f4gemm / "f4gemm.csv").write_text(GFX1250_MANIFEST)
    code = main([command[0], "--co-dir", str(f4gemm), *command[1:]])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert out == [
        f"f4pipe {command[0]}: gfx950 only: {f4gemm} holds gfx1250 code objects, and the "
        "emulator, the cycle model and aiter's kernel choice f4pipe reproduces are gfx950's; "
        "nothing run"
    ]


def test_architectures_command_round_trips_the_others_and_names_a_bad_choice(
    tiny: Path, f4gemm_dir: Path, toolchain: Toolchain, tmp_path: Path, capsys
) -> None:
    """`f4pipe architectures` (the main job's job) on a fetched aiter that holds gfx1250: its
    tables under <out>/gfx1250/, the result set reads them, and a choice the fetch lacks or
    that is no architecture's name is one line, exit 2, with nothing written."""
    kernel = read_manifest(f4gemm_dir).entries[0].name
    repo = two_architecture_repo(tmp_path / "aiter-src", f4gemm_dir, kernel, tiny)
    fetched = fetch_aiter({"kind": "git", "url": repo.as_uri(), "rev": "main"}, tmp_path / "res")

    def architectures(out: Path, *args: str) -> int:
        aiter = ["--aiter-dir", str(fetched.aiter.path), "-o", str(out)]
        return main(["architectures", *aiter, "--toolchain-bin", str(toolchain.bin_dir), *args])

    for choice, says in {
        "gfx1300": "holds no gfx1300 f4gemm directory (it holds gfx950, gfx1250)",
        "GFX1250": "--architectures: GFX1250 is not an architecture",
    }.items():
        out = tmp_path / f"bad-{choice}"
        assert architectures(out, "--architectures", choice) == 2
        assert says in capsys.readouterr().err
        assert not out.exists()
    assert architectures(tmp_path / "none", "--architectures", "none") == 0
    assert "no architecture beside gfx950" in capsys.readouterr().out

    results = tmp_path / "set"
    tc_json = tmp_path / "toolchain.json"
    assert main(["toolchain", "--toolchain-bin", str(toolchain.bin_dir), "-o", str(tc_json)]) == 0
    kernels = ["--co-dir", str(fetched.f4gemm_dir), "--toolchain-json", str(tc_json)]
    assert (
        main(["kernels", *kernels, "--aiter-id", "git-x", "-o", str(results / "kernels.parquet")])
        == 0
    )
    assert architectures(results / "architectures", "--aiter-id", "git-x") == 0
    assert "gfx1250: 1 of 1 code objects equivalent" in capsys.readouterr().out
    rs = ResultSet.load(results)
    assert list(rs.arch_tables) == ["gfx1250"] and rs.aiter_id == "git-x"
    assert rs.arch_tables["gfx1250"]["kernels"]["arch"].tolist() == ["gfx1250"]
    assert rs.arch_tables["gfx1250"]["roundtrip"]["equivalent"].tolist() == [True]

    assert architectures(results / "architectures", "--aiter-id", "git-y") == 0
    with pytest.raises(InputError, match=r"rows of several aiter_ids \['git-x', 'git-y'\]"):
        _ = ResultSet.load(results).aiter_id
