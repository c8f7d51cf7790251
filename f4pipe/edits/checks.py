"""What instructions touch (registers, LDS immediates, kernarg loads) against what the kernel
descriptor and metadata grant: the static checks of an edit, before anything runs.

Registers: AMDGPUUsage, "compute_pgm_rsrc1" GRANULATED_WORKITEM_VGPR_COUNT and
GRANULATED_WAVEFRONT_SGPR_COUNT, "compute_pgm_rsrc3 for GFX90A, GFX942" ACCUM_OFFSET. Register
numbers hidden in M0-relative indexing and addresses computed at run time are beyond a static
check; the emulator sees those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from f4pipe.arch import gfx950
from f4pipe.codeobj.co2asm import invert_next_free_sgpr
from f4pipe.codeobj.descriptor import (
    accum_offset,
    allocated_vgprs,
    descriptor_fields,
    field,
    kernarg_sgpr,
)
from f4pipe.core.errors import InputError
from f4pipe.edits.listing import KernelListing

# GFX90A and later GFX9 parts share one unified VGPR file: arch VGPRs first, AGPRs from
# accum_offset on, allocated in granules of 8, at most 256 of each (AMDGPUUsage, "GFX90A").
UNIFIED_VGPR_ARCHS = frozenset({"gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"})

_REGISTER = re.compile(r"\b(?P<kind>acc|[vsa])(?:(?P<one>\d+)\b|\[(?P<lo>\d+):(?P<hi>\d+)\])")
_DS_OFFSET = re.compile(r"\boffset(?P<which>[01]?):(?P<value>0x[0-9a-fA-F]+|\d+)")
_DS_TYPE = re.compile(r"_[buif](?P<bits>8|16|32|64|96|128)(?=_|$)")
# DS instructions that do not address LDS through offset: (lane shuffles, GDS, M0-based ones).
_DS_NOT_LDS = ("ds_swizzle", "ds_permute", "ds_bpermute", "ds_nop", "ds_gws", "ds_append",
               "ds_consume", "ds_ordered", "ds_read_addtid", "ds_write_addtid")  # fmt: skip
_S_LOAD = re.compile(
    r"^s_load_dword(?:x(?P<n>\d+))?\s+\S+,\s*s\[(?P<base>\d+):(?P<base_hi>\d+)\],\s*"
    r"(?P<offset>0x[0-9a-fA-F]+|\d+)(?:\s+\w+)*\s*$"
)

# ---------------------------------------------------------------------------------------------
# What instructions touch


@dataclass(frozen=True)
class RegisterUse:
    kind: str  # "v" | "a" | "s"
    first: int
    last: int


def registers_of(text: str) -> list[RegisterUse]:
    """Numbered VGPR, AGPR (a / acc) and SGPR operands in an instruction's text."""
    parts = text.split(None, 1)
    if len(parts) < 2 or parts[0].startswith("."):
        return []
    out = []
    for m in _REGISTER.finditer(parts[1]):
        kind = "a" if m.group("kind") in ("a", "acc") else m.group("kind")
        if m.group("one") is not None:
            first = last = int(m.group("one"))
        else:
            first, last = int(m.group("lo")), int(m.group("hi"))
        out.append(RegisterUse(kind, first, last))
    return out


def lds_extent(text: str) -> tuple[int, int] | None:
    """(lowest, end) LDS bytes a ds_* instruction's immediate offsets reach beyond its address
    register; None if it is not an LDS access with a static offset part.

    ds_read2/write2 scale offset0/offset1 by the element size (and by 64 for st64 forms).
    """
    mnemonic = text.split(None, 1)[0] if text else ""
    if not mnemonic.startswith("ds_") or mnemonic.startswith(_DS_NOT_LDS):
        return None
    m = _DS_TYPE.search(mnemonic)
    if m is None:
        return None
    size = int(m.group("bits")) // 8
    offsets = {w.group("which"): int(w.group("value"), 0) for w in _DS_OFFSET.finditer(text)}
    if "2" in mnemonic.split("_", 2)[1]:  # ds_read2*, ds_write2*, ds_wrxchg2*
        unit = size * (64 if "st64" in mnemonic else 1)
        ends = [offsets.get(k, 0) * unit for k in ("0", "1")]
        return min(ends), max(ends) + size
    offset = offsets.get("", 0)
    return offset, offset + size


