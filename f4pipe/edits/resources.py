"""`--fit-resources`: size an edited kernel's descriptor and metadata note to what its code uses.

An edit copied from co2asm carries the original's `.amdhsa_*` directives and metadata note, so
an edit that needs a register more, or an LDS byte more, outgrows them (and one that frees
registers keeps the original's occupancy). This module assembles the edit once as written,
reads what every instruction touches through the emulator's decoder and effects (no text
parsing), rewrites the directives and the kernel's metadata entry to agree with that use, and
assembles again. Nothing else in the .s changes, the .s itself is never written, and the
result is read back through f4pipe.codeobj.descriptor's table to prove the descriptor says what was
meant.

What "use" means, per resource (facts in f4pipe.arch.gfx950, docs/reference/gfx950.md "Resources
and occupancy"):
- arch VGPRs and AGPRs: the highest of each an instruction names, plus v0 (the work-item id the
  hardware writes); accum_offset is the arch count rounded up to 4, and the unified total is
  accum_offset + AGPRs (arch alone when there are none). A kernel that indexes registers
  through M0 (s_set_gpr_idx_on) chooses them at run time: its allocation only grows.
- SGPRs: the highest an instruction names, and at least the user and system SGPRs the
  hardware fills at launch; the assembler adds VCC and the other extras.
- LDS: the highest byte any DS instruction or LDS DMA can reach, when every such address is
  static (a flow-insensitive interval analysis over the kernel's moves, shifts, adds, ands and
  multiplies, with the work-item id bounded by the workgroup size); otherwise the descriptor's
  size is kept, raised to what the immediate offsets alone reach.
"""

from __future__ import annotations

import itertools
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from f4pipe.analysis.ldsreach import launch_values, lds_reach
from f4pipe.arch import gfx950, isa
from f4pipe.arch.decode import Instruction, Operand, decode_all
from f4pipe.arch.effects import SGPR_BASE, effects_of
from f4pipe.codeobj.assemble import assemble
from f4pipe.codeobj.co2asm import encode_granulated_sgpr, extra_sgprs, invert_next_free_sgpr
from f4pipe.codeobj.codeobject import CodeObject, Symbol
from f4pipe.codeobj.descriptor import (
    ACCUM_OFFSET,
    GROUP_SEGMENT,
    NEXT_FREE_SGPR,
    NEXT_FREE_VGPR,
    accum_offset,
    allocated_sgprs,
    allocated_vgprs,
    descriptor_bits,
    descriptor_fields,
    system_sgprs,
)
from f4pipe.codeobj.toolchain import Toolchain
from f4pipe.core.errors import EmulatorError, F4PipeError, InputError, ToolchainError
from f4pipe.edits.listing import read_asm

FLAG = "--fit-resources"


class ResourceError(InputError):
    """An edit that no gfx950 descriptor can hold (or whose use cannot be read): exit 2, as for
    a line llvm-mc rejects, since no code object can be built from it."""


# ---------------------------------------------------------------------------------------------
# What the code uses


@dataclass(frozen=True)
class CodeUse:
    """The registers and LDS one kernel's instructions touch."""

    arch_vgprs: int  # highest v + 1
    agprs: int  # highest a + 1 (0: none)
    sgprs: int  # highest s + 1, launch SGPRs included; VCC and the other extras excluded
    lds_end: int | None  # highest LDS byte + 1 any access reaches; None: not static
    lds_floor: int  # what the immediate offsets alone reach (a lower bound)
    indexed: bool  # vector registers chosen through M0 at run time


def kernel_instructions(co: CodeObject, sym: Symbol) -> list[Instruction]:
    """The decoded instructions of one kernel: its symbol's range of .text (to the next
    kernel, or the end of .text, when the symbol has no size)."""
    text = co.sections[".text"]
    later = [k.value for k in co.kernel_symbols() if k.value > sym.value]
    end = sym.value + sym.size if sym.size else min([text.addr + text.size, *later])
    data = co.section_bytes(".text")
    return decode_all(data[sym.value - text.addr : end - text.addr], sym.value)


