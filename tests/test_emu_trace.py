"""Trace mode: one wave's pc, instruction text and changed registers, written to a file."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from emu_snippets import make_executor

from f4pipe.aiter.manifest import read_manifest
from f4pipe.emu import EmulatorDevice
from f4pipe.host.gemm import GemmRequest, run_gemm


def test_trace_of_one_wave_lists_every_instruction_it_ran(f4gemm_dir: Path, tmp_path) -> None:
    entry = next(e for e in read_manifest(f4gemm_dir) if e.name.endswith("_BpreShuffle_32x128"))
    out = tmp_path / "wave5.trace"
    device = EmulatorDevice(trace_wave=5, trace_out=out, max_waves_per_batch=4)
    r = run_gemm(device, entry, f4gemm_dir / entry.co_name, GemmRequest(40, 256, 256))
    assert r.verification.passed
    lines = out.read_text().splitlines()
    # wave 5 is wave 1 of workgroup (1, 0, 0): a batch of its own with max_waves_per_batch=4
    assert lines[0] == "0x00002c00: s_and_b32 s1, s1, 0xffff ; scc=1"  # s1 keeps its value
    assert lines[-1].endswith("s_endpgm")
    assert any(re.search(r"v_mfma_scale_f32_16x16x128_f8f6f4 .* ; a\d+\[all\]", x) for x in lines)
    assert any(re.search(r"s_waitcnt", x) for x in lines)
    # every wave of this kernel runs the same count; the trace has one line per instruction
    assert len(lines) == r.launch.wave_instructions // r.launch.waves


def test_trace_line_names_changed_registers_and_scc(toolchain) -> None:
    import io

    sink = io.StringIO()
    ex = make_executor(toolchain, "s_add_u32 s3, s3, -1\nv_mov_b32_e32 v7, 5")
    ex.trace_wave, ex.trace_out = 0, sink
    ex.sgpr[3] = 0
    ex.run()
    lines = sink.getvalue().splitlines()
    assert lines[0] == "0x00000000: s_add_u32 s3, s3, -1 ; s3=0xffffffff"
    assert lines[1] == "0x00000004: v_mov_b32_e32 v7, 5 ; v7[all] lane0=0x00000005"
    assert lines[2] == "0x00000008: s_endpgm"
    assert (ex.vgpr[7, 0] == np.uint32(5)).all()
