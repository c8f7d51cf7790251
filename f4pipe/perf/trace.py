"""The path one workgroup executes, recorded by the emulator, for the cycle model (cu.py).

The cycle model never guesses trip counts, branches or edge code: it replays what the emulator
executed. One workgroup of a full tile (M = tile_m, N = tile_n) runs at a few K values through
the same host code as `f4pipe gemm` (operands, shuffles, kernarg, grid); an observer on the
executor records, per wave, each instruction executed and the facts timing needs that only the
run knows: the LDS bank cycles of each DS access (from the lanes' real addresses) and the bytes
of each buffer access (active, in-range lanes).

Traces depend only on the executed program and the launch, never on model constants, so they
are cached on disk per (executed program digest, K, split) under the f4pipe cache.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from f4pipe.aiter.manifest import KernelEntry
from f4pipe.arch import isa
from f4pipe.arch.decode import Instruction
from f4pipe.core.errors import EmulatorError
from f4pipe.core.fsio import write_bytes
from f4pipe.emu.ops_memory import buffer_addresses
from f4pipe.perf.costs import COST

#: Bytes the LDS of a CU serves per clock (the timing table's row): a DS access is served in
#: phases of this many bytes, one dword per bank per phase.
LDS_BYTES_PER_PHASE = int(COST["lds_bank_bytes_per_clk"])
LDS_BANKS = LDS_BYTES_PER_PHASE // 4
#: Wave size.
LANES = 64
#: Trace format version: bump when what is recorded changes (old cache entries are ignored).
TRACE_VERSION = 2
#: Which operand a buffer access moves, by the kernarg pointer it falls under: its bytes scale
#: with the rows of A (A, its scales, D) or of B (B, its scales) a partial tile really has.
SIDE_NONE, SIDE_M, SIDE_N = 0, 1, 2
SIDE_OF_POINTER = {
    "ptr_A": SIDE_M,
    "ptr_ScaleA": SIDE_M,
    "ptr_D": SIDE_M,
    "ptr_B": SIDE_N,
    "ptr_ScaleB": SIDE_N,
}


@dataclass(frozen=True)
class WaveTrace:
    """One wave's executed path: pc per step, and per step the LDS bank cycles (DS ops) or
    bytes moved and the operand side (buffer ops); 0 elsewhere."""

    pcs: np.ndarray  # int64 [steps]
    lds_cycles: np.ndarray  # int32 [steps]
    vmem_bytes: np.ndarray  # int32 [steps]
    vmem_side: np.ndarray  # int8 [steps]: SIDE_NONE / SIDE_M / SIDE_N


@dataclass(frozen=True)
class WorkgroupTrace:
    """All waves of one workgroup at one (K, split)."""

    k: int
    log2_k_split: int
    waves: tuple[WaveTrace, ...]


def lds_bank_cycles(byte_addr: np.ndarray, active: np.ndarray, dwords: int) -> int:
    """Clocks the LDS banks need for one wave's DS access: lanes go in phases of 256 bytes
    (64 banks x 4 B); within a phase, distinct dwords that fall in the same bank serialize,
    so a phase costs the largest number of distinct dwords any bank serves (at least 1).
    A broadcast (lanes reading the same dword) costs nothing extra."""
    lanes_per_phase = max(1, LDS_BYTES_PER_PHASE // (4 * dwords))
    words = (byte_addr.astype(np.int64) >> 2)[:, None] + np.arange(dwords)  # [64, dwords]
    cycles = 0
    for start in range(0, LANES, lanes_per_phase):
        phase = words[start : start + lanes_per_phase][active[start : start + lanes_per_phase]]
        if phase.size == 0:
            continue
        distinct = np.unique(phase)
        cycles += int(np.bincount(distinct % LDS_BANKS, minlength=LDS_BANKS).max())
    return cycles


class PathRecorder:
    """Executor observer (Executor.observer) that records the path of every wave of the
    launch's first workgroup (waves_per_group waves of the first batch executed)."""

    def __init__(self, waves_per_group: int = 4) -> None:
        self.waves_per_group = waves_per_group
        self.executor: object | None = None
        self.pcs: dict[int, list[int]] = {}
        self.lds: dict[int, list[int]] = {}
        self.vmem: dict[int, list[int]] = {}
        self.side: dict[int, list[int]] = {}
        self.pointers: list[tuple[int, int]] | None = None  # (address, side), descending

    def __call__(self, ex, inst: Instruction, sel) -> None:
        if self.executor is None:
            self.executor = ex
            self.pointers = kernarg_pointers(ex)
        elif ex is not self.executor:
            return
        waves = np.arange(ex.W)[sel]
        if waves[0] >= self.waves_per_group:
            return
        sel = waves[waves < self.waves_per_group]
        waves = sel
        lds = [0] * len(waves)
        vmem = [0] * len(waves)
        side = [SIDE_NONE] * len(waves)
        if inst.name in isa.DS_DWORDS:
            ndw = isa.DS_DWORDS[inst.name]
            addr = np.asarray(ex.v(inst.srcs[0], sel), dtype=np.int64) + inst.offset
            addr = np.broadcast_to(addr, (len(waves), LANES))
            mask = ex.lane_mask(sel)
            lds = [lds_bank_cycles(addr[i], mask[i], ndw) for i in range(len(waves))]
        elif inst.name in isa.MUBUF_DWORDS:
            ndw = isa.MUBUF_DWORDS[inst.name]
            addr, in_range = buffer_addresses(ex, inst, sel, ndw)
            vmem = [int(x) * 4 for x in in_range.reshape(len(waves), -1).sum(axis=1)]
            side = [self.side_of(int(a.reshape(-1)[0])) for a in addr]
        for i, w in enumerate(waves):
            w = int(w)
            self.pcs.setdefault(w, []).append(inst.pc)
            self.lds.setdefault(w, []).append(lds[i])
            self.vmem.setdefault(w, []).append(vmem[i])
            self.side.setdefault(w, []).append(side[i])

    def side_of(self, address: int) -> int:
        """The side of the buffer an address falls in: the nearest kernarg pointer below it."""
        for base, side in self.pointers or ():
            if address >= base:
                return side
        return SIDE_NONE

    def workgroup(self, k: int, log2_k_split: int) -> WorkgroupTrace:
        waves = tuple(
            WaveTrace(
                pcs=np.asarray(self.pcs[w], dtype=np.int64),
                lds_cycles=np.asarray(self.lds[w], dtype=np.int32),
                vmem_bytes=np.asarray(self.vmem[w], dtype=np.int32),
                vmem_side=np.asarray(self.side[w], dtype=np.int8),
            )
            for w in sorted(self.pcs)
        )
        return WorkgroupTrace(k=k, log2_k_split=log2_k_split, waves=waves)


