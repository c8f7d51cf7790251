"""`--fit-resources` (f4pipe.edits.resources) and the kernel-descriptor field table
(f4pipe.codeobj.descriptor)
on real code: aiter's f4gemm kernels through co2asm, and a small gfx950 kernel written here,
each assembled by the provisioned llvm-mc / ld.lld. A fitted object must be one that
llvm-readelf and llvm-objdump read, the emulator loads and runs, and the HIP shim's launch
checks accept."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from asm_edits import edited

from f4pipe.arch import gfx950
from f4pipe.cli import main
from f4pipe.codeobj.co2asm import co2asm
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.codeobj.descriptor import (
    accum_offset,
    allocated_vgprs,
    descriptor_bits,
    descriptor_fields,
    fields_at,
    with_fields,
)
from f4pipe.codeobj.program import Program
from f4pipe.edits.checks import static_checks
from f4pipe.edits.listing import read_listing
from f4pipe.edits.resources import ResourceError, fit_and_assemble
from f4pipe.edits.trykernel import try_edit
from f4pipe.emu import EmulatorDevice
from f4pipe.hipshim.backend import Launch, check_launch, read_kernels
from f4pipe.host.kernarg import launch_geometry

KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
KERNEL_FULL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"  # v0..v250 and a0..a255

#: A gfx950 kernel of one wave that stages lane + 7 through LDS bytes 3840..4095 and stores it:
#: v0..v3, 4 KiB of LDS, so its descriptor allocates the minimum VGPR granule (8 VGPRs).
SMALL = """\
\t.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
\t.amdhsa_code_object_version 5
\t.text
\t.globl\tlds_twice
\t.p2align\t8
\t.type\tlds_twice,@function
lds_twice:
\ts_load_dwordx2 s[4:5], s[0:1], 0x0
\tv_lshlrev_b32 v1, 2, v0
\tv_add_u32 v2, 7, v0
\tds_write_b32 v1, v2 offset:3840
\ts_waitcnt lgkmcnt(0)
\ts_barrier
\tds_read_b32 v3, v1 offset:3840
\ts_mov_b32 s6, 0x100
\ts_mov_b32 s7, 0x20000
\ts_waitcnt lgkmcnt(0)
\tbuffer_store_dword v3, v1, s[4:7], 0 offen
\ts_endpgm
.Lend:
\t.size\tlds_twice, .Lend-lds_twice

\t.rodata
\t.p2align\t6
\t.amdhsa_kernel lds_twice
\t\t.amdhsa_group_segment_fixed_size 4096
\t\t.amdhsa_kernarg_size 8
\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1
\t\t.amdhsa_system_sgpr_workgroup_id_x 1
\t\t.amdhsa_next_free_vgpr 4
\t\t.amdhsa_next_free_sgpr 8
\t\t.amdhsa_accum_offset 4
\t\t.amdhsa_float_denorm_mode_32 0
\t.end_amdhsa_kernel

\t.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - .address_space:  global
        .name:           out
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
    .group_segment_fixed_size: 4096
    .kernarg_segment_align: 8
    .kernarg_segment_size: 8
    .max_flat_workgroup_size: 64
    .name:           lds_twice
    .private_segment_fixed_size: 0
    .sgpr_count:     14
    .symbol:         lds_twice.kd
    .vgpr_count:     4
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
amdhsa.version:
  - 1
  - 2
