"""The LLVM oracle's counter model (research/f4research/oracle.py): which registers, and which
LDS bytes, each `s_waitcnt` of LLVM's output protects, decided from LLVM's assembly text alone
and never from f4pipe's analysis, so that the two can be held against each other."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class AsmInstruction:
    """One instruction as LLVM printed it, and where it sits in its kernel's code."""

    text: str
    pc: int
    size: int

    @property
    def mnemonic(self) -> str:
        return self.text.split()[0]


# --- the counter model: which registers a wait protects, from LLVM's text alone --------------

#: Pseudo-registers: LDS words an LDS DMA writes (read by this wave's DS loads and, through
#: other waves, after a barrier) and LDS words a DS store writes (read by other waves after a
#: barrier). Which words is data; the model takes every DS load and barrier as a reader.
LDS_DMA, LDS_STORE = "lds-dma", "lds-store"
_REGISTER = re.compile(r"\b([vas])(\d+)\b|\b([vas])\[(\d+):(\d+)\]|\b(m0|vcc|exec)\b")


def registers(operands: str) -> frozenset[str]:
    """Register names in an operand list: v[2:5] -> v2..v5; vcc and exec as one name."""
    out = set()
    for m in _REGISTER.finditer(operands):
        if m.group(1):
            out.add(f"{m.group(1)}{m.group(2)}")
        elif m.group(3):
            out.update(f"{m.group(3)}{i}" for i in range(int(m.group(4)), int(m.group(5)) + 1))
        else:
            out.add(m.group(6))
    return frozenset(out)


@dataclass(frozen=True)
class MemoryOp:
    """What one instruction does to the counters: the counter ("vm", "ds", "smem" or ""),
    the registers its data lands in, and the registers it reads and writes at issue."""

    counter: str
    dest: frozenset[str]
    reads: frozenset[str]
    writes: frozenset[str]


def memory_op(text: str) -> MemoryOp:
    mnemonic, _, rest = text.partition(" ")
    operands = [o.strip() for o in rest.split(",")]
    first = registers(operands[0]) if operands else frozenset()
    others = registers(",".join(operands[1:]))
    words = set(rest.replace(",", " ").split())
    if mnemonic.startswith("buffer_load") and "lds" in words:
        return MemoryOp("vm", frozenset({LDS_DMA}), first | others, frozenset({LDS_DMA}))
    if mnemonic.startswith("buffer_load"):
        return MemoryOp("vm", first, others, first)
    if mnemonic.startswith(("buffer_store", "buffer_atomic")):
        return MemoryOp("vm", frozenset(), first | others, frozenset())
    if mnemonic.startswith("ds_read"):
        return MemoryOp("ds", first, others | {LDS_DMA}, first)
    if mnemonic.startswith("ds_write"):
        reads = first | others | {LDS_DMA}
        return MemoryOp("ds", frozenset({LDS_STORE}), reads, frozenset({LDS_STORE}))
    if mnemonic.startswith("s_load"):
        return MemoryOp("smem", first, others, first)
    if mnemonic == "s_barrier":
        return MemoryOp("", frozenset(), frozenset({LDS_DMA, LDS_STORE}), frozenset())
    return MemoryOp("", frozenset(), first | others, first | others)


_COUNT = re.compile(r"(vmcnt|lgkmcnt|expcnt)\((\d+)\)")
NO_WAIT = (63, 15)


def waitcnt(text: str) -> tuple[int, int] | None:
    """(vmcnt, lgkmcnt) of an s_waitcnt line (63 / 15: no wait on that counter)."""
    mnemonic, _, rest = text.partition(" ")
    if mnemonic != "s_waitcnt":
        return None
    counts = {"vmcnt": NO_WAIT[0], "lgkmcnt": NO_WAIT[1]}
    if rest.strip().isdigit() or rest.strip().startswith("0x"):
        simm = int(rest.strip(), 0)
        return (simm & 0xF) | ((simm >> 14) & 3) << 4, (simm >> 8) & 0xF
    for name, value in _COUNT.findall(rest):
        counts[name] = int(value)
    return counts["vmcnt"], counts["lgkmcnt"]


def exposures(
    asm: tuple[AsmInstruction, ...], waits: dict[int, tuple[int, int]]
) -> set[tuple[int, int]]:
    """(load index, consumer index) for every instruction that reads, or overwrites, what an
    op may not yet have delivered, with the s_waitcnt at each index in `waits` (the others as
    written). Buffer ops retire in order on vmcnt; DS ops in order among themselves; scalar
    loads in any order, so lgkmcnt(N) retires a DS op only when N younger DS ops are
    outstanding, and a scalar load only at lgkmcnt(0)."""
    vm: list[tuple[int, MemoryOp]] = []
    lgkm: list[tuple[int, MemoryOp]] = []
    found = set()
    spans = lds_spans(asm)
    for i, ins in enumerate(asm):
        limits = waits.get(i) or waitcnt(ins.text)
        if limits is not None:
            vm = vm[max(0, len(vm) - limits[0]) :]
            lgkm = _retire_lgkm(lgkm, limits[1])
            continue
        op = _with_dma_bytes(memory_op(ins.text), asm, i, spans)
        for j, pending in (*vm, *lgkm):
            # a younger load on the same in-order counter lands after the older one
            ordered = op.counter == pending.counter and op.counter in ("vm", "ds")
            touched = op.reads | (op.writes - op.dest if ordered else op.writes)
            if pending.dest & touched:
                found.add((j, i))
        if ins.mnemonic == "s_endpgm":
            break
        if op.counter == "vm":
            vm.append((i, op))
        elif op.counter:
            lgkm.append((i, op))
    return found