def _regs(op: Operand | None) -> tuple[str, int] | None:
    """(class, highest index) of a register operand; None for constants and special SGPRs."""
    if op is None or op.kind == "imm":
        return None
    top = op.index + op.count - 1
    if op.kind == "s" and top >= gfx950.MAX_ADDRESSABLE_SGPRS:
        return None  # vcc, m0, exec, ...: not allocated from the SGPR file
    return op.kind, top


def _touched(inst: Instruction) -> list[tuple[str, int]]:
    """Every (class, index) an instruction reads or writes: the operands as decoded and the
    registers its effects name (implicit ones included)."""
    ops = [inst.dst, inst.sdst, *inst.srcs]
    if inst.fmt == "MUBUF":  # an unused vaddr field (no offen/idxen) or an LDS DMA's vdata
        ops = [inst.srcs[2], inst.srcs[3]]
    out = [r for r in map(_regs, ops) if r is not None]
    e = effects_of(inst)
    for r in e.read_regs() | e.writes | e.load_dest:
        if r < isa.AGPR_BASE:
            out.append(("v", r))
        elif r < SGPR_BASE:
            out.append(("a", r - isa.AGPR_BASE))
        elif r - SGPR_BASE < gfx950.MAX_ADDRESSABLE_SGPRS:
            out.append(("s", r - SGPR_BASE))
    return out


def code_use(co: CodeObject, sym: Symbol, workgroup_size: int, where: str) -> CodeUse:
    """What `sym`'s instructions use; `where` names the kernel in a refusal."""
    kd = co.kernel_descriptor(sym.name)
    bits = descriptor_bits(kd)
    insts = kernel_instructions(co, sym)
    top = {"v": 0, "a": -1, "s": -1}
    indexed = False
    for inst in insts:
        if not inst.known:
            raise ResourceError(
                f"{where} pc {inst.pc:#x}: {inst.name} is not in f4pipe's decoder, "
                f"so the registers it touches are unknown; {FLAG} cannot size this kernel (set "
                "the .amdhsa_* directives by hand)"
            )
        try:
            for kind, index in _touched(inst):
                top[kind] = max(top[kind], index)
        except EmulatorError as exc:
            raise ResourceError(f"{where}: {exc}; {FLAG} cannot size it") from None
        indexed |= inst.name == "s_set_gpr_idx_on"
    launch_sgprs = bits["user_sgpr_count"] + system_sgprs(kd)
    launch = launch_values(bits, launch_sgprs, workgroup_size)
    lds_end, lds_floor = lds_reach(insts, launch, workgroup_size)
    return CodeUse(
        arch_vgprs=top["v"] + 1,
        agprs=top["a"] + 1,
        sgprs=max(top["s"] + 1, launch_sgprs),
        lds_end=lds_end,
        lds_floor=lds_floor,
        indexed=indexed,
    )


# ---------------------------------------------------------------------------------------------
# Allocations: what a descriptor grants, and what the code needs


@dataclass(frozen=True)
class Allocation:
    """A kernel's resources as its directives state them (and the metadata repeats them)."""

    next_free_vgpr: int  # unified: arch + acc
    accum_offset: int
    next_free_sgpr: int  # without the extras the assembler adds
    lds_bytes: int
    arch: str

    @property
    def agprs(self) -> int:
        return max(0, self.next_free_vgpr - self.accum_offset)

    @property
    def sgpr_count(self) -> int:
        """SGPRs a wave needs with VCC and the other extras (the metadata's .sgpr_count)."""
        return self.next_free_sgpr + extra_sgprs(self.arch)

    def resources(self, workgroup_size: int) -> gfx950.Resources:
        granules = encode_granulated_sgpr(self.next_free_sgpr, self.arch) + 1
        return gfx950.Resources(
            vgprs=self.next_free_vgpr,
            sgprs=granules * 8,
            lds_bytes=self.lds_bytes,
            workgroup_size=workgroup_size,
        )


def granted(kd: bytes, arch: str) -> Allocation:
    """What an assembled descriptor grants (the top of each granule)."""
    return Allocation(
        next_free_vgpr=allocated_vgprs(kd),
        accum_offset=accum_offset(kd),
        next_free_sgpr=invert_next_free_sgpr(
            descriptor_bits(kd)["granulated_wavefront_sgpr_count"], arch
        ),
        lds_bytes=descriptor_fields(kd)["group_segment_fixed_size"],
        arch=arch,
    )


