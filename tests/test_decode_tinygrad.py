"""f4pipe's decoder against tinygrad's gfx950 ("cdna") decoder, an implementation nobody here
wrote, generated from AMD's machine-readable ISA specification (f4research.decodecheck): every
instruction of the 35 shipped kernels and of the LLVM oracle's generated kernels, opcode, size,
operands with their register files and widths, and modifier fields."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest
from f4research import decodecheck, oracle

from f4pipe.aiter.manifest import read_manifest
from f4pipe.arch import isa
from f4pipe.arch.decode import decode_one

#: The oracle's generated kernels checked here (compiling 120 costs about 1 s).
ORACLE_SEEDS = list(range(120))


def test_all_35_kernels_decode_the_same_in_tinygrad(f4gemm_dir: Path) -> None:
    tally = decodecheck.compare_code_objects(
        [f4gemm_dir / e.co_name for e in read_manifest(f4gemm_dir)]
    )
    assert tally.disagreements == [], tally.summary()
    assert tally.defects == [] and tally.refused == {}
    assert tally.compared == 67_732  # every instruction (test_emu_decode.py)
    assert len(tally.mnemonics) == 63  # 66 LLVM spellings, _e32/_e64 folded


def test_the_oracle_kernels_decode_the_same_in_tinygrad(toolchain, tmp_path) -> None:
    tally = decodecheck.Tally()
    for kernel in oracle.compile_seeds(ORACLE_SEEDS, toolchain, tmp_path):
        decodecheck.compare_text(kernel.code, f"k{kernel.seed}", tally)
    assert tally.disagreements == [], tally.summary()
    assert tally.compared > 4000
    # what LLVM selects beyond f4pipe's tables (refused, fail closed), decoded by tinygrad only
    assert tally.refused and not set(tally.refused) & isa.OPERATIONS, tally.refused


_MFMA = struct.pack("<4I", 0xD3AC7000, 0x180375BD, 0xD3AD8C14, 0x84526960)
_LDS_DMA = bytes.fromhex("001051e098000580")  # buffer_load_dword v152, s[20:23], 0 offen lds


@pytest.mark.parametrize(
    ("data", "change", "field"),
    [
        (_MFMA, {"cbsz": 2}, "cbsz"),
        (_MFMA, {"op_sel_hi": 0}, "opsel_hi"),
        (_LDS_DMA, {"lds": False}, "lds"),
        (_LDS_DMA, {"offset": 4}, "offset"),
    ],
)
def test_a_field_f4pipe_misread_would_be_caught(data: bytes, change: dict, field: str) -> None:
    """The check has teeth: the real decoding agrees, a decoding with one field changed does
    not, and the disagreement names that field."""
    inst = decode_one(data, 0, 0)
    assert decodecheck.differences(inst, data) == []
    wrong = dataclasses.replace(inst, **change)
    assert [d[0] for d in decodecheck.differences(wrong, data)] == [field]


def test_a_register_file_f4pipe_misread_would_be_caught() -> None:
    inst = decode_one(_MFMA, 0, 0)
    dst = inst.dst._replace(kind="v")  # the MFMA writes AGPRs (acc_cd)
    found = decodecheck.differences(dataclasses.replace(inst, dst=dst), _MFMA)
    assert found == [("vdst", ("v", 20, 4), ("a", 20, 4))]
