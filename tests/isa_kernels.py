"""Instruction tests that run on any Device: a snippet wrapped in a real code object.

Each case assembles a small gfx950 kernel with LLVM (llvm-mc + ld.lld, as `f4pipe assemble`
does): a prologue loads the case's input VGPRs and AGPRs per lane from a buffer, the snippet
runs, and an epilogue stores the registers the case names, per lane, to another buffer. A third
buffer, `mem`, is the snippet's memory (its buffer resource in s[4:7]). The case's result is
those registers and `mem` after the launch, downloaded through the Device protocol, so the same
case runs on the emulator (`EmulatorDevice`) and through the HIP path (`HipDevice`: a gfx950 GPU,
or f4pipe's HIP shim).

`F4PIPE_HW=1` runs every case on both and requires their results equal bit for bit
(`pytest -m isa`); without it, the emulator alone, checked against hand-computed values.

Reserved for the harness: s[80:95], v250..v255 (v255 = lane x 4). The kernel is one wave of 64
work-items with 256 VGPRs and 256 AGPRs.
"""

from __future__ import annotations

import os
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from f4pipe.codeobj.assemble import assemble

LANES = 64
LANE = np.arange(LANES)
#: dword 3 of a raw buffer resource (stride 0, as the f4gemm kernels build it)
_RSRC_WORD3 = 0x00020000
_SYMBOL = "isa"


def hw_mode() -> bool:
    """`F4PIPE_HW=1`: run every case through the HIP path as well, and compare."""
    return os.environ.get("F4PIPE_HW", "") == "1"


@dataclass
class Case:
    """A snippet, its inputs and what to read back.

    regs: inputs, register name ("v3", "a8") -> 64 lane values (uint32). outputs: register
    names stored after the snippet ("v3", "a8", "s10": an SGPR, stored from every lane).
    mem: the initial contents of the snippet's buffer (its resource in s[4:7])."""

    asm: str
    regs: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    mem: np.ndarray = field(default_factory=lambda: np.zeros(64, np.uint32))
    lds_bytes: int = 65536


def _resource(first: int, ptr_lo: int, nbytes: str) -> str:
    return (
        f"\ts_mov_b32 s{first}, s{ptr_lo}\n\ts_and_b32 s{first + 1}, s{ptr_lo + 1}, 0xffff\n"
        f"\ts_mov_b32 s{first + 2}, {nbytes}\n\ts_mov_b32 s{first + 3}, {_RSRC_WORD3:#x}\n"
    )


def kernel_source(case: Case) -> str:
    """The whole kernel: prologue, snippet, epilogue, descriptor and metadata."""
    inputs, outputs = list(case.regs), list(case.outputs)
    body = [
        "\ts_load_dwordx4 s[80:83], s[0:1], 0x0",  # in, out
        "\ts_load_dwordx2 s[84:85], s[0:1], 0x10",  # mem
        "\ts_load_dword s86, s[0:1], 0x18",  # mem bytes
        "\tv_lshlrev_b32 v255, 2, v0",
        "\ts_waitcnt lgkmcnt(0)",
        _resource(88, 80, hex(256 * max(1, len(inputs)))),
        _resource(92, 82, hex(256 * max(1, len(outputs)))),
        _resource(4, 84, "s86"),
    ]
    for k, name in enumerate(inputs):
        target = "v254" if name[0] == "a" else name
        body += [
            f"\ts_movk_i32 s87, {256 * k:#x}",
            f"\tbuffer_load_dword {target}, v255, s[88:91], s87 offen",
        ]
        if name[0] == "a":
            body += ["\ts_waitcnt vmcnt(0)", f"\tv_accvgpr_write_b32 {name}, v254"]
    body += [
        "\ts_waitcnt vmcnt(0)",
        "\ts_nop 4",
        case.asm.strip("\n"),
        "\ts_waitcnt vmcnt(0) lgkmcnt(0)",
    ]
    body += ["\ts_nop 7", "\ts_nop 7", "\ts_nop 7"]  # any MFMA result is readable after these
    for k, name in enumerate(outputs):
        source = name
        if name[0] == "a":
            body.append(f"\tv_accvgpr_read_b32 v254, {name}")
            source = "v254"
        elif name[0] == "s":
            body.append(f"\tv_mov_b32 v254, {name}")
            source = "v254"
        if source == "v254":
            body.append("\ts_nop 1")
        body += [
            f"\ts_movk_i32 s87, {256 * k:#x}",
            f"\tbuffer_store_dword {source}, v255, s[92:95], s87 offen",
        ]
    body += ["\ts_waitcnt vmcnt(0)", "\ts_endpgm"]
    return _TEMPLATE.format(body="\n".join(body), lds=case.lds_bytes, symbol=_SYMBOL)