def _dma(j: int) -> str:
    """The pseudo-register of the LDS bytes the LDS DMA at index j writes."""
    return f"{LDS_DMA}@{j}"


def _with_dma_bytes(
    op: MemoryOp, asm: tuple[AsmInstruction, ...], i: int, spans: dict[int, Span]
) -> MemoryOp:
    """The op with LDS DMA named per instruction: a DMA writes its own pseudo-register; a DS
    access reads those of the DMAs whose bytes it may touch; a barrier those whose bytes a DS
    access after it (before the next barrier) may touch in another wave."""
    if op.dest == {LDS_DMA}:
        return MemoryOp(op.counter, frozenset({_dma(i)}), op.reads - {LDS_DMA}, frozenset())
    if LDS_DMA not in op.reads:
        return op
    dmas = [j for j in range(i) if j in spans and _is_dma(asm[j].text)]
    if asm[i].mnemonic == "s_barrier":
        after = []
        for k in range(i + 1, len(asm)):
            if asm[k].mnemonic in ("s_barrier", "s_endpgm"):
                break
            if asm[k].mnemonic.startswith("ds_"):
                after.append(k)
        named = {_dma(j) for j in dmas if any(_overlap(spans[j], spans[k]) for k in after)}
    else:
        named = {_dma(j) for j in dmas if _overlap(spans[j], spans[i])}
    return MemoryOp(op.counter, op.dest, (op.reads - {LDS_DMA}) | named, op.writes)


# --- LDS byte spans, from LLVM's text ------------------------------------------------------

#: [lo, hi) bytes an instruction may touch, None when the text does not bound them.
Span = tuple[int, int] | None
_NUMBER = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")


def _is_dma(text: str) -> bool:
    return text.startswith("buffer_load") and " lds" in text


def _number(text: str) -> int | None:
    return int(text, 0) if _NUMBER.match(text) else None


def _overlap(a: Span, b: Span) -> bool:
    return a is None or b is None or (a[0] < b[1] and b[0] < a[1])


def lds_spans(asm: tuple[AsmInstruction, ...]) -> dict[int, Span]:
    """The LDS bytes of every LDS DMA and DS access, from a straight-line reading of the text:
    M0 from `s_mov_b32 m0, K` / `s_movk_i32 m0, K` (a wave64 DMA writes 64 lanes x its
    dwords from M0 on), a DS address from `v_and_b32 vD, K, vS` (0..K), `v_mov_b32 vD, K`,
    `v_add_u32 vD, K, vS` and `v_lshlrev_b32 vD, K, vS`; anything else unbounded."""
    m0: int | None = None
    values: dict[str, tuple[int, int]] = {}
    out: dict[int, Span] = {}
    for i, ins in enumerate(asm):
        mnemonic, _, rest = ins.text.partition(" ")
        operands = [o.strip() for o in rest.split(",")]
        offset = re.search(r"offset:(\d+)", rest)
        extra = int(offset.group(1)) if offset else 0
        if _is_dma(ins.text):
            words = {"buffer_load_dword": 1, "buffer_load_dwordx2": 2}.get(mnemonic, 4)
            start = None if m0 is None else (m0 & 0x3FFFC) + extra
            out[i] = None if start is None else (start, start + 64 * 4 * words)
        elif mnemonic.startswith("ds_"):
            size = {"b32": 4, "b64": 8, "b128": 16}[mnemonic.rsplit("_", 1)[1]]
            addr = operands[0] if mnemonic.startswith("ds_write") else operands[1]
            bounds = values.get(addr.split()[0])
            out[i] = None if bounds is None else (bounds[0] + extra, bounds[1] + extra + size)
        written = registers(rest if mnemonic.startswith("v_permlane") else operands[0])
        if "m0" in written:
            m0 = _number(operands[1]) if mnemonic in ("s_mov_b32", "s_movk_i32") else None
        value = _vgpr_value(mnemonic, operands, values)
        for reg in written:
            values.pop(reg, None)
        if value is not None and len(written) == 1:
            values[operands[0]] = value
    return out


def _vgpr_value(
    mnemonic: str, operands: list[str], values: dict[str, tuple[int, int]]
) -> tuple[int, int] | None:
    base = mnemonic.split("_e32")[0].split("_e64")[0]
    k = _number(operands[1]) if len(operands) > 1 else None
    src = values.get(operands[2]) if len(operands) > 2 else None
    if base == "v_mov_b32" and k is not None:
        return (k, k)
    if k is None or k < 0:
        return None
    if base == "v_and_b32":
        return (0, k)
    if base == "v_add_u32" and src is not None:
        return (src[0] + k, src[1] + k)
    if base == "v_lshlrev_b32" and src is not None and k < 16:
        return (src[0] << k, src[1] << k)
    return None


def _retire_lgkm(lgkm: list[tuple[int, MemoryOp]], limit: int) -> list[tuple[int, MemoryOp]]:
    if limit == 0:
        return []
    ds_younger = 0
    kept = []
    for j, op in reversed(lgkm):
        if op.counter == "smem":
            kept.append((j, op))
            continue
        if ds_younger < limit:
            kept.append((j, op))
        ds_younger += 1
    return kept[::-1]
