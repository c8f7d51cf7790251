"""gfx1250 beside gfx950: objects the test builds with the provisioned LLVM (no network) go through
co2asm -> assemble -> equivalence, and a byte that matters, changed, is caught."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from f4pipe.aiter.manifest import MANIFEST_NAME, manifest_text, parse_manifest_text, read_manifest
from f4pipe.cli import main
from f4pipe.codeobj.codeobject import MACH_NAMES, CodeObject, gfx_generation
from f4pipe.codeobj.equivalence import compare
from f4pipe.codeobj.toolchain import Toolchain, llc_path
from f4pipe.compare.changes import fetch_record_changes
from f4pipe.core.errors import ChecksumError, ManifestError
from f4pipe.core.fsio import sha256_file
from f4pipe.fetch import GIT_F4GEMM_PATH, fetch_aiter
from f4pipe.pipeline.roundtrip import roundtrip

#: A wave32 kernel with a descriptor and metadata; its packed-F32 multiply reads an SGPR pair
#: with op_sel_hi set (the encoding aiter's nvfp4 kernels hold), given as words because
#: llvm-mc refuses that text for gfx1250.
KERNEL = """\
\t.amdgcn_target "amdgcn-amd-amdhsa--gfx1250"
\t.amdhsa_code_object_version 5
\t.text
\t.globl f4_tiny
\t.p2align 8
\t.type f4_tiny,@function
f4_tiny:
\ts_load_b64 s[2:3], s[0:1], 0x0
\tv_mov_b32 v1, 0x3f800000
\ts_wait_kmcnt 0
\tv_lshlrev_b32 v0, 2, v0
\t.long 0xcc280074, 0x18002974
\tglobal_store_b32 v0, v1, s[2:3]
\ts_endpgm
.Lfunc_end0:
\t.size f4_tiny, .Lfunc_end0-f4_tiny
\t.rodata
\t.p2align 6
\t.amdhsa_kernel f4_tiny
\t\t.amdhsa_kernarg_size 8
\t\t.amdhsa_user_sgpr_count 2
\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1
\t\t.amdhsa_next_free_vgpr 118
\t\t.amdhsa_next_free_sgpr 22
\t.end_amdhsa_kernel
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - .address_space: global
        .offset: 0
        .size: 8
        .value_kind: global_buffer
    .group_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .kernarg_segment_size: 8
    .max_flat_workgroup_size: 256
    .name: f4_tiny
    .private_segment_fixed_size: 0
    .sgpr_count: 22
    .symbol: f4_tiny.kd
    .vgpr_count: 118
    .wavefront_size: 32
amdhsa.target: amdgcn-amd-amdhsa--gfx1250
amdhsa.version:
  - 1
  - 2
...
\t.end_amdgpu_metadata
"""


def build(toolchain: Toolchain, asm: str, out: Path) -> Path:
    """Assemble and link `asm` the way a kernel author would (llvm-mc, then ld.lld -shared)."""
    src, obj = out.with_suffix(".s"), out.with_suffix(".o")
    src.write_text(asm)
    toolchain.run(
        "llvm-mc",
        ["-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1250", "-filetype=obj", str(src), "-o", str(obj)],
    )
    toolchain.run("ld.lld", ["-shared", str(obj), "-o", str(out)])
    return out


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
GFX1250_MANIFEST = (
    "tile_m,tile_n,intype,a_preshuffle,cluster_x,cluster_y,scale,outtype,knl_name,co_name\n"
    "256,256,mxfp4,1,4,4,1,bf16,f4_tiny,f4_tiny.co\n"
)


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


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    return subprocess.run([*cmd, *args], check=True, capture_output=True, text=True).stdout.strip()


def test_git_source_takes_every_f4gemm_directory_with_kernels(
    tiny: Path, f4gemm_dir: Path, tmp_path: Path
) -> None:
    """aiter's layout at a 2026-08 commit: gfx950's f4gemm/, gfx1250's (kernels, its own
    manifest) and gfx942's header-only manifest. The fetch keeps gfx950 where it always was,
    adds gfx1250 under gfx1250/f4gemm/ with a checksum per file, and leaves gfx942 out."""
    repo = tmp_path / "aiter-src"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    gfx950 = repo / GIT_F4GEMM_PATH
    gfx950.mkdir(parents=True)
    entries = [e for e in read_manifest(f4gemm_dir)][:1]
    (gfx950 / MANIFEST_NAME).write_text(manifest_text(entries))
    shutil.copyfile(f4gemm_dir / entries[0].co_name, gfx950 / entries[0].co_name)
    gfx1250 = repo / "hsa" / "gfx1250" / "f4gemm"
    gfx1250.mkdir(parents=True)
    (gfx1250 / "f4gemm.csv").write_text(GFX1250_MANIFEST)
    shutil.copyfile(tiny, gfx1250 / "f4_tiny.co")
    gfx942 = repo / "hsa" / "gfx942" / "f4gemm"
    gfx942.mkdir(parents=True)
    (gfx942 / MANIFEST_NAME).write_text("tile_M,tile_N,splitK,bpreshuffle,knl_name,co_name")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "two architectures")

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