_TEMPLATE = """\t.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
\t.amdhsa_code_object_version 5
\t.text
\t.globl {symbol}
\t.p2align 8
\t.type {symbol},@function
{symbol}:
{body}
.Lend:
\t.size {symbol}, .Lend-{symbol}

\t.rodata
\t.p2align 6
\t.amdhsa_kernel {symbol}
\t\t.amdhsa_group_segment_fixed_size {lds}
\t\t.amdhsa_kernarg_size 32
\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1
\t\t.amdhsa_system_sgpr_workgroup_id_x 1
\t\t.amdhsa_next_free_vgpr 512
\t\t.amdhsa_next_free_sgpr 96
\t\t.amdhsa_accum_offset 256
\t\t.amdhsa_float_denorm_mode_32 0
\t.end_amdhsa_kernel

\t.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - {{.address_space: global, .name: in, .offset: 0, .size: 8, .value_kind: global_buffer}}
      - {{.address_space: global, .name: out, .offset: 8, .size: 8, .value_kind: global_buffer}}
      - {{.address_space: global, .name: mem, .offset: 16, .size: 8, .value_kind: global_buffer}}
      - {{.name: mem_bytes, .offset: 24, .size: 4, .value_kind: by_value}}
    .group_segment_fixed_size: {lds}
    .kernarg_segment_align: 8
    .kernarg_segment_size: 32
    .max_flat_workgroup_size: 64
    .name: {symbol}
    .private_segment_fixed_size: 0
    .sgpr_count: 102
    .symbol: {symbol}.kd
    .vgpr_count: 512
    .agpr_count: 256
    .wavefront_size: 64
amdhsa.target: amdgcn-amd-amdhsa--gfx950
amdhsa.version:
  - 1
  - 2
...
\t.end_amdgpu_metadata
"""


def build(toolchain, case: Case, workdir: Path) -> Path:
    """The case's code object, assembled and linked by LLVM."""
    src = workdir / "isa.s"
    src.write_text(kernel_source(case))
    return assemble(src, workdir / "isa.co", toolchain)


def run_case(device, co: Path, case: Case) -> dict[str, np.ndarray]:
    """Launch the case's kernel once on `device`: each output register's 64 lane values, and
    "mem" (the snippet's buffer afterwards), all uint32."""
    kernel = device.load(co, _SYMBOL)
    regs = np.stack([np.asarray(case.regs[n], np.uint32) for n in case.regs]) if case.regs else None
    buf_in = device.alloc(256 * max(1, len(case.regs)))
    buf_out = device.alloc(256 * max(1, len(case.outputs)))
    mem = np.ascontiguousarray(case.mem, dtype=np.uint32)
    buf_mem = device.alloc(mem.nbytes)
    try:
        device.memset(buf_in, 0)
        if regs is not None:
            device.upload(buf_in, regs)
        device.memset(buf_out, 0)
        device.upload(buf_mem, mem)
        kernarg = struct.pack("<QQQI4x", buf_in.addr, buf_out.addr, buf_mem.addr, mem.nbytes)
        report = device.launch(kernel, (1, 1, 1), (LANES, 1, 1), kernarg)
        hazards = getattr(report, "hazards", None)
        if hazards is not None:  # the case must suit hardware: waits and wait states
            assert not hazards.count, hazards.summary()
        out = device.download(buf_out).view(np.uint32).reshape(-1, LANES)
        result = {name: out[k].copy() for k, name in enumerate(case.outputs)}
        result["mem"] = device.download(buf_mem).view(np.uint32).copy()
    finally:
        for buf in (buf_in, buf_out, buf_mem):
            device.free(buf)
    return result


def run_everywhere(toolchain, devices: dict, case: Case) -> dict[str, np.ndarray]:
    """Run `case` on every device; require every result equal to the emulator's bit for bit
    (naming the first lanes that differ), and return the emulator's."""
    with tempfile.TemporaryDirectory(prefix="f4pipe-isa-") as tmp:
        co = build(toolchain, case, Path(tmp))
        results = {name: run_case(dev, co, case) for name, dev in devices.items()}
    reference = results["emulator"]
    for name, got in results.items():
        diffs = []
        for key, want in reference.items():
            lanes = np.flatnonzero(got[key] != want)
            if lanes.size:
                shown = ", ".join(
                    f"[{i}] {want[i]:#010x} vs {got[key][i]:#010x}" for i in lanes[:4]
                )
                diffs.append(f"{key}: {lanes.size} words differ: {shown}")
        assert not diffs, f"emulator vs {name}:\n" + "\n".join(diffs)
    return reference
