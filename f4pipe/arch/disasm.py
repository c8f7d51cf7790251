"""Print decoded instructions the way llvm-objdump spells them (mnemonic and operands).

Display only: the decoder never formats. Used by the trace mode and by the differential test
that checks the decoder against llvm-objdump on all 35 f4gemm kernels. Branch targets print as
the label name from `labels` (address -> name) when given, else as a hex address.
"""

from __future__ import annotations

from collections.abc import Mapping

from f4pipe.arch import isa
from f4pipe.arch.decode import Instruction, Operand
from f4pipe.arch.waitcnt import waitcnt_text


def format_operand(op: Operand) -> str:
    """One operand; integer literals print as hex, inline integers as decimal."""
    if op.kind in ("v", "a"):
        if op.count == 1:
            return f"{op.kind}{op.index}"
        return f"{op.kind}[{op.index}:{op.index + op.count - 1}]"
    if op.kind == "s":
        return _sreg(op.index, op.count)
    if op.code == isa.LITERAL:
        return f"{op.value:#x}"
    iv = isa.inline_int(op.code)
    if iv is not None:
        return str(iv)
    if op.code in isa.INLINE_FLOATS:
        return isa.INLINE_FLOATS[op.code][1]
    return f"src_{op.code}"


def _sreg(code: int, count: int) -> str:
    if count == 1:
        if code in isa.SPECIAL_SGPR_NAMES:
            return isa.SPECIAL_SGPR_NAMES[code]
        if 108 <= code <= 123:
            return f"ttmp{code - 108}"
        return f"s{code}"
    if code in isa.SPECIAL_SGPR_PAIR_NAMES and count == 2:
        return isa.SPECIAL_SGPR_PAIR_NAMES[code]
    if 108 <= code <= 123:
        return f"ttmp[{code - 108}:{code - 108 + count - 1}]"
    return f"s[{code}:{code + count - 1}]"


def _target(inst: Instruction, labels: Mapping[int, str] | None) -> str:
    assert inst.target is not None
    if labels and inst.target in labels:
        return labels[inst.target]
    return f"{inst.target:#x}"


def format_instruction(inst: Instruction, labels: Mapping[int, str] | None = None) -> str:
    """`mnemonic operands`, normalised to single spaces, as llvm-objdump -d prints it."""
    ops = _operands(inst, labels)
    return f"{inst.text_name} {ops}".strip()


def _operands(inst: Instruction, labels: Mapping[int, str] | None) -> str:
    f = format_operand
    if not inst.known:
        return ""
    fmt, name = inst.fmt, inst.name
    if fmt == "SOPP":
        if name == "s_waitcnt":
            return waitcnt_text(inst.imm)
        if name == "s_nop":
            return str(inst.imm)
        if inst.target is not None:
            return _target(inst, labels)
        return ""
    if fmt == "SOPK":
        return f"{f(inst.dst)}, {inst.imm & 0xFFFF:#x}"  # SIMM16 as LLVM prints it
    if fmt == "SOPC" and name == "s_set_gpr_idx_on":
        modes = [m for bit, m in enumerate(("SRC0", "SRC1", "SRC2", "DST")) if inst.imm >> bit & 1]
        return f"{f(inst.srcs[0])}, gpr_idx({','.join(modes)})"
    if fmt in ("SOP1", "SOP2", "SOPC"):
        return ", ".join(f(o) for o in ([inst.dst] if inst.dst else []) + list(inst.srcs))
    if fmt == "SMEM":
        return f"{f(inst.dst)}, {f(inst.srcs[0])}, {inst.offset:#x}" + (" glc" if inst.glc else "")
    if fmt == "DS":
        return _ds(inst)
    if fmt == "MUBUF":
        return _mubuf(inst)
    if name == "v_mfma_scale_f32_16x16x128_f8f6f4":
        return _mfma(inst)
    return _valu(inst)


def _valu(inst: Instruction) -> str:
    parts = []
    if inst.fmt == "VOPC":
        parts.append("vcc")
    elif inst.sdst is not None:
        parts.append(format_operand(inst.sdst))
    if inst.dst is not None:
        parts.append(format_operand(inst.dst))
    for i, o in enumerate(inst.srcs):
        s = format_operand(o)
        if inst.abs_ >> i & 1:
            s = f"|{s}|"
        if inst.neg >> i & 1:
            s = f"-{s}"
        parts.append(s)
    if inst.fmt == "VOP2" and inst.name == "v_cndmask_b32":
        parts.append("vcc")
    text = ", ".join(parts)
    if inst.clamp:
        text += " clamp"
    if inst.omod:
        text += {1: " mul:2", 2: " mul:4", 3: " div:2"}[inst.omod]
    return text


def _mfma(inst: Instruction) -> str:
    a, b, c, s0, s1 = inst.srcs
    text = ", ".join(format_operand(o) for o in (inst.dst, a, b, c, s0, s1))
    if inst.op_sel:
        text += f" op_sel:[{inst.op_sel & 1},{inst.op_sel >> 1 & 1},0]"
    text += f" op_sel_hi:[{inst.op_sel_hi & 1},{inst.op_sel_hi >> 1 & 1},0]"
    if inst.cbsz:
        text += f" cbsz:{inst.cbsz}"
    if inst.blgp:
        text += f" blgp:{inst.blgp}"
    return text


def _ds(inst: Instruction) -> str:
    if inst.name.startswith("ds_read"):
        text = f"{format_operand(inst.dst)}, {format_operand(inst.srcs[0])}"
    else:
        text = f"{format_operand(inst.srcs[0])}, {format_operand(inst.srcs[1])}"
    if inst.offset:
        text += f" offset:{inst.offset}"
    return text


def _mubuf(inst: Instruction) -> str:
    vaddr, vdata, srsrc, soffset = inst.srcs
    parts = [] if inst.lds else [format_operand(vdata)]
    parts.append(format_operand(vaddr) if (inst.offen or inst.idxen) else "off")
    parts += [format_operand(srsrc), format_operand(soffset)]
    text = ", ".join(parts)
    if inst.idxen:
        text += " idxen"
    if inst.offen:
        text += " offen"
    if inst.offset:
        text += f" offset:{inst.offset}"
    if inst.glc:
        text += " glc"
    if inst.slc:
        text += " slc"
    if inst.lds:
        text += " lds"
    return text