def kernarg_read(text: str, kernarg_sgpr: int) -> tuple[int, int] | None:
    """(offset, size) of an s_load_* from s[kernarg_sgpr:+1] with an immediate offset."""
    m = _S_LOAD.match(text)
    if m is None or int(m.group("base")) != kernarg_sgpr:
        return None
    dwords = int(m.group("n") or 1)
    return int(m.group("offset"), 0), 4 * dwords


@dataclass(frozen=True)
class Usage:
    """The highest register of each class, LDS byte and kernarg byte the instructions touch."""

    vgprs: int  # count: highest v index + 1 (0 if none)
    agprs: int
    sgprs: int
    lds_end: int  # highest end of a ds_* immediate-offset access (0 if none)
    kernarg_end: int  # highest end of an immediate kernarg load (0 if none)
    ds_instructions: int
    mfma_instructions: int

    def render(self) -> str:
        regs = ", ".join(
            _span(k, n) for k, n in (("v", self.vgprs), ("a", self.agprs), ("s", self.sgprs))
        )
        return (
            f"{regs}; ds_* immediates reach LDS byte {self.lds_end}; kernarg loads reach byte "
            f"{self.kernarg_end}; {self.mfma_instructions} MFMA, {self.ds_instructions} DS"
        )


def _span(kind: str, count: int) -> str:
    return f"{kind}0..{kind}{count - 1}" if count else f"no {kind}"


def usage_of(listing: KernelListing) -> Usage:
    top = {"v": 0, "a": 0, "s": 0}
    lds_end = kern_end = ds = mfma = 0
    kernarg_sgpr = limits_of(listing).kernarg_sgpr
    for line in listing.lines:
        for reg in registers_of(line.text):
            top[reg.kind] = max(top[reg.kind], reg.last + 1)
        extent = lds_extent(line.text)
        if extent is not None:
            ds += 1
            lds_end = max(lds_end, extent[1])
        if kernarg_sgpr is not None:
            read = kernarg_read(line.text, kernarg_sgpr)
            if read is not None:
                kern_end = max(kern_end, read[0] + read[1])
        if line.mnemonic.startswith("v_mfma"):
            mfma += 1
    return Usage(top["v"], top["a"], top["s"], lds_end, kern_end, ds, mfma)


# ---------------------------------------------------------------------------------------------
# Limits and static checks


@dataclass(frozen=True)
class Limits:
    """What the descriptor (and metadata, for the kernarg size) grants the kernel."""

    vgprs: int  # v0 .. v(vgprs-1)
    agprs: int  # a0 .. a(agprs-1)
    sgprs: int  # s0 .. s(sgprs-1), VCC and the other extras excluded
    lds_bytes: int  # group_segment_fixed_size
    kernarg_bytes: int | None  # metadata kernarg_segment_size (None: no metadata)
    kernarg_sgpr: int | None  # first SGPR of the kernarg segment pointer (None: not enabled)
    accum_offset: int
    granulated_vgprs: int
    granulated_sgprs: int


def limits_of(listing: KernelListing) -> Limits:
    kd = listing.descriptor
    f = descriptor_fields(kd)
    if listing.arch not in UNIFIED_VGPR_ARCHS:
        raise InputError(
            f"{listing.path}: static register checks know the unified VGPR file of "
            f"{', '.join(sorted(UNIFIED_VGPR_ARCHS))}, not {listing.arch}"
        )
    g_vgpr = field(kd, "granulated_workitem_vgpr_count")
    g_sgpr = field(kd, "granulated_wavefront_sgpr_count")
    total = allocated_vgprs(kd)
    accum = accum_offset(kd)
    meta = listing.kernel_metadata()
    kernarg_bytes = meta.get(".kernarg_segment_size")
    return Limits(
        vgprs=min(accum, total, gfx950.MAX_VGPRS_PER_CLASS),
        agprs=max(0, min(total - accum, gfx950.MAX_VGPRS_PER_CLASS)),
        sgprs=invert_next_free_sgpr(g_sgpr, listing.arch),
        lds_bytes=f["group_segment_fixed_size"],
        kernarg_bytes=None if kernarg_bytes is None else int(kernarg_bytes),
        kernarg_sgpr=kernarg_sgpr(kd),
        accum_offset=accum,
        granulated_vgprs=g_vgpr,
        granulated_sgprs=g_sgpr,
    )


@dataclass(frozen=True)
class Finding:
    """One static-check violation, with where it is and what to do."""

    check: str  # vgpr | agpr | sgpr | lds | kernarg | metadata
    where: str  # file.s:line or label+index ("" for whole-kernel findings)
    text: str  # the instruction ("" for whole-kernel findings)
    message: str
    register: str = ""  # the register beyond the descriptor (vgpr, agpr and sgpr findings)

    def render(self) -> str:
        at = f"{self.where}: " if self.where else ""
        insn = f"  `{self.text}`" if self.text else ""
        return f"{self.check}: {at}{self.message}{insn}"