def _round_up(n: int, granule: int) -> int:
    return -(-n // granule) * granule


def needed(use: CodeUse, current: Allocation, where: str) -> Allocation:
    """The allocation that fits `use`; ResourceError if gfx950 has no such allocation."""
    accum = max(gfx950.ACCUM_OFFSET_GRANULE, _round_up(use.arch_vgprs, gfx950.ACCUM_OFFSET_GRANULE))
    agprs = use.agprs
    if use.indexed:  # registers chosen through M0 at run time: never shrink
        accum, agprs = max(accum, current.accum_offset), max(agprs, current.agprs)
    total = accum + agprs if agprs else max(use.arch_vgprs, 1)
    lds = use.lds_end if use.lds_end is not None else max(current.lds_bytes, use.lds_floor)
    if total > gfx950.VGPRS_PER_SIMD_LANE or accum > gfx950.MAX_VGPRS_PER_CLASS:
        raise ResourceError(
            f"{where}: needs {total} VGPRs per lane (accum_offset {accum} + {agprs} AGPRs); "
            f"gfx950 has {gfx950.VGPRS_PER_SIMD_LANE} (docs/reference/gfx950.md)"
        )
    if use.sgprs > gfx950.MAX_ADDRESSABLE_SGPRS:
        raise ResourceError(
            f"{where}: needs {use.sgprs} SGPRs; a gfx950 wave addresses "
            f"{gfx950.MAX_ADDRESSABLE_SGPRS} (docs/reference/gfx950.md)"
        )
    if lds > gfx950.LDS_BYTES_PER_CU:
        source = "its LDS addresses reach" if use.lds_end is not None else "its descriptor asks"
        raise ResourceError(
            f"{where}: {source} {lds} bytes of LDS; a gfx950 CU has "
            f"{gfx950.LDS_BYTES_PER_CU} (docs/reference/gfx950.md)"
        )
    return Allocation(total, accum, use.sgprs, lds, current.arch)


# ---------------------------------------------------------------------------------------------
# Writing the directives and the metadata entry


@dataclass(frozen=True)
class Change:
    name: str  # directive or metadata key
    old: int | None
    new: int


@dataclass
class KernelFit:
    symbol: str
    use: CodeUse
    before: Allocation
    after: Allocation
    workgroup_size: int
    changes: list[Change] = field(default_factory=list)

    def render(self) -> str:
        shown = [f"{c.name} {c.old} -> {c.new}" for c in self.changes]
        if self.use.lds_end is not None:
            lds = f"LDS {self.after.lds_bytes}: what its static addresses reach"
        elif self.after.lds_bytes > self.before.lds_bytes:
            lds = f"LDS {self.after.lds_bytes}: what its immediate offsets alone reach"
        else:
            lds = f"LDS {self.after.lds_bytes}: the .s's own value (its addresses are not static)"
        before = gfx950.occupancy(self.before.resources(self.workgroup_size))
        after = gfx950.occupancy(self.after.resources(self.workgroup_size))
        return (
            f"fit {self.symbol}: {', '.join(shown) or 'nothing to change'} ({lds})\n"
            f"occupancy: {gfx950.render_change(before, after)}"
        )


def _directive_block(lines: list[str], symbol: str) -> tuple[int, int]:
    """[first, last] line indexes of `.amdhsa_kernel symbol` .. `.end_amdhsa_kernel`."""
    start = next(
        (i for i, ln in enumerate(lines) if ln.split()[:2] == [".amdhsa_kernel", symbol]), None
    )
    if start is None:
        raise ResourceError(f"no `.amdhsa_kernel {symbol}` block to fit")
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == ".end_amdhsa_kernel")
    return start, end


def set_directives(lines: list[str], symbol: str, values: dict[str, int]) -> list[Change]:
    """Set each `.amdhsa_*` directive of `symbol`'s block in place (added before
    `.end_amdhsa_kernel` when absent)."""
    start, end = _directive_block(lines, symbol)
    changes = []
    for name, value in values.items():
        at = next(
            (i for i in range(start, end) if lines[i].split()[:1] == [name]),
            None,
        )
        old = int(lines[at].split()[1], 0) if at is not None else None
        if old == value:
            continue
        changes.append(Change(name, old, value))
        if at is None:
            lines.insert(end, f"\t{name} {value}")
            end += 1
        else:
            indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
            lines[at] = f"{indent}{name} {value}"
    return changes