def record_workgroup(
    entry: KernelEntry, co_path: Path, k: int, log2_k_split: int = 0
) -> WorkgroupTrace:
    """Run one full-tile workgroup of `entry` at K (per split: the launch has K * 2^split)
    on the emulator and return its path. Values are not verified here: the verify stage
    does that; this run exists for its path."""
    from f4pipe.emu.device import EmulatorDevice
    from f4pipe.host.gemm import GemmRequest, run_gemm

    device = EmulatorDevice(check_hazards=False)
    recorder = PathRecorder()
    device.observer = recorder
    try:
        request = GemmRequest(
            m=entry.tile_m,
            n=entry.tile_n,
            k=k << log2_k_split,
            log2_k_split=log2_k_split,
            verify=False,
            check_memory=False,
            # a kernel unsafe at a traced K (noBpreShuffle_256x256 prefetches past B below
            # K=512) runs on padded buffers: the same instructions, and no fault
            edge_policy="pad",
        )
        run_gemm(device, entry, co_path, request)
    finally:
        device.close()
    return recorder.workgroup(k, log2_k_split)


def kernarg_pointers(ex) -> list[tuple[int, int]]:
    """(address, side) of the operand pointers in the launch's kernarg, highest first; read
    at the first step, when the kernarg SGPR pair still holds the kernarg's address."""
    from f4pipe.host.kernarg import KERNARG_SIZE, unpack_kernarg

    sgpr = ex.program.kernarg_sgpr
    if sgpr < 0:
        return []
    base = int(ex.sgpr[sgpr, 0]) | (int(ex.sgpr[sgpr + 1, 0]) << 32)
    try:
        blob = ex.memory.array(base)[:KERNARG_SIZE].tobytes()
    except EmulatorError:  # no f4gemm kernarg (a snippet): every access counts as is
        return []
    if len(blob) < KERNARG_SIZE:
        return []
    values = unpack_kernarg(blob)
    pointers = [(int(values[name]), side) for name, side in SIDE_OF_POINTER.items()]
    return sorted((p for p in pointers if p[0]), reverse=True)


def cache_key(digest: str, k: int, log2_k_split: int) -> str:
    text = f"v{TRACE_VERSION}:{digest}:{k}:{log2_k_split}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def save_trace(trace: WorkgroupTrace, path: Path) -> None:
    arrays: dict[str, np.ndarray] = {"k": np.array([trace.k, trace.log2_k_split])}
    for i, w in enumerate(trace.waves):
        arrays[f"pcs{i}"] = w.pcs
        arrays[f"lds{i}"] = w.lds_cycles
        arrays[f"vmem{i}"] = w.vmem_bytes
        arrays[f"side{i}"] = w.vmem_side
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    write_bytes(path, buf.getvalue())


def load_trace(path: Path) -> WorkgroupTrace:
    with np.load(path) as z:
        k, split = (int(x) for x in z["k"])
        n = sum(1 for name in z.files if name.startswith("pcs"))
        waves = tuple(
            WaveTrace(
                pcs=z[f"pcs{i}"],
                lds_cycles=z[f"lds{i}"],
                vmem_bytes=z[f"vmem{i}"],
                vmem_side=z[f"side{i}"],
            )
            for i in range(n)
        )
    return WorkgroupTrace(k=k, log2_k_split=split, waves=waves)