_REG_NAMES = {"v": ("vgpr", "VGPR"), "a": ("agpr", "AGPR"), "s": ("sgpr", "SGPR")}
#: How to fix a register or LDS finding; the flag sizes the descriptor to the code.
FIT_HINT = "pass --fit-resources (f4pipe assemble / try) to size the descriptor to the code"


def static_checks(listing: KernelListing) -> list[Finding]:
    """Every instruction that oversteps what the descriptor grants (empty list: clean)."""
    lim = limits_of(listing)
    allowed = {"v": lim.vgprs, "a": lim.agprs, "s": lim.sgprs}
    grant = {
        "v": f"the descriptor grants v0..v{lim.vgprs - 1} (accum_offset {lim.accum_offset}, "
        f"{(lim.granulated_vgprs + 1) * gfx950.VGPR_ALLOC_GRANULE} unified VGPRs): "
        f"{FIT_HINT}, raise .amdhsa_next_free_vgpr / .amdhsa_accum_offset or use a lower "
        "register",
        "a": f"the descriptor grants a0..a{lim.agprs - 1} ("
        f"{(lim.granulated_vgprs + 1) * gfx950.VGPR_ALLOC_GRANULE} unified VGPRs minus "
        f"accum_offset {lim.accum_offset}): {FIT_HINT}, raise .amdhsa_next_free_vgpr or use a "
        "lower register",
        "s": f"the descriptor grants s0..s{lim.sgprs - 1} (granulated SGPR count "
        f"{lim.granulated_sgprs}): {FIT_HINT}, raise .amdhsa_next_free_sgpr or use a lower "
        "register",
    }
    findings: list[Finding] = []
    for line in listing.lines:
        where = listing.source_of(line)
        worst: dict[str, RegisterUse] = {}
        for reg in registers_of(line.text):
            if reg.last >= allowed[reg.kind] and reg.last > getattr(
                worst.get(reg.kind), "last", -1
            ):
                worst[reg.kind] = reg
        for reg in worst.values():  # one finding per instruction and register class
            shown = (
                f"{reg.kind}{reg.first}"
                if reg.first == reg.last
                else f"{reg.kind}[{reg.first}:{reg.last}]"
            )
            check, name = _REG_NAMES[reg.kind]
            message = f"{name} {shown}: {grant[reg.kind]}"
            findings.append(Finding(check, where, line.text, message, register=shown))
        extent = lds_extent(line.text)
        if extent is not None and extent[1] > lim.lds_bytes:
            findings.append(
                Finding(
                    "lds",
                    where,
                    line.text,
                    f"immediate offset reaches LDS byte {extent[1] - 1} but the group segment is "
                    f"{lim.lds_bytes} bytes (.amdhsa_group_segment_fixed_size): even address 0 "
                    f"overflows; {FIT_HINT}",
                )
            )
        if lim.kernarg_sgpr is not None and lim.kernarg_bytes is not None:
            read = kernarg_read(line.text, lim.kernarg_sgpr)
            if read is not None and read[0] + read[1] > lim.kernarg_bytes:
                findings.append(
                    Finding(
                        "kernarg",
                        where,
                        line.text,
                        f"reads kernarg bytes {read[0]}..{read[0] + read[1] - 1} but "
                        f".kernarg_segment_size is {lim.kernarg_bytes}: the kernarg block "
                        "(f4pipe.host.kernarg) has nothing there",
                    )
                )
    findings.extend(_metadata_findings(listing, lim))
    return findings


def _metadata_findings(listing: KernelListing, lim: Limits) -> list[Finding]:
    """The descriptor (what the hardware uses) and the metadata (what the runtime reads) must
    agree on the segment sizes, or launches get a different LDS size than the code assumes."""
    meta = listing.kernel_metadata()
    f = descriptor_fields(listing.descriptor)
    out = []
    for key, value in (
        (".group_segment_fixed_size", f["group_segment_fixed_size"]),
        (".private_segment_fixed_size", f["private_segment_fixed_size"]),
    ):
        if key in meta and int(meta[key]) != value:
            out.append(
                Finding(
                    "metadata",
                    "",
                    "",
                    f"metadata {key} is {meta[key]} but the descriptor says {value}: make "
                    f"the .amdgpu_metadata entry and the .amdhsa_{key[1:]} directive agree",
                )
            )
    return out
