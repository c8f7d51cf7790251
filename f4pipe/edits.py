"""Hand-edited kernels: an instruction-level diff against the original, and static checks.

Both sides are read from assembled code objects (LLVM's disassembly of what was really
encoded), so spelling differences in the hand-written .s never show up as changes. The diff
aligns per-label blocks (labels are ELF symbols, which survive reassembly; addresses do not
survive an inserted instruction), then diffs each block's instruction texts; branch targets
are written as labels (or `label+index` when the target has no symbol), so moving code does
not change the text of a branch.

The static checks compare what the instructions touch with what the kernel descriptor grants,
before anything runs: registers (AMDGPUUsage, "compute_pgm_rsrc1" GRANULATED_WORKITEM_VGPR_COUNT
and GRANULATED_WAVEFRONT_SGPR_COUNT, "compute_pgm_rsrc3 for GFX90A, GFX942" ACCUM_OFFSET), LDS
immediates (`ds_*` offset:) against the group segment size, and kernarg loads (`s_load_*` from
the kernarg segment pointer with an immediate offset) against the metadata's
kernarg_segment_size. Register numbers hidden in M0-relative indexing (s_set_gpr_idx_on) and
addresses computed at run time are beyond a static check; the emulator sees those.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from f4pipe.assemble import MAX_ASM_BYTES, assemble
from f4pipe.co2asm import Instruction, branch_target, disassemble_text, invert_next_free_sgpr
from f4pipe.codeobject import (
    CodeObject,
    descriptor_fields,
    granulated_wavefront_sgpr_count,
    granulated_workitem_vgpr_count,
)
from f4pipe.errors import ConfigError, InputError
from f4pipe.fsio import atomic_dir, read_input_text, write_json, write_text
from f4pipe.layout import EDIT_NAME, edit_variant
from f4pipe.manifest import MANIFEST_NAME, KernelEntry, manifest_text, read_manifest
from f4pipe.toolchain import Toolchain

# GFX90A and later GFX9 parts share one unified VGPR file: arch VGPRs first, AGPRs from
# accum_offset on, allocated in granules of 8, at most 256 of each (AMDGPUUsage, "GFX90A").
UNIFIED_VGPR_ARCHS = frozenset({"gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"})
VGPR_GRANULE_UNIFIED = 8
MAX_VGPRS_PER_CLASS = 256
# kernel_code_properties bits that place user SGPRs before the kernarg segment pointer, with the
# number of SGPRs each takes (AMDGPUUsage, "Initial Kernel Execution State", in order).
KCP_USER_SGPRS_BEFORE_KERNARG = ((1 << 0, 4), (1 << 1, 2), (1 << 2, 2))
KCP_KERNARG_SEGMENT_PTR = 1 << 3

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
_LABEL_SUFFIX = re.compile(r"^(?P<label>.+)\+(?P<index>\d+)$")


# ---------------------------------------------------------------------------------------------
# Listings: one kernel's instructions, grouped by label


@dataclass(frozen=True)
class Line:
    """One instruction as the diff and the checks see it."""

    block: str  # the label that starts its block (the kernel symbol for the first one)
    index: int  # position within the block
    addr: int
    text: str  # LLVM's text; branch targets as labels

    @property
    def where(self) -> str:
        return f"{self.block}+{self.index}"

    @property
    def mnemonic(self) -> str:
        return self.text.split(None, 1)[0] if self.text else ""


@dataclass(frozen=True)
class KernelListing:
    """A kernel read from a code object: instructions, descriptor, metadata."""

    path: Path
    symbol: str
    arch: str
    lines: tuple[Line, ...]
    descriptor: bytes
    metadata: dict[str, Any] = field(repr=False)  # the whole metadata note
    source_lines: tuple[int, ...] | None = None  # .s line of each instruction, when known
    source_path: Path | None = None  # the .s those lines are in

    def blocks(self) -> list[tuple[str, list[Line]]]:
        out: list[tuple[str, list[Line]]] = []
        for line in self.lines:
            if not out or out[-1][0] != line.block or line.index == 0:
                out.append((line.block, []))
            out[-1][1].append(line)
        return out

    def kernel_metadata(self) -> dict[str, Any]:
        """This kernel's entry of `amdhsa.kernels` ({} if the note has none)."""
        for k in self.metadata.get("amdhsa.kernels", []):
            if k.get(".name") == self.symbol or k.get(".symbol") == f"{self.symbol}.kd":
                return dict(k)
        return {}

    def source_of(self, line: Line) -> str:
        """`file.s:123` for an instruction when the .s line is known, else its label+index."""
        if self.source_lines is not None and self.source_path is not None:
            pos = self.lines.index(line)
            return f"{self.source_path}:{self.source_lines[pos]}"
        return line.where


