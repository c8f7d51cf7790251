"""Run a few gfx950 instructions on the emulator: assembled by the real llvm-mc, then executed.

Instruction-level tests set registers, run a snippet (ending in s_endpgm) on one or more waves,
and assert exact bits. Assembling with LLVM (not hand-packed words) keeps the tests honest
about encodings: what runs is what LLVM emits for the text.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from elftools.elf.elffile import ELFFile

from f4pipe.codeobj.program import Program
from f4pipe.emu.engine import Executor, WaveIds
from f4pipe.emu.launching import initial_state
from f4pipe.emu.memory import GlobalMemory


def assemble(toolchain, asm: str) -> bytes:
    """Machine code of `asm` (labels resolved) from llvm-mc's object file's .text."""
    src = asm.strip() + "\ns_endpgm\n"
    with tempfile.TemporaryDirectory(prefix="f4pipe-snippet-") as tmp:
        obj = Path(tmp) / "snippet.o"
        toolchain.run(
            "llvm-mc",
            ["-triple=amdgcn-amd-amdhsa", "-mcpu=gfx950", "-filetype=obj", "-o", obj],
            input=src.encode(),
        )
        with obj.open("rb") as f:
            return ELFFile(f).get_section_by_name(".text").data()


def make_executor(
    toolchain,
    asm: str,
    *,
    workgroups: int = 1,
    waves_per_group: int = 1,
    memory: GlobalMemory | None = None,
    max_instructions: int = 10_000,
    lds_bytes: int = 65536,
    flush_denorms: bool = True,
) -> Executor:
    """An executor at the snippet's first instruction in the launch state (s2 = workgroup id x,
    v0 = work-item id, EXEC all ones), other registers zero."""
    prog = Program.from_code(
        assemble(toolchain, asm), lds_bytes=lds_bytes, flush_f32_denorms=flush_denorms
    )
    ids = WaveIds(
        first_global_wave=0,
        waves_per_group=waves_per_group,
        wg_ids=np.array([(i, 0, 0) for i in range(workgroups)], dtype=np.int64),
    )
    ex = Executor(prog, memory or GlobalMemory(), ids, max_instructions=max_instructions)
    initial_state(ex, prog, kernarg_addr=0, block=(64 * waves_per_group, 1, 1))
    return ex


def u32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64).astype(np.uint32)


def f32_bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)
