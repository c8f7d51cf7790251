"""gfx950 software wait states: the rules as one table, and the check of an instruction window.

Hardware interlocks most dependencies; the cases it does not are listed in the CDNA4 ISA guide's
"Manually Inserted Wait States" (§4.5, Table 11) and "Required Independent Instructions" (§7.6,
Table 38), and implemented by LLVM's GCNHazardRecognizer and rocRoller's wait-state observers.
docs/reference/timing.md collects them with sources; RULES below is that table restricted to
the instruction classes f4pipe's decoder knows (an instruction it does not know is refused by
the emulator and by `f4pipe hazards`, so no rule can be silently missing for it). Where the
sources disagree, the row's `note` records which value is used and why.

Counting (docs/reference/timing.md B0): every instruction issued between producer and consumer
is one wait state, `s_nop N` is N+1; a rule requiring W wait states is broken when fewer than W
lie between.
A producer is checked against the consumer whatever else wrote the register in between (as
LLVM's getWaitStatesSinceDef does), which can only over-report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from f4pipe.arch.effects import EXEC, M0, SGPR_BASE, VCC, Effects, is_vector_reg

#: The longest wait any rule requires on gfx950 (16-pass XDL -> read: 20,
#: docs/reference/timing.md C6).
MAX_WAIT_STATES = 20

Regs = frozenset[int]


@dataclass(frozen=True)
class WaitStateRule:
    """One producer -> consumer class that needs `waits` independent issue slots between.

    producer(P) -> the registers P makes hazardous (empty: P is not this rule's producer);
    consumer(C) -> the registers C uses in the hazardous way; waits(P, C, overlap) -> required
    wait states, or None when the pair is outside the rule (e.g. an exact SrcC match);
    bound(P) -> the most waits() can ask after P (how far back a checker must look)."""

    rule: str
    what: str
    producer: Callable[[Effects], Regs]
    consumer: Callable[[Effects], Regs]
    waits: Callable[[Effects, Effects, Regs], int | None]
    source: str
    note: str = ""
    bound: Callable[[Effects], int] = lambda p: MAX_WAIT_STATES
    #: Units (Effects.unit) the producer / consumer can be: a cheap filter before the calls.
    producer_units: frozenset[str] = frozenset({"valu"})
    consumer_units: frozenset[str] = frozenset({"valu"})


def _sgprs(regs: Regs) -> Regs:
    return frozenset(r for r in regs if r >= SGPR_BASE)


def _vgprs(regs: Regs) -> Regs:
    return frozenset(r for r in regs if is_vector_reg(r))


def _is_valu(e: Effects) -> bool:
    return e.unit == "valu"


def _plain_valu(e: Effects) -> bool:
    """A VALU that is not an MFMA (v_accvgpr_* counts as plain VALU: docs/reference/timing.md
    B2)."""
    return e.unit == "valu" and "mfma" not in e.tags


def _fixed(n: int) -> Callable[[Effects, Effects, Regs], int]:
    return lambda p, c, regs: n


# --- producers -------------------------------------------------------------------------------


def valu_writes_sgpr(e: Effects) -> Regs:
    return _sgprs(e.writes) - EXEC if _is_valu(e) else frozenset()


def valu_writes_vcc(e: Effects) -> Regs:
    return e.writes & VCC if _is_valu(e) else frozenset()


def valu_writes_exec(e: Effects) -> Regs:
    return e.writes & EXEC if _is_valu(e) else frozenset()


def vcmpx_writes_exec(e: Effects) -> Regs:
    return e.writes & EXEC if "vcmpx" in e.tags else frozenset()


def valu_writes_vgpr(e: Effects) -> Regs:
    return _vgprs(e.writes) if _is_valu(e) else frozenset()


def plain_valu_writes_vgpr(e: Effects) -> Regs:
    return _vgprs(e.writes) if _plain_valu(e) and "dot" not in e.tags else frozenset()


def trans_writes(e: Effects) -> Regs:
    return _vgprs(e.writes) if "trans" in e.tags else frozenset()


def xdl_writes(e: Effects) -> Regs:
    return e.writes if "xdl" in e.tags else frozenset()


def sgemm_writes(e: Effects) -> Regs:
    return e.writes if "sgemm" in e.tags else frozenset()


def xdl_reads_srcc(e: Effects) -> Regs:
    return _vgprs(e.reads.get("src_c", frozenset())) if "xdl" in e.tags else frozenset()


def wide_store_data(e: Effects) -> Regs:
    return e.reads.get("vdata", frozenset()) if "wide_store" in e.tags else frozenset()


def salu_writes_m0(e: Effects) -> Regs:
    return e.writes & M0 if e.unit == "salu" else frozenset()


# --- consumers -------------------------------------------------------------------------------


def vmem_reads_sgpr(e: Effects) -> Regs:
    if e.unit != "vmem":
        return frozenset()
    return e.read_regs("srsrc", "soffset", "m0", "sbase")


def div_fmas_reads_vcc(e: Effects) -> Regs:
    return VCC if "div_fmas" in e.tags else frozenset()


def lane_select(e: Effects) -> Regs:
    return e.reads.get("lane_select", frozenset())


def valu_reads_sgpr(e: Effects) -> Regs:
    if not _is_valu(e):
        return frozenset()
    return _sgprs(e.read_regs("src", "vcc", "src_a", "src_b", "src_c", "scale"))


def rwlane_any(e: Effects) -> Regs:
    return EXEC if "rwlane" in e.tags else frozenset()


def vcmpx_explicit_exec(e: Effects) -> Regs:
    return e.reads.get("src", frozenset()) & EXEC if _is_valu(e) else frozenset()


def readlane_src0(e: Effects) -> Regs:
    return _vgprs(e.reads.get("src", frozenset())) if "rwlane" in e.tags else frozenset()


def nontrans_valu_reads(e: Effects) -> Regs:
    if not _is_valu(e) or "trans" in e.tags:
        return frozenset()
    return _vgprs(e.read_regs("src", "src_a", "src_b", "src_c", "scale"))


def valu_overwrites_vgpr(e: Effects) -> Regs:
    return _vgprs(e.writes) if _is_valu(e) else frozenset()


def plain_valu_overwrites_vgpr(e: Effects) -> Regs:
    """Not an MFMA: the next MFMA of an accumulation chain rewrites its SrcC by design."""
    return _vgprs(e.writes) if _plain_valu(e) else frozenset()


def lds_dma_store_reads_m0(e: Effects) -> Regs:
    """M0 read by the LDS-DMA forms Table 11 names: buffer_store_lds_dword, ds_*_addtid,
    global/scratch with LDS=1. Not buffer_load ... lds: see rule B1.15's note."""
    tags = e.tags
    if ("lds_dma" in tags and "store" in tags) or "addtid" in tags or "global_lds" in tags:
        return e.reads.get("m0", frozenset())
    return frozenset()


def permlane_reads(e: Effects) -> Regs:
    return e.reads.get("src", frozenset()) if "permlane" in e.tags else frozenset()


def permlane_exec(e: Effects) -> Regs:
    return EXEC if "permlane" in e.tags else frozenset()


def mfma_reads_any(e: Effects) -> Regs:
    if "mfma" not in e.tags:
        return frozenset()
    return _vgprs(e.read_regs("src_a", "src_b", "src_c", "scale"))


def mfma_exec(e: Effects) -> Regs:
    return EXEC if "mfma" in e.tags else frozenset()


def mfma_src_ab(e: Effects) -> Regs:
    """An MFMA's A and B operands, and a scaled MFMA's scale operands, which LLVM checks as it
    checks A and B (docs/reference/timing.md C10)."""
    return _vgprs(e.read_regs("src_a", "src_b", "scale")) if "mfma" in e.tags else frozenset()


def xdl_src_c(e: Effects) -> Regs:
    return _vgprs(e.reads.get("src_c", frozenset())) if "xdl" in e.tags else frozenset()


def sgemm_dgemm_src_c(e: Effects) -> Regs:
    if "sgemm" not in e.tags and "dgemm" not in e.tags:
        return frozenset()
    return _vgprs(e.reads.get("src_c", frozenset()))


def valu_or_load_overwrites_vgpr(e: Effects) -> Regs:
    """A plain VALU's VGPR writes, or the VGPRs a VMEM/DS load will write: LLVM's
    checkMAIVALUHazards checks every definition of a VALU or memory instruction against an
    XDL MFMA still reading it as SrcC (docs/reference/timing.md B3)."""
    if e.unit in ("vmem", "ds"):
        return _vgprs(e.load_dest)
    return plain_valu_overwrites_vgpr(e)


def valu_or_mem_touches(e: Effects) -> Regs:
    """What a plain VALU, VMEM or DS instruction reads (RAW) or writes (WAW) among VGPRs."""
    if _plain_valu(e):
        return _vgprs(e.read_regs("src", "vcc", "lane_select") | e.writes)
    if e.unit in ("vmem", "ds"):
        return _vgprs(e.read_regs("vaddr", "vdata") | e.load_dest)
    return frozenset()


# --- waits by MFMA passes --------------------------------------------------------------------


def _by_passes(table: dict[int, int]) -> Callable[[Effects, Effects, Regs], int | None]:
    return lambda p, c, regs: table[p.passes]


XDL_RAW_WAW = {2: 5, 4: 8, 8: 12, 16: 20}
XDL_SRCC_WAR = {2: 1, 4: 3, 8: 7, 16: 15}
SGEMM_OVERLAP_SRCC = {2: 3, 4: 6, 8: 10, 16: 18}


def _xdl_to_xdl_src_c(p: Effects, c: Effects, regs: Regs) -> int | None:
    """Back-to-back accumulation into exactly the producer's range: 2 if P=2 else 0;
    overlapping but not identical: P + 2 (LLVM GFX940_XDL_N_PassWritesVGPROverlappedXDLOrSMFMASrcC,
    +1 on gfx950 beyond 2 passes as in docs/reference/timing.md B3)."""
    if _vgprs(c.reads.get("src_c", frozenset())) == _vgprs(p.writes):
        return 2 if p.passes == 2 else 0
    return {2: 4, 4: 6, 8: 10, 16: 18}[p.passes]


def _sgemm_src_c(p: Effects, c: Effects, regs: Regs) -> int | None:
    if _vgprs(c.reads.get("src_c", frozenset())) == _vgprs(p.writes):
        return 2 if p.passes == 2 else 0
    return p.passes


ISA11 = "CDNA4 ISA §4.5 Table 11"
ISA38 = "CDNA4 ISA §7.6 Table 38"

RULES: tuple[WaitStateRule, ...] = (
    WaitStateRule(
        "B1.1",
        "VALU writes an SGPR, then a VMEM instruction reads it (resource, soffset, M0)",
        valu_writes_sgpr,
        vmem_reads_sgpr,
        _fixed(5),
        f"{ISA11}; LLVM checkVMEMHazards; rocRoller VALUWriteSGPRVMEM",
        bound=lambda p: 5,
        consumer_units=frozenset({"vmem"}),
    ),
    WaitStateRule(
        "B1.2",
        "VALU writes VCC, then v_div_fmas reads it",
        valu_writes_vcc,
        div_fmas_reads_vcc,
        _fixed(4),
        f"{ISA11}; LLVM checkDivFMasHazards; rocRoller VALUWriteVCCVDIVFMAS",
        bound=lambda p: 4,
    ),
    WaitStateRule(
        "B1.3",
        "VALU writes an SGPR, then v_readlane/v_writelane uses it as the lane select",
        valu_writes_sgpr,
        lane_select,
        _fixed(4),
        "LLVM checkRWLaneHazards; rocRoller VALUWriteSGPRVCC",
        "ISA cell lost in the Markdown table and contradicted by a gfx94x row: 4 as LLVM "
        "and rocRoller (docs/reference/timing.md C2)",
        bound=lambda p: 4,
    ),
    WaitStateRule(
        "B1.4",
        "VALU writes an SGPR or VCC, then a VALU reads it as an operand (incl. carry-in/mask)",
        valu_writes_sgpr,
        valu_reads_sgpr,
        _fixed(2),
        f"{ISA11}; LLVM checkVALUHazards (hasVDecCoExecHazard); rocRoller VALUWriteSGPRVCC",
        "VCC read as carry-in or mask: the ISA says 0-1, LLVM 2; the stricter 2 is used "
        "(docs/reference/timing.md C3)",
        bound=lambda p: 2,
    ),
    WaitStateRule(
        "B1.5",
        "VALU writes EXEC, then v_readlane/v_readfirstlane/v_writelane",
        valu_writes_exec,
        rwlane_any,
        _fixed(4),
        "LLVM checkVALUHazards (VALUWriteEXECRWLane); rocRoller VCMPXWrite94x",
        bound=lambda p: 4,
    ),
    WaitStateRule(
        "B1.6",
        "v_cmpx writes EXEC, then a VALU reads EXEC as an explicit operand",
        vcmpx_writes_exec,
        vcmpx_explicit_exec,
        _fixed(2),
        f"{ISA11}; rocRoller VCMPXWrite94x",
        bound=lambda p: 2,
    ),
    WaitStateRule(
        "B1.7",
        "VALU writes a VGPR, then v_readlane/v_readfirstlane reads it",
        valu_writes_vgpr,
        readlane_src0,
        _fixed(1),
        f"{ISA11}; LLVM checkVALUHazards; rocRoller VALUWriteReadlane94x",
        bound=lambda p: 1,
    ),
    WaitStateRule(
        "B1.9",
        "transcendental VALU writes a VGPR, then a non-transcendental VALU reads it",
        trans_writes,
        nontrans_valu_reads,
        _fixed(1),
        "LLVM checkVALUHazards (hasTransForwardingHazard); rocRoller VALUTransWrite94x",
        "ISA value cell lost in the Markdown table (docs/reference/timing.md C1)",
        bound=lambda p: 1,
    ),
    WaitStateRule(
        "B1.11",
        "store with more than 64 bits of data, then a VALU overwrites its data VGPRs",
        wide_store_data,
        valu_overwrites_vgpr,
        _fixed(2),
        f"{ISA11}; LLVM createsVALUHazard/checkVALUHazardsHelper; rocRoller BufferStoreDwordXXRead",
        "Table 11 also asks 1 for a non-VALU overwrite; the only non-VALU writers of VGPRs are "
        "loads, whose data returns long after the store read its data (aiter's 192x256 and "
        "224x256 do this 50 times with 0 wait states), so only VALU writers are checked",
        bound=lambda p: 2,
        producer_units=frozenset({"vmem"}),
    ),
    WaitStateRule(
        "B1.15",
        "SALU writes M0, then buffer_store_lds_dword / ds_*_addtid / global or scratch LDS DMA",
        salu_writes_m0,
        lds_dma_store_reads_m0,
        _fixed(1),
        f"{ISA11}; LLVM checkReadM0Hazards",
        "LLVM also pads buffer_load ... lds; Table 11 does not name it, and aiter's 35 kernels "
        "place 1,296 of their 1,356 buffer_load ... lds right after an SALU write of M0 and "
        "verify on MI355X, so buffer loads to LDS follow the ISA (no wait)",
        bound=lambda p: 1,
        producer_units=frozenset({"salu"}),
        consumer_units=frozenset({"vmem", "ds"}),
    ),
    WaitStateRule(
        "B1.18",
        "v_cmpx writes EXEC, then v_permlane16/32_swap",
        vcmpx_writes_exec,
        permlane_exec,
        _fixed(4),
        f"{ISA11} (new in CDNA4); LLVM checkPermlaneHazards; rocRoller VCMPXWrite94x",
        bound=lambda p: 4,
    ),
    WaitStateRule(
        "B1.19",
        "VALU writes a VGPR, then a permlane swap reads it (vdst or src)",
        valu_writes_vgpr,
        permlane_reads,
        _fixed(2),
        f"{ISA11}; LLVM checkPermlaneHazards; rocRoller VALUWriteReadlane94x",
        bound=lambda p: 2,
    ),
    WaitStateRule(
        "B3.1",
        "non-MFMA VALU writes a VGPR/AGPR, then an MFMA reads it (any source, scales too)",
        plain_valu_writes_vgpr,
        mfma_reads_any,
        _fixed(2),
        f"{ISA38}; LLVM checkMAIHazards90A; rocRoller VALUWrite",
        bound=lambda p: 2,
    ),
    WaitStateRule(
        "B3.2",
        "VALU writes EXEC, then an MFMA",
        valu_writes_exec,
        mfma_exec,
        _fixed(4),
        "LLVM checkMAIHazards90A (any VALU)",
        "the ISA and rocRoller name only v_cmpx; LLVM's wider producer is used",
        bound=lambda p: 4,
    ),
    WaitStateRule(
        "B3.3",
        "XDL MFMA writes, then a VALU/VMEM/DS reads it or a VALU/VMEM load writes it",
        xdl_writes,
        valu_or_mem_touches,
        _by_passes(XDL_RAW_WAW),
        "LLVM GFX940_XDL_N_PassWriteVgprVALUMemExpReadWaitStates / ...WawWaitStates (gfx950); "
        "rocRoller XDLWrite94x",
        "2/4/8/16 passes: 5/8/12/20 (gfx950 adds 1 over gfx942 beyond 2 passes)",
        bound=lambda p: XDL_RAW_WAW[p.passes],
        consumer_units=frozenset({"valu", "vmem", "ds"}),
    ),
    WaitStateRule(
        "B3.4",
        "XDL MFMA writes, then an MFMA reads it as SrcA/SrcB (or as a scale operand)",
        xdl_writes,
        mfma_src_ab,
        _by_passes(XDL_RAW_WAW),
        "LLVM GFX940_XDL_N_PassWritesVGPROverlappedSrcABWaitStates",
        bound=lambda p: XDL_RAW_WAW[p.passes],
    ),
    WaitStateRule(
        "B3.5",
        "XDL MFMA writes, then an XDL MFMA reads it as SrcC (same range: back-to-back "
        "accumulation; overlapping: P+2)",
        xdl_writes,
        xdl_src_c,
        _xdl_to_xdl_src_c,
        f"{ISA38}; LLVM checkMAIHazards90A (FullReg and OverlappedXDLOrSMFMASrcC)",
        bound=lambda p: p.passes + 2,
    ),
    WaitStateRule(
        "B3.6",
        "XDL MFMA writes, then an f32/f64 MFMA reads it as SrcC",
        xdl_writes,
        sgemm_dgemm_src_c,
        _by_passes(SGEMM_OVERLAP_SRCC),
        "LLVM GFX940_XDL_N_PassWritesVGPROverlappedSGEMMDGEMMSrcCWaitStates",
        "rocRoller gives one less for some consumers; LLVM's stricter values "
        "(docs/reference/timing.md C5)",
        bound=lambda p: SGEMM_OVERLAP_SRCC[p.passes],
    ),
    WaitStateRule(
        "B3.8",
        "f32-input MFMA writes, then a VALU/VMEM/DS reads or writes it, or an MFMA reads "
        "it as SrcA/SrcB",
        sgemm_writes,
        lambda e: valu_or_mem_touches(e) | mfma_src_ab(e),
        lambda p, c, regs: p.passes + 2,
        "LLVM GFX940_SMFMA_N_Pass...; CDNA3 ISA Table 37",
        bound=lambda p: p.passes + 2,
        consumer_units=frozenset({"valu", "vmem", "ds"}),
    ),
    WaitStateRule(
        "B3.9",
        "f32-input MFMA writes, then an MFMA reads it as SrcC",
        sgemm_writes,
        lambda e: xdl_src_c(e) | sgemm_dgemm_src_c(e),
        _sgemm_src_c,
        "CDNA3 ISA Table 37; rocRoller header",
        "LLVM requires 0 before an XDL SrcC read; the ISA's P is used "
        "(docs/reference/timing.md C5)",
        bound=lambda p: max(p.passes, 2),
    ),
    WaitStateRule(
        "B3.10",
        "XDL MFMA reads SrcC, then a VALU or a VMEM/DS load overwrites those registers (WAR)",
        xdl_reads_srcc,
        valu_or_load_overwrites_vgpr,
        _by_passes(XDL_SRCC_WAR),
        f"{ISA38}; LLVM checkMAIVALUHazards (IsSMFMAReadAsCFn); rocRoller XDLReadSrcC94x",
        "the ISA names VALU writers; LLVM also checks loads (their data lands later, but "
        "the ISA does not promise how much later): LLVM's wider consumer is used",
        bound=lambda p: XDL_SRCC_WAR[p.passes],
        consumer_units=frozenset({"valu", "vmem", "ds"}),
    ),
)

RULE_BY_ID = {r.rule: r for r in RULES}


@dataclass(frozen=True)
class WaitStateViolation:
    """A consumer too close to its producer: `actual` wait states between, `required` needed."""

    rule: WaitStateRule
    producer_pc: int
    consumer_pc: int
    registers: Regs
    required: int
    actual: int


def consumer_rules(
    consumer: Effects, rules: tuple[WaitStateRule, ...] = RULES
) -> list[tuple[WaitStateRule, Regs]]:
    """The `rules` (default: all) for which `consumer` uses registers in the hazardous way,
    with those registers."""
    out = []
    for rule in rules:
        if consumer.unit in rule.consumer_units:
            regs = rule.consumer(consumer)
            if regs:
                out.append((rule, regs))
    return out


def produced_by(producer: Effects) -> dict[str, Regs]:
    """Rule id -> the registers `producer` makes hazardous under that rule (only non-empty)."""
    out = {}
    for rule in RULES:
        if producer.unit in rule.producer_units:
            regs = rule.producer(producer)
            if regs:
                out[rule.rule] = regs
    return out


def check_pair(
    producer: Effects,
    produced: dict[str, Regs],
    consumer_uses: list[tuple[WaitStateRule, Regs]],
    consumer: Effects,
    between: int,
) -> list[tuple[WaitStateRule, Regs, int]]:
    """(rule, registers, required) for every rule the pair breaks with `between` wait states;
    `produced` is produced_by(producer)."""
    broken = []
    for rule, used in consumer_uses:
        made = produced.get(rule.rule)
        if not made:
            continue
        regs = made & used
        if not regs:
            continue
        need = rule.waits(producer, consumer, regs)
        if need is not None and between < need:
            broken.append((rule, regs, need))
    return broken


def check_window(window: list[tuple[int, Effects]]) -> list[WaitStateViolation]:
    """Violations at the last instruction of `window` (oldest first, as executed)."""
    consumer_pc, consumer = window[-1]
    uses = consumer_rules(consumer)
    if not uses:
        return []
    out = []
    between = 0
    for pc, producer in reversed(window[:-1]):
        if between >= MAX_WAIT_STATES:
            break
        for rule, regs, need in check_pair(
            producer, produced_by(producer), uses, consumer, between
        ):
            out.append(WaitStateViolation(rule, pc, consumer_pc, regs, need, between))
        between += producer.wait_states
    return out
