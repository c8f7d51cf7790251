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
    launch = _launch_values(bits, launch_sgprs, workgroup_size)
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
# Static LDS addresses: intervals of unsigned 32-bit values, joined over every write

Interval = tuple[int, int]  # [lo, hi]
TOP: Interval = (0, 0xFFFFFFFF)
_WIDEN_AFTER = 16  # rounds before a still-growing register is taken to be anything


def _value(values: dict[tuple[str, int], Interval], op: Operand) -> Interval | None:
    """An operand's interval; None for a register never written (read as anything)."""
    if op.kind == "imm":
        v = op.value & 0xFFFFFFFF
        return (v, v)
    if op.count != 1:
        return TOP
    return values.get((op.kind, op.index))


def _shl(a: Interval, b: Interval) -> Interval:
    return (a[0] << b[0], a[1] << b[1]) if b[1] < 32 else TOP


def _shr(a: Interval, b: Interval) -> Interval:
    return (a[0] >> b[1], a[1] >> b[0]) if b[1] < 32 else TOP


def _result(name: str, args: list[Interval]) -> Interval:
    """The interval of an ALU result from its sources' intervals (TOP when it may wrap)."""
    if name in ("v_mov_b32", "s_mov_b32", "s_movk_i32"):
        lo, hi = args[0]
    elif name in ("v_lshlrev_b32",):
        lo, hi = _shl(args[1], args[0])
    elif name == "s_lshl_b32":
        lo, hi = _shl(args[0], args[1])
    elif name == "v_lshrrev_b32":
        lo, hi = _shr(args[1], args[0])
    elif name == "s_lshr_b32":
        lo, hi = _shr(args[0], args[1])
    elif name in ("v_add_u32", "s_add_u32", "s_add_i32"):
        lo, hi = args[0][0] + args[1][0], args[0][1] + args[1][1]
    elif name in ("v_and_b32", "s_and_b32"):
        lo, hi = 0, min(args[0][1], args[1][1])
    elif name in ("v_or_b32", "s_or_b32"):
        hi = max(args[0][1], args[1][1])
        lo, hi = max(args[0][0], args[1][0]), (1 << hi.bit_length()) - 1
    elif name in ("v_mul_lo_u32", "s_mul_i32") or (
        name == "v_mul_i32_i24" and max(args[0][1], args[1][1]) < 1 << 23
    ):
        lo, hi = args[0][0] * args[1][0], args[0][1] * args[1][1]
    else:
        return TOP
    return (lo, hi) if hi <= 0xFFFFFFFF else TOP


def _launch_values(
    bits: dict[str, int], launch_sgprs: int, workgroup_size: int
) -> dict[tuple[str, int], Interval]:
    """What the hardware writes before the first instruction: v0 the work-item id (x alone
    when y and z are not enabled), the user and system SGPRs (pointers and ids: anything)."""
    out: dict[tuple[str, int], Interval] = {}
    out[("v", 0)] = (0, workgroup_size - 1) if bits["enable_vgpr_workitem_id"] == 0 else TOP
    for s in range(launch_sgprs):
        out[("s", s)] = TOP
    return out


def _join(a: Interval | None, b: Interval) -> Interval:
    return b if a is None else (min(a[0], b[0]), max(a[1], b[1]))


def register_intervals(
    insts: list[Instruction], launch: dict[tuple[str, int], Interval]
) -> dict[tuple[str, int], Interval]:
    """Every register's possible values over the whole kernel (flow-insensitive: the join of
    its launch value and every value any instruction writes), iterated to a fixed point.

    The first fixed point takes nothing from a source that has no value yet; what is still
    unknown after it (a register read before anything writes it) is garbage, so a second
    fixed point reads such sources as anything."""
    values = dict(launch)
    for unknown in (None, TOP):
        for rounds in range(_WIDEN_AFTER + 1):
            changed = False
            for inst in insts:
                for key, value in _writes(inst, values, unknown):
                    new = TOP if rounds == _WIDEN_AFTER else _join(values.get(key), value)
                    if values.get(key) != new:
                        values[key] = new
                        changed = True
            if not changed:
                break
    return values


def _writes(
    inst: Instruction, values: dict[tuple[str, int], Interval], unknown: Interval | None
) -> list[tuple[tuple[str, int], Interval]]:
    """What one instruction writes: (register, interval) for a single-register ALU result,
    anything for every other write (loads, pairs, carries, lane swaps)."""
    e = effects_of(inst)
    written = e.writes | e.load_dest
    keys = []
    for r in written:
        if r < isa.AGPR_BASE:
            keys.append(("v", r))
        elif r >= SGPR_BASE:
            keys.append(("s", r - SGPR_BASE))
    dst = inst.dst
    simple = (
        len(keys) == 1
        and dst is not None
        and dst.count == 1
        and not e.load_dest
        and inst.name != "s_set_gpr_idx_on"
    )
    if not simple:
        return [(k, TOP) for k in keys]
    srcs = [*inst.srcs]
    if inst.fmt == "SOPK":
        srcs = [Operand("imm", 0, value=inst.imm & 0xFFFFFFFF)]
    args = [_value(values, op) or unknown for op in srcs]
    if any(a is None for a in args):
        return []  # a source not yet written: nothing known to add this round
    return [(keys[0], _result(inst.name, args))]  # type: ignore[arg-type]


def lds_reach(
    insts: list[Instruction], launch: dict[tuple[str, int], Interval], workgroup_size: int
) -> tuple[int | None, int]:
    """(highest LDS byte + 1 any access reaches or None when one is not static, what the
    immediate offsets alone reach)."""
    accesses = [i for i in insts if i.fmt == "DS" or (i.fmt == "MUBUF" and i.lds)]
    if not accesses:
        return 0, 0
    if any(i.name == "s_set_gpr_idx_on" for i in insts):
        values: dict[tuple[str, int], Interval] = {}
    else:
        values = register_intervals(insts, launch)
    lanes = min(workgroup_size, gfx950.WAVE_SIZE)
    end: int | None = 0
    floor = 0
    for inst in accesses:
        if inst.fmt == "DS":
            size = 4 * isa.DS_DWORDS[inst.name]
            base = values.get(("v", inst.srcs[0].index))
            floor = max(floor, inst.offset + size)
            reach = None if base is None or base == TOP else base[1] + inst.offset + size
        else:  # LDS DMA: M0[17:2] * 4 + offset + lane * 4 * dwords
            size = 4 * isa.MUBUF_DWORDS[inst.name]
            m0 = values.get(("s", isa.M0))
            floor = max(floor, inst.offset + size * lanes)
            static = m0 is not None and m0[1] <= 0x3FFFF  # M0[17:2] holds it whole
            reach = (m0[1] & 0x3FFFC) + inst.offset + size * lanes if static else None
        end = None if end is None or reach is None else max(end, reach)
    return end, floor


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
