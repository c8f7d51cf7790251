"""The emulator's decoder against llvm-objdump: every instruction of all 35 f4gemm kernels.

A differential test (pinned reference tool vs ours): the decoder reads the .text bytes, the
display code prints LLVM's spelling, and both must agree with llvm-objdump's text for the
mnemonic and every operand, at every address. Plus the errors for bytes it cannot decode, the
consistency of the format table, and the handler table against both.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from f4pipe.aiter.manifest import read_manifest
from f4pipe.arch import isa
from f4pipe.arch.decode import decode_all, decode_one
from f4pipe.arch.disasm import format_instruction
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.core.errors import EmulatorError
from f4pipe.emu.handlers import HANDLERS

_LABEL = re.compile(r"^([0-9a-f]{16}) <(.*)>:$")
_INSN = re.compile(r"^\t(.*?)\s*// ([0-9A-F]+):")


def _objdump(toolchain, co_path: Path) -> tuple[dict[int, str], dict[int, str]]:
    """(labels: address -> name, instructions: address -> normalised text) from llvm-objdump."""
    out = toolchain.run("llvm-objdump", ["-d", "--mcpu=gfx950", co_path]).stdout.decode()
    labels, insns = {}, {}
    for line in out.splitlines():
        if m := _LABEL.match(line):
            labels[int(m.group(1), 16)] = m.group(2)
        elif m := _INSN.match(line):
            insns[int(m.group(2), 16)] = " ".join(m.group(1).split())
    return labels, insns


def test_decoder_matches_llvm_objdump_on_all_35_kernels(f4gemm_dir: Path, toolchain) -> None:
    total = 0
    mnemonics: set[str] = set()
    for entry in read_manifest(f4gemm_dir):
        co_path = f4gemm_dir / entry.co_name
        labels, expected = _objdump(toolchain, co_path)
        co = CodeObject.read(co_path)
        insts = decode_all(co.section_bytes(".text"), co.sections[".text"].addr)
        got = {i.pc: " ".join(format_instruction(i, labels).split()) for i in insts}
        assert set(got) == set(expected), f"{entry.name}: instruction boundaries differ"
        mismatches = [
            (hex(pc), got[pc], expected[pc]) for pc in expected if got[pc] != expected[pc]
        ]
        assert not mismatches, f"{entry.name}: {mismatches[:5]}"
        assert all(i.known for i in insts)
        total += len(insts)
        mnemonics |= {i.text_name for i in insts}
    assert total == 67_732  # docs/reference/aiter.md
    assert len(mnemonics) == 66


def test_scaled_mfma_is_one_16_byte_instruction_with_its_scale_fields() -> None:
    words = (0xD3AC7000, 0x180375BD, 0xD3AD8C14, 0x84526960)  # from BpreShuffle_256x256
    inst = decode_one(struct.pack("<4I", *words), 0, 0x41F0)
    assert inst.size == 16
    assert format_instruction(inst) == (
        "v_mfma_scale_f32_16x16x128_f8f6f4 a[20:23], v[96:99], v[52:55], a[20:23], v189, v186 "
        "op_sel:[0,1,0] op_sel_hi:[1,1,0] cbsz:4 blgp:4"
    )
    assert (inst.op_sel, inst.op_sel_hi) == (0b10, 0b11)


def test_literal_operands_extend_the_instruction() -> None:
    inst = decode_one(struct.pack("<2I", 0x8601FF01, 0x0000FFFF), 0, 0)
    assert inst.size == 8
    assert format_instruction(inst) == "s_and_b32 s1, s1, 0xffff"


def test_unknown_opcode_decodes_but_names_itself() -> None:
    inst = decode_one(struct.pack("<I", 0xBF9F0000), 0, 0x100)  # s_code_end: not in our tables
    assert not inst.known
    assert inst.name == "unknown_sopp_0x1f"


def test_word_of_no_known_format_raises_with_its_pc() -> None:
    with pytest.raises(EmulatorError, match=r"pc 0x40: word 0xf8000000"):
        decode_one(struct.pack("<I", 0xF8000000), 0, 0x40)


def test_truncated_instruction_raises() -> None:
    with pytest.raises(EmulatorError, match="past the end"):
        decode_one(struct.pack("<I", 0xC0060100), 0, 0)  # s_load_dwordx2 missing its 2nd dword


def test_sopk_immediate_is_sign_extended_once_at_decode() -> None:
    inst = decode_one(struct.pack("<I", 0xB700FF00), 0, 0)  # llvm-mc: s_addk_i32 s0, 0xff00
    assert (inst.name, inst.imm) == ("s_addk_i32", -256)
    assert format_instruction(inst) == "s_addk_i32 s0, 0xff00"  # LLVM prints the raw SIMM16


def test_format_table_is_consistent() -> None:
    """Fields inside the format's dwords and clear of its encoding bits and of each other;
    formats whose encodings are equally long never match the same word; the VOP3 opcode space
    keeps every VOP1/VOP2/VOPC/VOP3-only opcode."""
    for fmt in (*isa.FORMATS, isa.VOP3P_MAI_FORMAT):
        used = ((1 << 32) - 1) ^ ((1 << fmt.encoding_lo) - 1)
        for name, lo, hi in fmt.fields:
            bits = ((1 << (hi - lo + 1)) - 1) << lo
            assert 0 <= lo <= hi < 32 * fmt.dwords, (fmt.name, name)
            assert not bits & used, (fmt.name, name)
            used |= bits
    for top9 in range(512):
        lengths = [32 - f.encoding_lo for f in isa.FORMATS if f.matches(top9 << 23)]
        assert len(lengths) == len(set(lengths)), hex(top9)
    sources = (isa.VOPC, isa.VOP2, isa.VOP1, isa.VOP3_ONLY)
    assert len(isa.VOP3_OPCODES) == sum(len(t) for t in sources)


def test_every_operation_has_exactly_one_handler_and_every_kernel_runs_on_them(
    f4gemm_dir: Path,
) -> None:
    assert set(HANDLERS) == isa.OPERATIONS
    used: set[str] = set()
    for entry in read_manifest(f4gemm_dir):
        co = CodeObject.read(f4gemm_dir / entry.co_name)
        used |= {i.name for i in decode_all(co.section_bytes(".text"))}
    assert used <= set(HANDLERS), sorted(used - set(HANDLERS))
    assert len(used) == 63  # of 66 mnemonics: the _e32 and _e64 forms share a handler


@pytest.mark.parametrize(
    ("cbsz", "blgp", "a", "b", "a_regs", "b_regs"),
    [
        (4, 4, "v[0:3]", "v[8:11]", 4, 4),  # FP4 x FP4 (the f4gemm kernels)
        (0, 0, "v[0:7]", "v[8:15]", 8, 8),  # FP8 x FP8
        (2, 4, "v[0:5]", "v[8:11]", 6, 4),  # FP6 x FP4
    ],
)
def test_scaled_mfma_operand_widths_follow_the_formats(
    toolchain, cbsz, blgp, a, b, a_regs, b_regs
) -> None:
    """An FP8 scaled MFMA reads 8 registers of A and B, FP6 6, FP4 4: the static checks see
    the upper halves (the emulator still refuses to execute anything but FP4)."""
    from emu_snippets import assemble

    from f4pipe.codeobj.program import Program

    code = assemble(
        toolchain,
        f"v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3], {a}, {b}, a[0:3], v20, v21 "
        f"cbsz:{cbsz} blgp:{blgp}",
    )
    inst = Program.from_code(code).instructions()[0]
    assert (inst.cbsz, inst.blgp) == (cbsz, blgp)
    assert (inst.srcs[0].count, inst.srcs[1].count) == (a_regs, b_regs)