...
\t.end_amdgpu_metadata
"""
#: The edit: a second round trip through LDS bytes 7936..8191 in v14/v15, so it uses 8 VGPRs
#: (16 in all) and 4 KiB of LDS (8 KiB in all) more than the descriptor allocates.
SMALL_EDIT = (
    "\tv_mov_b32 v15, v3\n"
    "\tds_write_b32 v1, v15 offset:7936\n"
    "\ts_waitcnt lgkmcnt(0)\n"
    "\ts_barrier\n"
    "\tds_read_b32 v14, v1 offset:7936\n"
    "\ts_waitcnt lgkmcnt(0)\n"
    "\tv_add_u32 v3, v3, v14\n"
)
STORE = "\tbuffer_store_dword v3, v1, s[4:7], 0 offen\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.s"
    path.write_text(text)
    return path


def run_small(co: Path) -> np.ndarray:
    """The small kernel's 64 output words, from one emulated launch of one 64-lane wave."""
    device = EmulatorDevice()
    kernel = device.load(co, "lds_twice")
    out = device.alloc(256)
    device.launch(kernel, (1, 1, 1), (64, 1, 1), struct.pack("<Q", out.addr))
    return device.download(out).view(np.uint32)


def notes(toolchain, co: Path) -> str:
    """llvm-readelf's view of the object (headers, sections, symbols, the metadata note):
    it must read the fitted file without complaint."""
    proc = toolchain.run("llvm-readelf", ["-h", "-S", "-s", "--notes", co])
    assert not proc.stderr, proc.stderr
    return proc.stdout.decode()


def shim_accepts(co: Path, symbol: str, grid, block, kernarg: bytes) -> list[str]:
    (info,) = [k for name, k in read_kernels(co.read_bytes()).items() if name == symbol]
    return check_launch(info, Launch(symbol, grid, block, 0, kernarg))


# --- the field table --------------------------------------------------------------------------