_ENTRY = re.compile(r"^(?P<indent>\s*)- ")


def _kernel_entries(lines: list[str]) -> list[range]:
    """Line ranges of the amdhsa.kernels entries in the `.amdgpu_metadata` YAML."""
    start = next((i for i, ln in enumerate(lines) if ln.strip() == ".amdgpu_metadata"), None)
    if start is None:
        return []
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == ".end_amdgpu_metadata")
    head = next((i for i in range(start, end) if lines[i].strip() == "amdhsa.kernels:"), None)
    if head is None:
        return []
    stop = next((i for i in range(head + 1, end) if lines[i][:1] not in (" ", "-", "")), end)
    firsts = [i for i in range(head + 1, stop) if _ENTRY.match(lines[i])]
    if not firsts:
        return []
    indent = len(lines[firsts[0]]) - len(lines[firsts[0]].lstrip())
    firsts = [i for i in firsts if len(lines[i]) - len(lines[i].lstrip()) == indent]
    return [range(lo, hi) for lo, hi in itertools.pairwise([*firsts, stop])]


def set_metadata(
    lines: list[str], symbol: str, values: dict[str, int], meta: dict[str, Any]
) -> list[Change]:
    """Set the keys of `symbol`'s amdhsa.kernels entry that it already has, in place; keys it
    lacks stay absent (LLVM's YAML rendering: one `key: value` per line)."""
    name = re.compile(rf"^\s*(- )?\.name:\s+{re.escape(symbol)}\s*$")
    entry = next((r for r in _kernel_entries(lines) if any(name.match(lines[i]) for i in r)), None)
    if entry is None:
        return []
    indent = len(_ENTRY.match(lines[entry[0]]).group("indent"))  # type: ignore[union-attr]
    changes = []
    for key, value in values.items():
        if key not in meta or int(meta[key]) == value:
            continue
        pattern = re.compile(rf"^(?P<lead>\s{{{indent}}}(- |  )){re.escape(key)}:(?P<gap>\s*)\S+")
        for i in entry:
            m = pattern.match(lines[i])
            if m is not None:
                changes.append(Change(key, int(meta[key]), value))
                lines[i] = f"{m.group('lead')}{key}:{m.group('gap')}{value}"
                break
    return changes


def occupancy_of(co_path: Path, symbol: str) -> gfx950.Occupancy:
    """The occupancy one kernel's descriptor grants: what the cycle model, which replays one
    workgroup's waves on a CU, does not see (`try` says so when an edit changes it)."""
    co = CodeObject.read(co_path)
    meta = _kernel_meta(co, symbol)
    alloc = granted(co.kernel_descriptor(symbol), co.arch)
    return gfx950.occupancy(alloc.resources(_workgroup_size(meta)))


def _workgroup_size(meta: dict[str, Any]) -> int:
    reqd = meta.get(".reqd_workgroup_size")
    if reqd:
        return int(reqd[0]) * int(reqd[1]) * int(reqd[2])
    return int(meta.get(".max_flat_workgroup_size", 1024))


def _kernel_meta(co: CodeObject, symbol: str) -> dict[str, Any]:
    meta = co.metadata() or {}
    for k in meta.get("amdhsa.kernels", []):
        if isinstance(k, dict) and (k.get(".name") == symbol or k.get(".symbol") == f"{symbol}.kd"):
            return k
    return {}


# ---------------------------------------------------------------------------------------------
# The whole step


@dataclass
class FitReport:
    asm_path: Path
    kernels: list[KernelFit]

    def render(self) -> str:
        return "\n".join(k.render() for k in self.kernels)


_MC_REGISTER_ERROR = re.compile(
    r"(?P<where>\S+:\d+:\d+): error: (?P<msg>register index is out of range|"
    r"\S+ register not available on this GPU)\n(?P<line>[^\n]*)"
)


