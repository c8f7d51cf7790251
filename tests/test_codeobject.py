"""ELF reading without LLVM, checked against llvm-readelf and against the verified facts."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from f4pipe.aiter.manifest import read_manifest
from f4pipe.codeobj.co2asm import disassemble_text
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.codeobj.descriptor import descriptor_fields


def test_f4gemm_headers_descriptors_and_metadata(f4gemm_dir: Path) -> None:
    manifest = read_manifest(f4gemm_dir)
    descriptors = set()
    for e in manifest:
        co = CodeObject.read(manifest.co_path(e))
        assert co.e_flags == 0x54F
        assert str(co.target) == "gfx950"
        assert (co.target.xnack, co.target.sramecc) == ("any", "any")
        expected_v = 5 if not e.bpreshuffle else 6
        assert co.code_object_version == expected_v
        assert [k.name for k in co.kernel_symbols()] == [e.symbol]
        kd = co.kernel_descriptor(e.symbol)
        descriptors.add(kd)
        fields = descriptor_fields(kd)
        assert fields["group_segment_fixed_size"] == 163840
        assert fields["kernarg_size"] == 0
        (meta,) = co.metadata()["amdhsa.kernels"]
        assert meta[".kernarg_segment_size"] == (384 if e.bpreshuffle else 368)
        assert meta[".vgpr_count"] == 512 and meta[".sgpr_count"] == 96
        assert meta[".reqd_workgroup_size"] == [256, 1, 1]
    assert len(descriptors) == 1  # byte-identical across the 35


def test_instruction_census_of_the_35(f4gemm_dir: Path, toolchain) -> None:
    manifest = read_manifest(f4gemm_dir)
    opcodes: Counter[str] = Counter()
    for e in manifest:
        for insn in disassemble_text(CodeObject.read(manifest.co_path(e)), toolchain):
            opcodes[insn.text.split()[0]] += 1
    assert sum(opcodes.values()) == 67732
    assert len(opcodes) == 66


def test_arch_and_abi_agree_with_llvm_readelf(aiter_hsa_dir: Path, toolchain) -> None:
    sample = sorted(aiter_hsa_dir.rglob("*.co"))[::120]
    assert len(sample) >= 15
    for path in sample:
        co = CodeObject.read(path)
        out = toolchain.run("llvm-readelf", ["-h", path]).stdout.decode()
        flags_line = re.search(r"Flags:\s+(0x[0-9a-f]+), (\w+)", out)
        abi_line = re.search(r"ABI Version:\s+(\d+)", out)
        assert flags_line and abi_line
        assert int(flags_line.group(1), 16) == co.e_flags
        assert flags_line.group(2) == co.arch
        assert int(abi_line.group(1)) == co.abi_version


def test_a_command_reads_a_code_object_once_and_again_after_it_changes(f4gemm_dir, tmp_path):
    """Inside shared_images, one CodeObject per file; a file f4pipe replaces atomically, or
    that changes on disk, is read anew; outside the scope every read is fresh."""
    import os

    from f4pipe.codeobj.images import shared_images
    from f4pipe.codeobj.program import Program
    from f4pipe.core.fsio import write_bytes

    names = sorted(p.name for p in f4gemm_dir.glob("*.co"))[:2]
    path = tmp_path / "k.co"
    path.write_bytes((f4gemm_dir / names[0]).read_bytes())
    assert CodeObject.read(path) is not CodeObject.read(path)
    with shared_images():
        first = CodeObject.read(path)
        assert CodeObject.read(path) is first
        symbol = first.kernel_symbols()[0].name
        assert Program.load(path, symbol) is Program.load(path, symbol)
        write_bytes(path, (f4gemm_dir / names[1]).read_bytes())  # f4pipe's atomic write
        second = CodeObject.read(path)
        assert second is not first and second.data != first.data
        with open(path, "r+b") as fh:  # changed behind f4pipe's back: same inode, new bytes
            fh.write(second.data[:64] + b"\0")
        os.utime(path, ns=(1, 1))
        assert CodeObject.read(path) is not second