def test_field_table_reads_the_f4gemm_descriptor(f4gemm_dir):
    co = CodeObject.read(f4gemm_dir / f"{KERNEL}.co")
    kd = co.kernel_descriptor(co.kernel_symbols()[0].name)
    bits = descriptor_bits(kd)
    assert (allocated_vgprs(kd), accum_offset(kd)) == (512, 256)
    assert bits["user_sgpr_count"] == 2 and bits["enable_sgpr_kernarg_segment_ptr"] == 1
    assert [bits[f"enable_sgpr_workgroup_id_{d}"] for d in "xyz"] == [1, 1, 1]
    assert descriptor_fields(kd)["group_segment_fixed_size"] == gfx950.LDS_BYTES_PER_CU
    moved = with_fields(kd, accum_offset=160 // 4 - 1, group_segment_fixed_size=81920)
    assert accum_offset(moved) == 160 and descriptor_fields(moved)["group_segment_fixed_size"]
    assert fields_at([i for i in range(64) if moved[i] != kd[i]]) == [
        "group_segment_fixed_size",
        "compute_pgm_rsrc3",
    ]


def test_occupancy_of_the_shipped_allocation_and_a_fitted_one():
    shipped = gfx950.occupancy(gfx950.Resources(512, 112, 163840, 256))
    assert (shipped.waves_per_simd, shipped.workgroups_per_cu) == (1, 1)
    fitted = gfx950.occupancy(gfx950.Resources(176, 80, 81920, 256))
    assert (fitted.waves_per_simd, fitted.workgroups_per_cu, fitted.register_waves) == (2, 2, 2)
    small = gfx950.occupancy(gfx950.Resources(8, 16, 4096, 64))
    assert (small.waves_per_simd, small.workgroups_per_cu, small.limited_by) == (8, 32, "waves")


# --- (a) an f4gemm edit that frees LDS: the split moves, occupancy doubles ---------------------


def test_f4gemm_edit_that_frees_lds_moves_the_split_and_doubles_occupancy(
    tmp_path, base_asm, toolchain, f4gemm_dir
):
    asm = write(
        tmp_path,
        "half_lds",
        edited(
            base_asm,
            ".amdhsa_group_segment_fixed_size 163840",
            ".amdhsa_group_segment_fixed_size 81920",
        ),
    )
    keep = tmp_path / "half_lds.co"
    result = try_edit(
        asm, f4gemm_dir, toolchain, device="emulator", out_co=keep, fit_resources=True
    )
    assert result.passed, result.verdict_line()
    assert all(r.identical for r in result.runs)  # the emulator loaded and ran it: same bits
    (fit,) = result.prepared.fit.kernels
    changes = {c.name: (c.old, c.new) for c in fit.changes}
    assert changes[".amdhsa_accum_offset"] == (256, 160)  # v0..v158 -> 160, a0..a15 after
    assert changes[".amdhsa_next_free_vgpr"] == (512, 176)
    assert changes[".vgpr_count"] == (512, 176)
    assert changes[".group_segment_fixed_size"] == (163840, 81920)  # metadata follows the .s
    assert "occupancy: 1 -> 2 waves per SIMD" in fit.render()
    assert "1 -> 2 workgroups per CU" in fit.render()
    # llvm-readelf and llvm-objdump (through co2asm) read what was meant
    assert ".vgpr_count:     176" in notes(toolchain, keep)
    assert ".group_segment_fixed_size: 81920" in notes(toolchain, keep)
    rebuilt = co2asm(keep, toolchain)
    assert ".amdhsa_accum_offset 160" in rebuilt and ".amdhsa_next_free_vgpr 176" in rebuilt
    # the HIP shim's launch checks, with the grid f4pipe.host.kernarg computes for M=33 N=128 K=1024
    geometry = launch_geometry(32, 128, 33, 128, 1024)
    (info,) = read_kernels(keep.read_bytes()).values()
    blob = bytearray(info.kernarg_segment_size)
    for name, value in (("Mdim", 33), ("Ndim", 128), ("Kdim", 1024)):
        blob[info.args[name][0] : info.args[name][0] + 4] = value.to_bytes(4, "little")
    launch = Launch(info.name, geometry.grid, geometry.block, 0, bytes(blob))
    assert check_launch(info, launch) == []
    # the .s itself is never rewritten
    assert ".amdhsa_next_free_vgpr 512" in asm.read_text()


# --- (b) a small kernel whose edit outgrows its descriptor by 8 VGPRs and 4 KiB of LDS ---------


def test_small_kernel_with_granule_0_loads_and_runs(tmp_path, toolchain):
    co = tmp_path / "small.co"
    main(["assemble", str(write(tmp_path, "small", SMALL)), "-o", str(co)])
    kd = CodeObject.read(co).kernel_descriptor("lds_twice")
    assert descriptor_bits(kd)["granulated_workitem_vgpr_count"] == 0  # 8 VGPRs: the minimum
    assert Program.load(co, "lds_twice").lds_bytes == 4096
    assert list(run_small(co)[:64]) == [lane + 7 for lane in range(64)]


def test_small_kernel_edit_fitted_to_8_more_vgprs_and_4_kib_more_lds(tmp_path, toolchain, capsys):
    asm = write(tmp_path, "edit", edited(SMALL, STORE, SMALL_EDIT + STORE))
    plain = tmp_path / "plain.co"
    assert main(["assemble", str(asm), "-o", str(plain)]) == 0
    findings = static_checks(read_listing(plain, toolchain, asm_path=asm))
    assert {f.register for f in findings if f.register} == {"v14", "v15"}
    assert all("--fit-resources" in f.message for f in findings if f.check in ("vgpr", "lds"))
    with pytest.raises(Exception, match="beyond the 4096-byte allocation"):
        run_small(plain)  # the emulator refuses the LDS the descriptor does not grant
    capsys.readouterr()

    co = tmp_path / "edit.co"
    assert main(["assemble", str(asm), "-o", str(co), "--fit-resources"]) == 0
    out = capsys.readouterr().out
    assert ".amdhsa_next_free_vgpr 4 -> 16" in out and ".amdhsa_accum_offset 4 -> 16" in out
    assert ".amdhsa_group_segment_fixed_size 4096 -> 8192" in out
    assert ".vgpr_count 4 -> 16" in out and ".group_segment_fixed_size 4096 -> 8192" in out
    assert "what its static addresses reach" in out
    assert "occupancy: 8 -> 5 waves per SIMD" in out and "32 -> 20 workgroups per CU" in out
    kd = CodeObject.read(co).kernel_descriptor("lds_twice")
    assert (allocated_vgprs(kd), descriptor_fields(kd)["group_segment_fixed_size"]) == (16, 8192)
    assert static_checks(read_listing(co, toolchain)) == []
    assert ".vgpr_count:     16" in notes(toolchain, co)
    assert list(run_small(co)[:64]) == [2 * (lane + 7) for lane in range(64)]
    assert shim_accepts(co, "lds_twice", (1, 1, 1), (64, 1, 1), bytes(8)) == []


def test_fit_shrinks_lds_to_static_addresses(tmp_path, toolchain):
    """The unedited small kernel reaches LDS byte 4095 exactly: the fit keeps 4096 and the
    registers at the minimum granule (v0..v3, accum_offset 4)."""
    report = fit_and_assemble(write(tmp_path, "small", SMALL), tmp_path / "s.co", toolchain)
    (fit,) = report.kernels
    assert fit.use.lds_end == 4096 and fit.changes == []


# --- (c) edits gfx950 cannot hold are refused in one line ------------------------------------


def test_f4gemm_edit_needing_a_513th_vgpr_is_refused_in_one_line(
    tmp_path, toolchain, f4gemm_dir, capsys
):
    base = co2asm(f4gemm_dir / f"{KERNEL_FULL}.co", toolchain)
    last = base.rindex("\ts_endpgm")
    fits = write(tmp_path, "v255", base[:last] + "\tv_mov_b32 v255, 0\n" + base[last:])
    assert main(["assemble", str(fits), "-o", str(tmp_path / "v255.co"), "--fit-resources"]) == 0
    out = capsys.readouterr().out
    assert ".amdhsa_accum_offset" not in out and ".amdhsa_next_free_vgpr" not in out
    co = CodeObject.read(tmp_path / "v255.co")
    kd = co.kernel_descriptor(co.kernel_symbols()[0].name)
    # v0..v255 and a0..a255: all 512 VGPRs of a lane, the most any descriptor grants
    assert (allocated_vgprs(kd), accum_offset(kd)) == (gfx950.VGPRS_PER_SIMD_LANE, 256)

    over = write(tmp_path, "v256", base[:last] + "\tv_mov_b32 v256, 0\n" + base[last:])
    assert main(["assemble", str(over), "-o", str(tmp_path / "v256.co"), "--fit-resources"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "v256" in err[0] and "512 VGPRs" in err[0]
    assert not (tmp_path / "v256.co").exists()


def test_f4gemm_edit_asking_more_lds_than_a_cu_has_is_refused_in_one_line(
    tmp_path, base_asm, toolchain, f4gemm_dir, capsys
):
    asm = write(
        tmp_path,
        "big_lds",
        edited(
            base_asm,
            ".amdhsa_group_segment_fixed_size 163840",
            ".amdhsa_group_segment_fixed_size 196608",
        ),
    )
    common = ["--co-dir", str(f4gemm_dir), "--device", "emulator", "--fit-resources"]
    assert main(["try", str(asm), *common]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "196608 bytes of LDS" in err[0] and "163840" in err[0]
    with pytest.raises(ResourceError):
        fit_and_assemble(asm, tmp_path / "big.co", toolchain)


# --- (d) without the flag, an outgrown edit names its registers and the flag ------------------


def test_outgrown_edit_without_the_flag_names_registers_and_flag(
    tmp_path, base_asm, toolchain, f4gemm_dir
):
    text = edited(base_asm, "\ts_mov_b32 s47, s2\n", "\ts_mov_b32 s100, s2\n")
    result = try_edit(write(tmp_path, "sgpr", text), f4gemm_dir, toolchain, device="emulator")
    line = result.verdict_line()
    assert not result.passed and result.runs == []
    assert "registers beyond its descriptor: s100" in line and "--fit-resources" in line