def pick_kernel(co: CodeObject, symbol: str | None) -> str:
    """The kernel to read: `symbol`, or the code object's only kernel."""
    names = [k.name for k in co.kernel_symbols()]
    if symbol is not None:
        if symbol not in names:
            raise InputError(f"{co.path}: has no kernel {symbol}; it has {', '.join(names)}")
        return symbol
    if len(names) != 1:
        raise InputError(
            f"{co.path}: holds {len(names)} kernels ({', '.join(names)}); name one with --kernel"
        )
    return names[0]


def read_listing(
    co_path: str | Path,
    toolchain: Toolchain,
    symbol: str | None = None,
    asm_path: str | Path | None = None,
) -> KernelListing:
    """Disassemble one kernel of a code object into label blocks.

    `asm_path` (the .s the object was assembled from) only adds .s line numbers to messages.
    """
    co = CodeObject.read(co_path)
    symbol = pick_kernel(co, symbol)
    insns = disassemble_text(co, toolchain)
    text = co.sections[".text"]
    starts = sorted(k.value for k in co.kernel_symbols())
    begin = next(s.value for s in co.kernel_symbols() if s.name == symbol)
    end = next((s for s in starts if s > begin), text.addr + text.size)
    mine = [i for i in insns if begin <= i.addr < end]
    labels: dict[int, str] = {}
    for sym in sorted(co.symbols, key=lambda s: s.name):
        if sym.section == ".text" and begin < sym.value < end and sym.name != "_DYNAMIC":
            labels.setdefault(sym.value, sym.name)
    labels[begin] = symbol
    place: dict[int, tuple[str, int]] = {}
    block, index = symbol, 0
    for insn in mine:
        if insn.addr in labels:
            block, index = labels[insn.addr], 0
        place[insn.addr] = (block, index)
        index += 1
    lines = tuple(
        Line(
            block=place[i.addr][0],
            index=place[i.addr][1],
            addr=i.addr,
            text=_text(i, labels, place),
        )
        for i in mine
    )
    source = source_line_map(read_asm(Path(asm_path)), len(lines)) if asm_path else None
    return KernelListing(
        path=Path(co_path),
        symbol=symbol,
        arch=co.arch,
        lines=lines,
        descriptor=co.kernel_descriptor(symbol),
        metadata=co.metadata() or {},
        source_lines=source,
        source_path=Path(asm_path) if source is not None and asm_path else None,
    )


def _text(insn: Instruction, labels: dict[int, str], place: dict[int, tuple[str, int]]) -> str:
    """The instruction's text with branch targets named, and undecodable words as .long."""
    if insn.text.startswith("<unknown>") or insn.text.startswith(".long"):
        return "; ".join(f".long 0x{w:08x}" for w in insn.words)
    target = branch_target(insn)
    if target is None:
        return insn.text
    if target in labels:
        name = labels[target]
    elif target in place:
        name = "{}+{}".format(*place[target])
    else:
        name = f"<0x{target:x}>"  # outside this kernel
    return f"{insn.text.split(None, 1)[0]} {name}"


