"""gfx1250 code objects the tests build with the provisioned LLVM (no network), and an aiter-like
git repository that holds them beside gfx950's: tests/test_gfx1250.py, test_arch_pipeline.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from f4pipe.aiter.manifest import MANIFEST_NAME, manifest_text, read_manifest
from f4pipe.codeobj.toolchain import Toolchain
from f4pipe.fetch import GIT_F4GEMM_PATH

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


GFX1250_MANIFEST = (
    "tile_m,tile_n,intype,a_preshuffle,cluster_x,cluster_y,scale,outtype,knl_name,co_name\n"
    "256,256,mxfp4,1,4,4,1,bf16,f4_tiny,f4_tiny.co\n"
)


def git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    return subprocess.run([*cmd, *args], check=True, capture_output=True, text=True).stdout.strip()


def two_architecture_repo(repo: Path, f4gemm_dir: Path, kernel: str, gfx1250_co: Path) -> Path:
    """aiter's layout at a 2026-08 commit, in small: gfx950's f4gemm/ with one real kernel,
    gfx1250's with `gfx1250_co` and its own manifest, and gfx942's header-only manifest; one
    commit on branch main."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    gfx950 = repo / GIT_F4GEMM_PATH
    gfx950.mkdir(parents=True)
    entry = read_manifest(f4gemm_dir).get(kernel)
    (gfx950 / MANIFEST_NAME).write_text(manifest_text([entry]))
    shutil.copyfile(f4gemm_dir / entry.co_name, gfx950 / entry.co_name)
    gfx1250 = repo / "hsa" / "gfx1250" / "f4gemm"
    gfx1250.mkdir(parents=True)
    (gfx1250 / "f4gemm.csv").write_text(GFX1250_MANIFEST)
    shutil.copyfile(gfx1250_co, gfx1250 / "f4_tiny.co")
    gfx942 = repo / "hsa" / "gfx942" / "f4gemm"
    gfx942.mkdir(parents=True)
    (gfx942 / MANIFEST_NAME).write_text("tile_M,tile_N,splitK,bpreshuffle,knl_name,co_name")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "two architectures")
    return repo
