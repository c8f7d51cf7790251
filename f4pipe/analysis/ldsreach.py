"""Which LDS bytes a kernel's DS instructions and LDS DMA can reach, when every address is
static: a flow-insensitive interval analysis over the kernel's moves, shifts, adds, ands and
multiplies (intervals of unsigned 32-bit values, joined over every write), with the work-item
id bounded by the workgroup size. `--fit-resources` (f4pipe.edits.resources) sizes an edited
kernel's LDS allocation with it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from f4pipe.arch import gfx950, isa
from f4pipe.arch.decode import Instruction, Operand
from f4pipe.arch.effects import SGPR_BASE, Effects, effects_of

Interval = tuple[int, int]  # [lo, hi]


TOP: Interval = (0, 0xFFFFFFFF)


_WIDEN_AFTER = 16  # rounds before a still-growing register is taken to be anything


def _value(values: Mapping[tuple[str, int], Interval], op: Operand) -> Interval | None:
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


def launch_values(
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
    plans = [write_plan(inst) for inst in insts]
    for unknown in (None, TOP):
        for rounds in range(_WIDEN_AFTER + 1):
            changed = False
            for plan in plans:
                for key, value in planned_writes(plan, values, unknown):
                    new = TOP if rounds == _WIDEN_AFTER else _join(values.get(key), value)
                    if values.get(key) != new:
                        values[key] = new
                        changed = True
            if not changed:
                break
    return values


@dataclass(frozen=True)
class WritePlan:
    """What an instruction writes, decided once per instruction: the registers (keys) and,
    for a single-register ALU result (`simple`), the sources its interval is computed from."""

    name: str
    keys: tuple[tuple[str, int], ...]
    simple: bool
    srcs: tuple[Operand, ...]


def write_plan(inst: Instruction, e: Effects | None = None) -> WritePlan:
    """The WritePlan of one instruction (loads, pairs, carries and lane swaps: not simple);
    `e`: its effects when the caller has them."""
    e = effects_of(inst) if e is None else e
    keys = []
    for r in e.writes | e.load_dest:
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
    srcs = tuple(inst.srcs)
    if inst.fmt == "SOPK":
        srcs = (Operand("imm", 0, value=inst.imm & 0xFFFFFFFF),)
    return WritePlan(inst.name, tuple(keys), simple, srcs)


def planned_writes(
    plan: WritePlan, values: Mapping[tuple[str, int], Interval], unknown: Interval | None
) -> list[tuple[tuple[str, int], Interval]]:
    """What the instruction of `plan` writes: (register, interval) for a single-register ALU
    result, anything for every other write."""
    if not plan.simple:
        return [(k, TOP) for k in plan.keys]
    args = [_value(values, op) or unknown for op in plan.srcs]
    if any(a is None for a in args):
        return []  # a source not yet written: nothing known to add this round
    return [(plan.keys[0], _result(plan.name, args))]  # type: ignore[arg-type]


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
