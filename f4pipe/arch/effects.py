"""What an instruction does to the machine's timing: registers it reads and writes, when its
writes land, which counter it bumps, how many wait states it fills.

The hazard checker (waitstates.py, counters.py) reasons only about these Effects, never about
handlers, so the rules see exactly what the decoder read from the code object's bytes. Register
numbers share one integer space: 0..511 is the vector file as the executor holds it (v0..v255,
then a0..a255 at isa.AGPR_BASE), SGPR_BASE + code is a scalar operand code (s0..s101, vcc, m0,
exec).

Timing facts used here (docs/reference/timing.md, section A): buffer loads, stores, atomics
and LDS DMA count in vmcnt; DS instructions and SMEM in lgkmcnt; a load's destination registers
are written when its data returns, everything else writes at issue; `s_nop N` fills N+1 wait
states and every other instruction 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from f4pipe.arch import isa
from f4pipe.arch.decode import Instruction, Operand
from f4pipe.arch.waitcnt import decode_waitcnt
from f4pipe.core.errors import EmulatorError

SGPR_BASE = 512
VCC = frozenset({SGPR_BASE + isa.VCC_LO, SGPR_BASE + isa.VCC_HI})
EXEC = frozenset({SGPR_BASE + isa.EXEC_LO, SGPR_BASE + isa.EXEC_HI})
M0 = frozenset({SGPR_BASE + isa.M0})
NO_REGS: frozenset[int] = frozenset()
NO_OFFSETS = (0, 0, 0, 0)

#: Transcendental VALU ops (LLVM `isTransOp`, docs/reference/timing.md B1 #9).
TRANS_PREFIXES = (
    "v_exp_",
    "v_log_",
    "v_rcp_",
    "v_rsq_",
    "v_sqrt_",
    "v_sin_",
    "v_cos_",
)
#: VALU ops that read lanes of another register by an SGPR lane select (B1 #3, #5, #7).
RWLANE = frozenset({"v_readlane_b32", "v_readfirstlane_b32", "v_writelane_b32"})
#: MFMA whose inputs are f32 (the non-XDL "SGEMM" class) or f64 (DGEMM); every other MFMA is XDL.
F32_MFMA_SUFFIXES = ("_f32", "_xf32")


@dataclass(frozen=True, slots=True)
class Effects:
    """The timing-relevant facts of one instruction.

    reads: role -> registers read at issue. Roles name how a rule sees the operand: "src"
    (ALU data source), "src_a"/"src_b"/"src_c"/"scale" (MFMA), "lane_select", "vcc" (implicit
    VCC), "exec" (implicit EXEC of vector ops), "m0", "vaddr", "vdata", "srsrc", "soffset",
    "sbase" (memory), "gpr_index" (M0 under s_set_gpr_idx_on).
    writes: registers written at issue. load_dest: registers written when the data returns.
    counter: "vm", "lds", "smem" or None. wait: (vmcnt, lgkmcnt) limits of an s_waitcnt
    (63 / 15 = no wait on that counter). passes: MFMA passes (4 cycles each)."""

    name: str
    unit: str  # "salu" | "smem" | "valu" | "vmem" | "ds" | "sopp"
    tags: frozenset[str] = frozenset()
    reads: dict[str, frozenset[int]] = field(default_factory=dict)
    writes: frozenset[int] = NO_REGS
    load_dest: frozenset[int] = NO_REGS
    counter: str | None = None
    wait: tuple[int, int] | None = None
    wait_states: int = 1
    passes: int = 0

    def read_regs(self, *roles: str) -> frozenset[int]:
        """Registers read in any of `roles` (all roles when none is named)."""
        if not roles:
            return frozenset().union(*self.reads.values()) if self.reads else NO_REGS
        return frozenset().union(*(self.reads.get(r, NO_REGS) for r in roles))


def vector_regs(op: Operand, offset: int = 0) -> frozenset[int]:
    base = op.index + offset + (isa.AGPR_BASE if op.kind == "a" else 0)
    return frozenset(range(base, base + op.count))


def operand_regs(op: Operand | None, offset: int = 0) -> frozenset[int]:
    """The registers an operand names (none for constants); `offset` is a GPR-index offset."""
    if op is None:
        return NO_REGS
    if op.kind in ("v", "a"):
        return vector_regs(op, offset)
    if op.kind == "s":
        return frozenset(range(SGPR_BASE + op.index, SGPR_BASE + op.index + op.count))
    return NO_REGS


def is_vector_reg(r: int) -> bool:
    return r < SGPR_BASE


def reg_name(r: int) -> str:
    if r < isa.AGPR_BASE:
        return f"v{r}"
    if r < SGPR_BASE:
        return f"a{r - isa.AGPR_BASE}"
    code = r - SGPR_BASE
    return isa.SPECIAL_SGPR_NAMES.get(code, f"s{code}")


def mfma_passes(inst: Instruction) -> int:
    """Passes of an MFMA on gfx950 (docs/reference/timing.md B2). Only the opcodes the decoder
    knows (and a test's hand-built instructions) reach here; an unknown MFMA is refused, not
    guessed."""
    if inst.name == "v_mfma_scale_f32_16x16x128_f8f6f4":
        return 8 if min(inst.cbsz, inst.blgp) <= 1 else 4
    if inst.name == "v_mfma_scale_f32_32x32x64_f8f6f4":
        return 16 if min(inst.cbsz, inst.blgp) <= 1 else 8
    known = inst.extra.get("passes")
    if known:
        return int(known)
    raise EmulatorError(f"{inst.name}: its MFMA pass count on gfx950 is not in f4pipe's table")


def _valu_tags(name: str) -> set[str]:
    tags = set()
    if name.startswith(TRANS_PREFIXES):
        tags.add("trans")
    if name in RWLANE:
        tags.add("rwlane")
    if name.startswith("v_cmpx_"):
        tags.add("vcmpx")
    if name.startswith("v_permlane") and name.endswith("_swap_b32"):
        tags.add("permlane")
    if name.startswith("v_div_fmas"):
        tags.add("div_fmas")
    if name.startswith("v_dot"):
        tags.add("dot")
    if name.startswith(("v_accvgpr_", "v_mfma_ld_scale")):
        tags.add("accvgpr")
    if name.startswith("v_mfma"):
        tags.add("mfma")
        f32 = name.startswith("v_mfma_f32_") and name.endswith(F32_MFMA_SUFFIXES)
        tags.add("dgemm" if name.startswith("v_mfma_f64") else "sgemm" if f32 else "xdl")
    return tags


def _valu(inst: Instruction, offsets: tuple[int, int, int, int]) -> Effects:
    name = inst.name
    tags = _valu_tags(name)
    reads: dict[str, frozenset[int]] = {"exec": EXEC}
    writes: set[int] = set()
    if "mfma" in tags:
        a, b, c, scale0, scale1 = inst.srcs
        reads.update(
            src_a=operand_regs(a),
            src_b=operand_regs(b),
            src_c=operand_regs(c),
            scale=operand_regs(scale0) | operand_regs(scale1),
        )
        writes |= operand_regs(inst.dst)
        return Effects(
            name,
            "valu",
            frozenset(tags),
            reads,
            frozenset(writes),
            passes=mfma_passes(inst),
        )
    src: set[int] = set()
    for i, op in enumerate(inst.srcs):
        off = offsets[i] if i < 3 and op.kind in ("v", "a") else 0
        regs = operand_regs(op, off)
        if name == "v_cndmask_b32" and i == 2:
            reads["vcc"] = regs
        else:
            src |= regs
    if name == "v_cndmask_b32" and inst.fmt == "VOP2":
        reads["vcc"] = VCC
    if "rwlane" in tags and name != "v_readfirstlane_b32" and len(inst.srcs) > 1:
        sel_regs = operand_regs(inst.srcs[1])
        reads["lane_select"] = sel_regs
        src -= sel_regs
    if "permlane" in tags:
        src |= operand_regs(inst.dst)
        writes |= operand_regs(inst.srcs[0])
    reads["src"] = frozenset(src)
    if any(offsets):
        reads["gpr_index"] = M0
    writes |= operand_regs(inst.dst, offsets[3] if inst.dst and inst.dst.kind != "s" else 0)
    writes |= operand_regs(inst.sdst)
    if "vcmpx" in tags:
        writes |= EXEC
    elif name.startswith("v_cmp_") and writes & EXEC:
        # A compare whose result goes to EXEC (the VOP3 form) is what LLVM's
        # isVCmpXWritesExec calls a v_cmpx: the same rules follow it (docs/reference/timing.md
        # B1).
        tags.add("vcmpx")
    return Effects(name, "valu", frozenset(tags), reads, frozenset(writes))


def _scalar(inst: Instruction) -> Effects:
    name = inst.name
    if inst.fmt == "SOPP":
        if name == "s_nop":
            return Effects(name, "sopp", wait_states=(inst.imm & 0xF) + 1)
        if name == "s_waitcnt":
            return Effects(name, "sopp", frozenset({"waitcnt"}), wait=decode_waitcnt(inst.imm))
        tags = {"endpgm"} if name == "s_endpgm" else {"barrier"} if name == "s_barrier" else set()
        return Effects(name, "sopp", frozenset(tags))
    if inst.fmt == "SMEM":
        return Effects(
            name,
            "smem",
            reads={"sbase": operand_regs(inst.srcs[0])},
            load_dest=operand_regs(inst.dst),
            counter="smem",
        )
    reads = frozenset().union(*(operand_regs(op) for op in inst.srcs)) if inst.srcs else NO_REGS
    writes = operand_regs(inst.dst)
    if name == "s_set_gpr_idx_on":
        writes = M0
    if name in ("s_addk_i32", "s_mulk_i32"):
        reads = reads | writes
    return Effects(name, "salu", reads={"src": reads}, writes=writes)


def _ds(inst: Instruction) -> Effects:
    reads = {"exec": EXEC, "vaddr": operand_regs(inst.srcs[0])}
    if inst.name.startswith("ds_read"):
        return Effects(
            inst.name,
            "ds",
            frozenset({"load"}),
            reads,
            load_dest=operand_regs(inst.dst),
            counter="lds",
        )
    reads["vdata"] = operand_regs(inst.srcs[1])
    return Effects(inst.name, "ds", frozenset({"store"}), reads, counter="lds")


def _mubuf(inst: Instruction) -> Effects:
    vaddr, vdata, srsrc, soffset = inst.srcs
    reads = {
        "exec": EXEC,
        "vaddr": operand_regs(vaddr) if (inst.offen or inst.idxen) else NO_REGS,
        "srsrc": operand_regs(srsrc),
        "soffset": operand_regs(soffset),
    }
    name = inst.name
    if name.startswith("buffer_load"):
        if inst.lds:
            reads["m0"] = M0
            return Effects(name, "vmem", frozenset({"load", "lds_dma"}), reads, counter="vm")
        return Effects(
            name, "vmem", frozenset({"load"}), reads, load_dest=operand_regs(vdata), counter="vm"
        )
    reads["vdata"] = operand_regs(vdata)
    tags = {"atomic" if "atomic" in name else "store"}
    if inst.lds:  # buffer_store_lds_dword: LDS data at M0 to memory
        reads["m0"] = M0
        tags.add("lds_dma")
    # B1 #11: more than 64 bits of store data, and (for MUBUF) no SGPR soffset.
    if vdata.count > 2 and soffset.kind != "s":
        tags.add("wide_store")
    returns = "atomic" in tags and inst.glc
    return Effects(
        name,
        "vmem",
        frozenset(tags),
        reads,
        load_dest=operand_regs(vdata) if returns else NO_REGS,
        counter="vm",
    )


def effects_of(inst: Instruction, offsets: tuple[int, int, int, int] = NO_OFFSETS) -> Effects:
    """The Effects of a decoded instruction; `offsets` are the GPR-index offsets of src0, src1,
    src2 and dst while s_set_gpr_idx_on is in force (see Executor.gpr_index)."""
    if not inst.known:
        raise EmulatorError(f"pc {inst.pc:#x}: {inst.name} has no known timing effects")
    fmt = inst.fmt
    if fmt in ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM"):
        return _scalar(inst)
    if fmt == "DS":
        return _ds(inst)
    if fmt == "MUBUF":
        return _mubuf(inst)
    if fmt in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P"):
        return _valu(inst, offsets)
    raise EmulatorError(f"pc {inst.pc:#x}: {inst.name} ({fmt}) has no known timing effects")