def source_line_map(asm_text: str, count: int) -> tuple[int, ...] | None:
    """Line numbers of the instruction statements of a .s's text section, if there are exactly
    `count` of them (one statement per line, as co2asm writes); else None (no guessing)."""
    out: list[int] = []
    in_text = False
    for number, raw in enumerate(asm_text.splitlines(), start=1):
        line = raw.split("//", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        if line.startswith("."):
            word = line.split(None, 1)[0]
            if word == ".text":
                in_text = True
            elif word in (".rodata", ".data", ".bss", ".section", ".amdgpu_metadata"):
                in_text = False
            elif in_text and word == ".long":
                out.append(number)
            continue
        if in_text and not line.endswith(":"):
            out.append(number)
    return tuple(out) if len(out) == count else None


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
    g_vgpr = granulated_workitem_vgpr_count(kd)
    g_sgpr = granulated_wavefront_sgpr_count(kd)
    total = (g_vgpr + 1) * VGPR_GRANULE_UNIFIED
    accum_offset = ((f["compute_pgm_rsrc3"] & 0x3F) + 1) * 4
    kcp = f["kernel_code_properties"]
    kernarg_sgpr = None
    if kcp & KCP_KERNARG_SEGMENT_PTR:
        kernarg_sgpr = sum(n for bit, n in KCP_USER_SGPRS_BEFORE_KERNARG if kcp & bit)
    meta = listing.kernel_metadata()
    kernarg_bytes = meta.get(".kernarg_segment_size")
    return Limits(
        vgprs=min(accum_offset, total, MAX_VGPRS_PER_CLASS),
        agprs=max(0, min(total - accum_offset, MAX_VGPRS_PER_CLASS)),
        sgprs=invert_next_free_sgpr(g_sgpr, listing.arch),
        lds_bytes=f["group_segment_fixed_size"],
        kernarg_bytes=None if kernarg_bytes is None else int(kernarg_bytes),
        kernarg_sgpr=kernarg_sgpr,
        accum_offset=accum_offset,
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

    def render(self) -> str:
        at = f"{self.where}: " if self.where else ""
        insn = f"  `{self.text}`" if self.text else ""
        return f"{self.check}: {at}{self.message}{insn}"


_REG_NAMES = {"v": ("vgpr", "VGPR"), "a": ("agpr", "AGPR"), "s": ("sgpr", "SGPR")}


def static_checks(listing: KernelListing) -> list[Finding]:
    """Every instruction that oversteps what the descriptor grants (empty list: clean)."""
    lim = limits_of(listing)
    allowed = {"v": lim.vgprs, "a": lim.agprs, "s": lim.sgprs}
    grant = {
        "v": f"the descriptor grants v0..v{lim.vgprs - 1} (accum_offset {lim.accum_offset}, "
        f"{(lim.granulated_vgprs + 1) * VGPR_GRANULE_UNIFIED} unified VGPRs): raise "
        ".amdhsa_next_free_vgpr / .amdhsa_accum_offset or use a lower register",
        "a": f"the descriptor grants a0..a{lim.agprs - 1} ("
        f"{(lim.granulated_vgprs + 1) * VGPR_GRANULE_UNIFIED} unified VGPRs minus accum_offset "
        f"{lim.accum_offset}): raise .amdhsa_next_free_vgpr or use a lower register",
        "s": f"the descriptor grants s0..s{lim.sgprs - 1} (granulated SGPR count "
        f"{lim.granulated_sgprs}): raise .amdhsa_next_free_sgpr or use a lower register",
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
            findings.append(Finding(check, where, line.text, f"{name} {shown}: {grant[reg.kind]}"))
        extent = lds_extent(line.text)
        if extent is not None and extent[1] > lim.lds_bytes:
            findings.append(
                Finding(
                    "lds",
                    where,
                    line.text,
                    f"immediate offset reaches LDS byte {extent[1] - 1} but the group segment is "
                    f"{lim.lds_bytes} bytes (.amdhsa_group_segment_fixed_size): even address 0 "
                    "overflows",
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
                        "(f4pipe.kernarg) has nothing there",
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


# ---------------------------------------------------------------------------------------------
# The diff


@dataclass(frozen=True)
class InsnChange:
    kind: str  # added | removed | changed | moved
    block: str
    old: Line | None
    new: Line | None

    def render(self) -> str:
        if self.kind == "added":
            assert self.new is not None
            return f"  + {self.new.where:<22} {self.new.text}"
        if self.kind == "removed":
            assert self.old is not None
            return f"  - {self.old.where:<22} {self.old.text}"
        assert self.old is not None and self.new is not None
        if self.kind == "moved":
            return f"  > {self.old.where} -> {self.new.where:<10} {self.new.text}"
        return f"  ~ {self.new.where:<22} {self.old.text}\n    {'':<22} {self.new.text}"


@dataclass(frozen=True)
class FieldChange:
    name: str
    old: Any
    new: Any


@dataclass
class EditDiff:
    """An edit against its original: instructions, descriptor, metadata, usage."""

    original: KernelListing
    edited: KernelListing
    changes: list[InsnChange]
    blocks_added: list[str]
    blocks_removed: list[str]
    descriptor: list[FieldChange]
    metadata: list[FieldChange]
    usage_original: Usage
    usage_edited: Usage

    def count(self, kind: str) -> int:
        return sum(1 for c in self.changes if c.kind == kind)

    @property
    def identical(self) -> bool:
        return not (self.changes or self.descriptor or self.metadata)

    def summary(self) -> str:
        """One line: counts of each kind of change."""
        parts = [
            f"+{self.count('added')} added",
            f"-{self.count('removed')} removed",
            f"~{self.count('changed')} changed",
            f"{self.count('moved')} moved",
        ]
        extra = []
        if self.blocks_added or self.blocks_removed:
            extra.append(f"blocks +{len(self.blocks_added)} -{len(self.blocks_removed)}")
        extra.append(f"descriptor {'changed' if self.descriptor else 'same'}")
        extra.append(f"metadata {'changed' if self.metadata else 'same'}")
        return (
            f"{', '.join(parts)} instructions "
            f"({len(self.original.lines)} -> {len(self.edited.lines)}); {'; '.join(extra)}"
        )

    def render(self, max_changes: int | None = None) -> str:
        """The readable diff: header, instruction changes by block, descriptor, metadata,
        usage. `max_changes` shortens the instruction part (for the terminal)."""
        out = [
            f"original: {self.original.path} ({self.original.symbol})",
            f"edited:   {self.edited.path}",
            f"summary:  {self.summary()}",
            "",
            "instructions (aligned by label; + added, - removed, ~ changed, > moved):",
        ]
        shown = self.changes if max_changes is None else self.changes[:max_changes]
        block = None
        for change in shown:
            if change.block != block:
                block = change.block
                out.append(f" {block}:")
            out.append(change.render())
        if not self.changes:
            out.append("  (none)")
        elif len(shown) < len(self.changes):
            out.append(f"  ... {len(self.changes) - len(shown)} more (see the diff file)")
        for name in self.blocks_added:
            out.append(f"  new block {name}")
        for name in self.blocks_removed:
            out.append(f"  block {name} removed")
        out.append("descriptor:" + ("" if self.descriptor else " same"))
        out.extend(
            f"  {c.name}: {_fmt(c.name, c.old)} -> {_fmt(c.name, c.new)}" for c in self.descriptor
        )
        out.append("metadata:" + ("" if self.metadata else " same"))
        out.extend(
            f"  {c.name}: {_fmt(c.name, c.old)} -> {_fmt(c.name, c.new)}" for c in self.metadata
        )
        out.append("usage:")
        out.append(f"  original: {self.usage_original.render()}")
        out.append(f"  edited:   {self.usage_edited.render()}")
        return "\n".join(out) + "\n"

    def as_json(self) -> dict[str, Any]:
        def line(x: Line | None) -> dict[str, Any] | None:
            return None if x is None else {"where": x.where, "addr": x.addr, "text": x.text}

        return {
            "original": str(self.original.path),
            "edited": str(self.edited.path),
            "symbol": self.original.symbol,
            "counts": {k: self.count(k) for k in ("added", "removed", "changed", "moved")},
            "instructions": {
                "original": len(self.original.lines),
                "edited": len(self.edited.lines),
            },
            "changes": [
                {"kind": c.kind, "block": c.block, "old": line(c.old), "new": line(c.new)}
                for c in self.changes
            ],
            "blocks_added": self.blocks_added,
            "blocks_removed": self.blocks_removed,
            "descriptor": [{"name": c.name, "old": c.old, "new": c.new} for c in self.descriptor],
            "metadata": [{"name": c.name, "old": c.old, "new": c.new} for c in self.metadata],
            "usage": {
                "original": self.usage_original.__dict__,
                "edited": self.usage_edited.__dict__,
            },
        }


def _fmt(name: str, value: Any) -> str:
    """Bit-field words in hex, everything else as is."""
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and ("rsrc" in name or "properties" in name)
    ):
        return f"0x{value:x}"
    return "(absent)" if value is None else repr(value)


def diff_listings(original: KernelListing, edited: KernelListing) -> EditDiff:
    """Align blocks by label, then diff each pair of blocks' instruction texts."""
    blocks_a, blocks_b = original.blocks(), edited.blocks()
    names_a, names_b = [b[0] for b in blocks_a], [b[0] for b in blocks_b]
    changes: list[InsnChange] = []
    added: list[str] = []
    removed: list[str] = []
    matcher = difflib.SequenceMatcher(None, names_a, names_b, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal" or (op == "replace" and a1 - a0 == b1 - b0):
            # Equal names, or renamed labels in the same places: compare contents pairwise.
            for (_, la), (_, lb) in zip(blocks_a[a0:a1], blocks_b[b0:b1], strict=True):
                changes.extend(_diff_block(la, lb))
            continue
        for name, lines in blocks_a[a0:a1]:
            removed.append(name)
            changes.extend(InsnChange("removed", name, x, None) for x in lines)
        for name, lines in blocks_b[b0:b1]:
            added.append(name)
            changes.extend(InsnChange("added", name, None, x) for x in lines)
    return EditDiff(
        original=original,
        edited=edited,
        changes=changes,
        blocks_added=added,
        blocks_removed=removed,
        descriptor=diff_descriptors(original, edited),
        metadata=diff_metadata(original.metadata, edited.metadata),
        usage_original=usage_of(original),
        usage_edited=usage_of(edited),
    )


def _diff_block(a: list[Line], b: list[Line]) -> list[InsnChange]:
    block = b[0].block if b else a[0].block
    out: list[InsnChange] = []
    ta, tb = [x.text for x in a], [x.text for x in b]
    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        if op != "replace":
            out.extend(InsnChange("removed", block, x, None) for x in a[a0:a1])
            out.extend(InsnChange("added", block, None, x) for x in b[b0:b1])
            continue
        out.extend(_pair_by_mnemonic(block, a[a0:a1], b[b0:b1]))
    return _find_moves(block, out)


def _pair_by_mnemonic(block: str, a: list[Line], b: list[Line]) -> list[InsnChange]:
    """Within a replaced run, same-mnemonic instructions in the same order are `changed`
    (an operand edited); the rest are removed or added."""
    out: list[InsnChange] = []
    ma, mb = [x.mnemonic for x in a], [x.mnemonic for x in b]
    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(None, ma, mb, autojunk=False).get_opcodes():
        if op == "equal":
            out.extend(
                InsnChange("changed", block, x, y) for x, y in zip(a[a0:a1], b[b0:b1], strict=True)
            )
        else:
            out.extend(InsnChange("removed", block, x, None) for x in a[a0:a1])
            out.extend(InsnChange("added", block, None, x) for x in b[b0:b1])
    return out


def _find_moves(block: str, changes: list[InsnChange]) -> list[InsnChange]:
    """A removed and an added instruction of identical text in one block is one move (in
    order: the first removed copy pairs with the first added copy)."""
    added = Counter(c.new.text for c in changes if c.kind == "added" and c.new is not None)
    removed = Counter(c.old.text for c in changes if c.kind == "removed" and c.old is not None)
    movable = added & removed
    if not movable:
        return changes
    targets: dict[str, list[Line]] = {}
    taken = Counter[str]()
    for c in changes:
        if c.kind == "added" and c.new is not None and taken[c.new.text] < movable[c.new.text]:
            taken[c.new.text] += 1
            targets.setdefault(c.new.text, []).append(c.new)
    moved_new = {id(x) for lines in targets.values() for x in lines}
    out = []
    for c in changes:
        if c.kind == "removed" and c.old is not None and targets.get(c.old.text):
            out.append(InsnChange("moved", block, c.old, targets[c.old.text].pop(0)))
        elif c.kind == "added" and id(c.new) in moved_new:
            continue
        else:
            out.append(c)
    return out


def descriptor_summary(listing: KernelListing) -> dict[str, int]:
    """The descriptor's fields plus what they decode to (granted registers)."""
    f = dict(descriptor_fields(listing.descriptor))
    lim = limits_of(listing)
    f.update(
        granulated_workitem_vgpr_count=lim.granulated_vgprs,
        granulated_wavefront_sgpr_count=lim.granulated_sgprs,
        accum_offset=lim.accum_offset,
        granted_vgprs=lim.vgprs,
        granted_agprs=lim.agprs,
        granted_sgprs=lim.sgprs,
    )
    return f


def diff_descriptors(a: KernelListing, b: KernelListing) -> list[FieldChange]:
    fa, fb = descriptor_summary(a), descriptor_summary(b)
    out = [FieldChange(k, fa[k], fb[k]) for k in fa if fa[k] != fb[k]]
    if not out and a.descriptor != b.descriptor:
        diff = [i for i in range(len(a.descriptor)) if a.descriptor[i] != b.descriptor[i]]
        out.append(FieldChange("reserved bytes", diff, diff))
    return out


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k in sorted(value, key=str):
            _flatten(value[k], f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        for i, x in enumerate(value):
            name = x.get(".name") if "kernels" in prefix else None
            _flatten(x, f"{prefix}[{name if name else i}]", out)
    else:
        out[prefix] = value


def diff_metadata(a: dict[str, Any], b: dict[str, Any]) -> list[FieldChange]:
    """Changed, added (old None) and removed (new None) metadata entries, by path."""
    fa: dict[str, Any] = {}
    fb: dict[str, Any] = {}
    _flatten(a, "", fa)
    _flatten(b, "", fb)
    keys = list(fa) + [k for k in fb if k not in fa]
    return [FieldChange(k, fa.get(k), fb.get(k)) for k in keys if fa.get(k) != fb.get(k)]


# ---------------------------------------------------------------------------------------------
# Edits named in the pipeline config


@dataclass(frozen=True)
class EditSpec:
    """One configured edit: `edits: [{name, kernel, asm}]`; its variant is `edit-<name>`."""

    name: str
    kernel: str  # symbol, .co name or stem
    asm: Path

    @property
    def variant(self) -> str:
        return edit_variant(self.name)


def parse_edit_specs(items: list[dict[str, Any]] | None) -> list[EditSpec]:
    """The config's `edits` list, checked: names usable as a variant and unique."""
    specs: list[EditSpec] = []
    for i, item in enumerate(items or []):
        try:
            name, kernel, asm = str(item["name"]), str(item["kernel"]), str(item["asm"])
        except (KeyError, TypeError):
            raise ConfigError(f"edits[{i}] = {item!r}: needs name, kernel and asm") from None
        if not EDIT_NAME.match(name):
            raise ConfigError(
                f"edits[{i}].name {name!r}: use letters, digits, _ and single dashes "
                "(it becomes the variant edit-<name>)"
            )
        if any(s.name == name for s in specs):
            raise ConfigError(f"edits[{i}].name {name!r} is used twice; names must be unique")
        specs.append(EditSpec(name=name, kernel=kernel, asm=Path(asm)))
    return specs


def kernel_symbols_in(asm_text: str) -> list[str]:
    """Kernels a .s defines: the names of its `.amdhsa_kernel` directives."""
    return re.findall(r"^\s*\.amdhsa_kernel\s+(\S+)", asm_text, re.M)


def pick_line(listing: KernelListing, where: str) -> Line:
    """The instruction at `label+index` (for tests and tools that point at one)."""
    m = _LABEL_SUFFIX.match(where)
    if not m:
        raise InputError(f"{where!r} is not label+index")
    for line in listing.lines:
        if line.block == m.group("label") and line.index == int(m.group("index")):
            return line
    raise InputError(f"{listing.path}: no instruction at {where}")


# ---------------------------------------------------------------------------------------------
# Preparing an edit: assemble, find its original, diff, check


@dataclass
class PreparedEdit:
    """An assembled edit with its original, diff and static findings (nothing run yet)."""

    asm_path: Path
    co_path: Path  # the assembled edit
    entry: KernelEntry  # the original's manifest row
    original_co: Path
    diff: EditDiff
    findings: list[Finding]


def read_asm(asm_path: Path) -> str:
    if not asm_path.exists() and not asm_path.is_symlink():
        raise InputError(f"{asm_path}: no such assembly file")
    return read_input_text(asm_path, "assembly file", MAX_ASM_BYTES)


def prepare_edit(
    asm_path: str | Path,
    co_dir: str | Path,
    out_co: str | Path,
    toolchain: Toolchain,
    kernel: str | None = None,
) -> PreparedEdit:
    """Assemble `asm_path` into `out_co`, match it to its original in `co_dir`'s manifest
    (by `kernel`, else by the kernel symbol the edit defines), diff and check it."""
    asm_path, out_co = Path(asm_path), Path(out_co)
    assemble(asm_path, out_co, toolchain)
    manifest = read_manifest(co_dir)
    defined = [k.name for k in CodeObject.read(out_co).kernel_symbols()]
    if kernel is not None:
        entry = manifest.get(kernel)
        if entry.symbol not in defined:
            raise InputError(
                f"{asm_path}: defines {', '.join(defined) or 'no kernel'}, not {entry.symbol} "
                f"(the kernel {kernel!r} names); pass the matching --kernel"
            )
    else:
        if len(defined) != 1:
            raise InputError(
                f"{asm_path}: defines {len(defined)} kernels ({', '.join(defined)}); "
                "name the one to try with --kernel"
            )
        entry = manifest.get(defined[0])
    original_co = manifest.co_path(entry)
    original = read_listing(original_co, toolchain, entry.symbol)
    edited = read_listing(out_co, toolchain, entry.symbol, asm_path=asm_path)
    return PreparedEdit(
        asm_path=asm_path,
        co_path=out_co,
        entry=entry,
        original_co=original_co,
        diff=diff_listings(original, edited),
        findings=static_checks(edited),
    )


def render_findings(findings: list[Finding], limit: int | None = None) -> str:
    shown = findings if limit is None else findings[:limit]
    lines = [f"  {f.render()}" for f in shown]
    if len(shown) < len(findings):
        lines.append(f"  ... {len(findings) - len(shown)} more")
    return "\n".join(lines)


def report_text(prepared: PreparedEdit) -> str:
    """The diff file: the full diff, then the static checks' verdict."""
    f = prepared.findings
    checks = (
        "static checks: ok\n"
        if not f
        else (f"static checks: {len(f)} finding(s)\n{render_findings(f)}\n")
    )
    return prepared.diff.render() + checks


def report_json(prepared: PreparedEdit, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "kernel": prepared.entry.name,
        "asm": str(prepared.asm_path),
        "diff": prepared.diff.as_json(),
        "static_findings": [f.__dict__ for f in prepared.findings],
        "static_ok": not prepared.findings,
    }


def build_edit_variant(
    asm_path: str | Path,
    co_dir: str | Path,
    kernel: str,
    out_dir: str | Path,
    toolchain: Toolchain,
    diff_path: str | Path,
    json_path: str | Path | None = None,
    name: str | None = None,
) -> PreparedEdit:
    """The pipeline's edit variant: a directory holding the assembled edit under the
    original's .co name plus a one-row manifest, so every GEMM stage treats it like aiter's
    directory. The diff file (and JSON) are always written; the directory only when the static
    checks pass (a kernel that oversteps its descriptor is not launched anywhere)."""
    with atomic_dir(out_dir) as tmp:
        manifest = read_manifest(co_dir, check_files=False)
        entry = manifest.get(kernel)
        prepared = prepare_edit(asm_path, co_dir, tmp / entry.co_name, toolchain, kernel)
        final_co = Path(out_dir) / entry.co_name  # where the report says the edit lives
        prepared.diff.edited = dataclasses.replace(prepared.diff.edited, path=final_co)
        write_text(diff_path, report_text(prepared))
        if json_path is not None:
            write_json(json_path, report_json(prepared, name))
        if prepared.findings:
            raise StaticCheckError(
                f"{asm_path}: {len(prepared.findings)} static check finding(s), first: "
                f"{prepared.findings[0].render()} (all in {diff_path})"
            )
        (tmp / MANIFEST_NAME).write_text(manifest_text([prepared.entry]))
    prepared.co_path = final_co
    return prepared


class StaticCheckError(InputError):
    """An edit oversteps what its descriptor grants; it is not run."""
