"""LDS (DS) and buffer (MUBUF) instructions, including buffer loads into LDS and bf16 atomics.

Buffer addressing and range checks follow the CDNA4 manual §9.1.5 (raw buffers: a dword is out
of range when vgpr offset + inst offset + 4*i >= num_records; structured: index >= num_records),
out-of-range reads give 0, writes and atomics are dropped. LDS DMA (`... lds`) writes the loaded
dwords to LDS at M0[17:2]*4 + inst_offset + lane*4*dwords (§9.1.9, §10.3). DS addresses are
never clamped by M0 on gfx9+; an LDS access that is misaligned or leaves the workgroup's
allocation raises EmulatorError.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from f4pipe.arch import isa
from f4pipe.arch.decode import Instruction
from f4pipe.core.errors import EmulatorError
from f4pipe.core.numerics import BF16_ROUNDINGS, float_to_bf16_bits, round_to_bf16

if TYPE_CHECKING:
    from f4pipe.emu.state import Sel, WaveState

U32 = np.uint32


# --- LDS -----------------------------------------------------------------------------------


def _lds_index(
    ex: WaveState, inst: Instruction, sel: Sel, byte_addr: np.ndarray, ndw: int
) -> np.ndarray:
    """Word indices [n, 64, ndw] for LDS byte addresses [n, 64], checked for the active lanes."""
    mask = ex.lane_mask(sel)
    size = ex.lds.shape[1] * 4
    bad_align = ((byte_addr & 3) != 0) & mask
    if bad_align.any():
        a = int(byte_addr[bad_align][0])
        raise ex.error(inst, sel, f"misaligned LDS address {a:#x}")
    bad_range = ((byte_addr + 4 * ndw) > size) & mask
    if bad_range.any():
        a = int(byte_addr[bad_range][0])
        raise ex.error(
            inst, sel, f"LDS access at {a:#x}+{4 * ndw} beyond the {size}-byte allocation"
        )
    word = np.where(mask, byte_addr >> 2, 0)
    return word[..., None] + np.arange(ndw, dtype=np.int64)


def _wg_rows(ex: WaveState, sel: Sel) -> np.ndarray:
    return ex.wg[sel][:, None, None]


def _lds_flat(ex: WaveState, sel: Sel, widx: np.ndarray) -> np.ndarray:
    """Word indices [n, 64, ndw] into the flat view of ex.lds (one gather, not two)."""
    return _wg_rows(ex, sel) * ex.lds.shape[1] + widx


def _lds_store(ex: WaveState, sel: Sel, widx: np.ndarray, data: np.ndarray) -> None:
    """Write data [n, 64, ndw] to the words widx of each selected wave's LDS, active lanes
    only (in C order: for a word two lanes write, the higher lane's value stays)."""
    if ex.exec_full:  # every lane active: one scatter, no masks
        ex.lds.reshape(-1)[_lds_flat(ex, sel, widx)] = data
        return
    rows = np.broadcast_to(_wg_rows(ex, sel), widx.shape)
    mask = np.broadcast_to(ex.lane_mask(sel)[..., None], widx.shape)
    ex.lds[rows[mask], widx[mask]] = data[mask]


def ds_read(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    ndw = isa.DS_DWORDS[inst.name]
    addr = ex.v(inst.srcs[0], sel).astype(np.int64) + inst.offset
    widx = _lds_index(ex, inst, sel, addr, ndw)
    if ex.timing is not None:
        ex.timing.lds_read(ex, inst, sel, widx, ex.lane_mask(sel))
    data = ex.lds.reshape(-1)[_lds_flat(ex, sel, widx)]  # [n, 64, ndw]
    base = ex.reg_index(inst.dst)
    for i in range(ndw):
        ex.set_v(base + i, sel, data[..., i])


def ds_write(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    ndw = isa.DS_DWORDS[inst.name]
    addr = ex.v(inst.srcs[0], sel).astype(np.int64) + inst.offset
    widx = _lds_index(ex, inst, sel, addr, ndw)
    if ex.timing is not None:
        ex.timing.lds_write(ex, inst, sel, widx, ex.lane_mask(sel), dma=False)
    data = np.stack(list(ex.vregs(inst.srcs[1], sel)), axis=-1)  # [n, 64, ndw]
    _lds_store(ex, sel, widx, data)


# --- buffers -------------------------------------------------------------------------------


def buffer_addresses(ex: WaveState, inst: Instruction, sel: Sel, ndw: int):
    """(addresses int64 [n, 64, ndw], in-range-and-active bool [n, 64, ndw]); either may be
    a read-only broadcast view."""
    vaddr, _, srsrc, soffset = inst.srcs
    rs = ex.sgpr[srsrc.index : srsrc.index + 4, sel].astype(np.int64)  # [4, n]
    base = rs[0] | ((rs[1] & 0xFFFF) << 32)
    stride = (rs[1] >> 16) & 0x3FFF
    num_records = rs[2]
    if ((rs[1] >> 31) & 1).any():
        raise ex.error(inst, sel, "swizzled buffer resources are not modelled")
    if ((rs[3] >> 23) & 1).any():
        raise ex.error(inst, sel, "buffer resources with ADD_TID_ENABLE are not modelled")
    soff = np.asarray(ex.s(soffset, sel), dtype=np.int64)
    shape = (base.shape[0], 64, ndw)
    comp = 4 * np.arange(ndw, dtype=np.int64)
    # offset [n, 64, 1] or a scalar: the VGPR offset (offen) plus the instruction's
    offset = inst.offset
    if inst.offen:
        voff = ex.vgpr[vaddr.index + 1, sel] if inst.idxen else ex.v(vaddr, sel)
        offset = (voff.astype(np.int64) + inst.offset)[..., None]
    rel = offset + comp  # [n, 64, ndw], or [ndw] without offen: the range check's offset
    addr = rel + (base + soff)[:, None, None]
    if inst.idxen:
        if (stride == 0).any():
            raise ex.error(inst, sel, "idxen with a zero-stride buffer resource is not modelled")
        index = ex.v(vaddr, sel).astype(np.int64)[..., None]  # [n, 64, 1]
        addr = addr + index * stride[:, None, None]  # [n, 64, ndw] even without offen
        in_range = index < num_records[:, None, None]
    else:
        in_range = rel < num_records[:, None, None]
    ok = in_range & ex.lane_mask(sel)[..., None]
    return _full(addr, shape), _full(ok, shape)


def _full(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`array` broadcast to `shape` (a read-only view), or itself when it has that shape."""
    return array if array.shape == shape else np.broadcast_to(array, shape)


def buffer_load(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    ndw = isa.MUBUF_DWORDS[inst.name]
    addr, ok = buffer_addresses(ex, inst, sel, ndw)
    what = f"{inst.name} (global memory)"
    if ok.all():  # every lane active and in range: no masking on either side
        data = ex.memory.read_dwords(addr, what, owners=ex.access_owners(sel, addr.shape))
    else:
        data = np.zeros(addr.shape, dtype=U32)
        data[ok] = ex.memory.read_dwords(
            addr[ok], what, owners=ex.access_owners(sel, addr.shape, ok)
        )
    if inst.lds:
        _load_to_lds(ex, inst, sel, data, ndw)
        return
    base = ex.reg_index(inst.srcs[1])
    for i in range(ndw):
        ex.set_v(base + i, sel, data[..., i])


def _load_to_lds(ex: WaveState, inst: Instruction, sel: Sel, data: np.ndarray, ndw: int) -> None:
    if ndw == 2:
        raise ex.error(inst, sel, "buffer_load_dwordx2 ... lds does not exist")
    m0 = ex.sgpr[isa.M0, sel].astype(np.int64)
    lds_base = (m0 & 0x3FFFC) + inst.offset  # M0[17:2] * 4 + inst_offset
    lane = np.arange(64, dtype=np.int64)
    addr = lds_base[:, None] + lane * 4 * ndw  # [n, 64]
    widx = _lds_index(ex, inst, sel, addr, ndw)
    if ex.timing is not None:
        ex.timing.lds_write(ex, inst, sel, widx, ex.lane_mask(sel), dma=True)
    _lds_store(ex, sel, widx, data)


def buffer_store(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    if inst.lds:
        raise ex.error(inst, sel, "buffer stores from LDS are not modelled")
    ndw = isa.MUBUF_DWORDS[inst.name]
    addr, ok = buffer_addresses(ex, inst, sel, ndw)
    data = np.stack(list(ex.vregs(inst.srcs[1], sel)), axis=-1)
    writers = np.broadcast_to(ex.wg_writer[ex.wg[sel]][:, None, None], addr.shape)
    ex.memory.write_dwords(
        addr[ok],
        data[ok],
        f"{inst.name} (global memory)",
        writers=writers[ok],
        site=f"{inst.name} pc {inst.pc:#x}",
        owners=ex.access_owners(sel, addr.shape, ok),
    )


#: The bf16 atomic's rounding: an assumption (docs/reference/gfx950.md, "The bf16 atomic's
#: rounding"), "rne" unless this environment variable says "rtz".
ATOMIC_ROUNDING_ENV = "F4PIPE_BF16_ATOMIC_ROUNDING"
DEFAULT_ATOMIC_ROUNDING = "rne"


def atomic_rounding() -> str:
    """The bf16 atomic's rounding this process assumes ($F4PIPE_BF16_ATOMIC_ROUNDING)."""
    mode = os.environ.get(ATOMIC_ROUNDING_ENV, "") or DEFAULT_ATOMIC_ROUNDING
    if mode not in BF16_ROUNDINGS:
        raise EmulatorError(f"{ATOMIC_ROUNDING_ENV}={mode!r}: one of {', '.join(BF16_ROUNDINGS)}")
    return mode


def buffer_atomic_pk_add_bf16(ex: WaveState, inst: Instruction, sel: Sel) -> None:
    """Add two packed bf16 values; each half rounds on its own, to nearest even unless
    F4PIPE_BF16_ATOMIC_ROUNDING=rtz (toward zero). No return.

    A bf16 + bf16 sum computed in f32 and rounded once to bf16 equals the correctly rounded
    sum (when exponents differ by more than 16 the smaller term stays far below half a bf16
    ulp). Lanes hitting the same dword are applied in lane order, one after another."""
    if inst.glc or inst.lds:
        raise ex.error(
            inst, sel, "returning / LDS forms of buffer_atomic_pk_add_bf16 are not modelled"
        )
    addr, ok = buffer_addresses(ex, inst, sel, 1)
    data = ex.vregs(inst.srcs[1], sel)[0][..., None]  # [n, 64, 1]
    a, d = addr[ok], data[ok]
    if a.size == 0:
        return
    order = np.argsort(a, kind="stable")
    a, d = a[order], d[order]
    dup = np.zeros(a.shape, dtype=bool)
    dup[1:] = a[1:] == a[:-1]
    rounds = 0
    mode = atomic_rounding()
    while a.size:
        first = ~dup
        _apply_pk_add(ex, inst, a[first], d[first], mode)
        a, d = a[dup], d[dup]
        dup = np.zeros(a.shape, dtype=bool)
        dup[1:] = a[1:] == a[:-1]
        rounds += 1
        if rounds > 64 * ex.W:
            raise EmulatorError("atomic duplicate resolution did not terminate")


def _bf16_pair_to_f32(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lo = (words << U32(16)).view(np.float32)
    hi = (words & U32(0xFFFF0000)).view(np.float32)
    return lo, hi


def _apply_pk_add(
    ex: WaveState, inst: Instruction, addr: np.ndarray, data: np.ndarray, mode: str
) -> None:
    for group in ex.memory.dword_views(addr, f"{inst.name} (global memory)"):
        words, idx = group.words, group.index
        old_lo, old_hi = _bf16_pair_to_f32(words[idx])
        add_lo, add_hi = _bf16_pair_to_f32(group.pick(data).astype(U32))
        with np.errstate(all="ignore"):
            if mode == "rne":
                lo = float_to_bf16_bits(old_lo + add_lo).astype(U32)
                hi = float_to_bf16_bits(old_hi + add_hi).astype(U32)
            else:  # the sum exact in float64, then rounded once toward zero
                lo = _bf16_bits(round_to_bf16(old_lo.astype(np.float64) + add_lo, mode))
                hi = _bf16_bits(round_to_bf16(old_hi.astype(np.float64) + add_hi, mode))
        words[idx] = lo | (hi << U32(16))


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """bf16 patterns of values already representable in bf16 (so the conversion is exact)."""
    return float_to_bf16_bits(values.astype(np.float32)).astype(U32)