def _assemble_as_written(asm_path: Path, out: Path, toolchain: Toolchain) -> None:
    """Assemble the edit; a register no gfx950 wave has (v256, a256, s102) is refused in one
    line, since no descriptor can grant it."""
    try:
        assemble(asm_path, out, toolchain)
    except ToolchainError as exc:
        m = _MC_REGISTER_ERROR.search(str(exc))
        if m is None:
            raise
        raise ResourceError(
            f"{m.group('where')}: `{m.group('line').strip()}`: {m.group('msg')}: gfx950 gives "
            "a lane "
            f"{gfx950.VGPRS_PER_SIMD_LANE} VGPRs (v0..v255 and a0..a255) and a wave "
            f"{gfx950.MAX_ADDRESSABLE_SGPRS} SGPRs, so no descriptor can hold this edit "
            "(docs/reference/gfx950.md)"
        ) from None


def fit_and_assemble(asm_path: str | Path, out_co: str | Path, toolchain: Toolchain) -> FitReport:
    """Assemble `asm_path` into `out_co` with every kernel's descriptor and metadata entry
    sized to its code (see the module docstring). The .s is not modified."""
    asm_path, out_co = Path(asm_path), Path(out_co)
    text = read_asm(asm_path)
    with tempfile.TemporaryDirectory(prefix="f4pipe-fit-") as tmp:
        first = Path(tmp) / f"{asm_path.stem}.as-written.co"
        _assemble_as_written(asm_path, first, toolchain)
        co = CodeObject.read(first)
        lines = text.splitlines()
        fits = []
        for sym in co.kernel_symbols():
            kd = co.kernel_descriptor(sym.name)
            meta = _kernel_meta(co, sym.name)
            size = _workgroup_size(meta)
            where = f"{asm_path}: {sym.name}"
            use = code_use(co, sym, size, where)
            before = granted(kd, co.arch)
            after = needed(use, before, where)
            fit = KernelFit(sym.name, use, before, after, size)
            fit.changes = set_directives(
                lines,
                sym.name,
                {
                    NEXT_FREE_VGPR: after.next_free_vgpr,
                    ACCUM_OFFSET: after.accum_offset,
                    NEXT_FREE_SGPR: after.next_free_sgpr,
                    str(GROUP_SEGMENT): after.lds_bytes,
                },
            )
            fit.changes += set_metadata(
                lines,
                sym.name,
                {
                    ".vgpr_count": after.next_free_vgpr,
                    ".agpr_count": after.agprs,
                    ".sgpr_count": after.sgpr_count,
                    ".group_segment_fixed_size": after.lds_bytes,
                },
                meta,
            )
            fits.append(fit)
        fitted = Path(tmp) / asm_path.name
        fitted.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""))
        try:
            assemble(fitted, out_co, toolchain)
        except F4PipeError as exc:
            raise ResourceError(f"{asm_path}: the fitted assembly does not build: {exc}") from None
    _check_written(out_co, fits)
    return FitReport(asm_path, fits)


def _check_written(co_path: Path, fits: list[KernelFit]) -> None:
    """Read the written descriptor back through the field table: it must grant what was fitted
    and the metadata must say the same (a mismatch is a bug here, not the user's)."""
    co = CodeObject.read(co_path)
    for fit in fits:
        kd = co.kernel_descriptor(fit.symbol)
        got = granted(kd, co.arch)
        want = fit.after
        ok = (
            got.next_free_vgpr >= want.next_free_vgpr
            and got.accum_offset == want.accum_offset
            and allocated_sgprs(kd) >= want.sgpr_count
            and got.lds_bytes == want.lds_bytes
        )
        meta = _kernel_meta(co, fit.symbol)
        expect = {
            ".vgpr_count": want.next_free_vgpr,
            ".agpr_count": want.agprs,
            ".sgpr_count": want.sgpr_count,
            ".group_segment_fixed_size": want.lds_bytes,
        }
        wrong = {k: meta[k] for k, v in expect.items() if k in meta and meta[k] != v}
        if not ok or wrong:
            raise AssertionError(
                f"{co_path}: {fit.symbol}: fitted {want} but the object grants {got} "
                f"(metadata {wrong})"
            )
