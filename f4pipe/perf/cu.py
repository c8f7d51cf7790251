"""Cycles of one workgroup on one CU, replaying the path the emulator executed (trace.py).

The f4gemm kernels run one workgroup per CU and one wave per SIMD, so a CU is four in-order
waves sharing the CU's LDS and its vector-memory path. Per wave:

- **Issue**: one instruction per issue slot (costs.issue_cycles); `s_nop N` fills N+1 wait
  states; nothing issues out of order.
- **MFMA**: the SIMD's matrix pipe is busy passes x mfma_pass_cycles per MFMA; the next MFMA
  waits for it, other instructions do not. A later instruction reading an MFMA's result waits
  for its last pass (register ready times, for MFMA destinations only: every other result is
  ordered by the kernel's own s_waitcnt and s_nop, which the model honours).
- **LDS**: a DS access occupies its SIMD pair's 128 B/clk path for bytes/128 clk and the CU's
  banks for the bank cycles of its real lane addresses; data returns lds_latency later.
- **Vector memory**: buffer loads, LDS DMA, stores and atomics share the CU's path into L1
  (calibrated bytes per clock), in issue order; a load's data returns vmem_latency (calibrated:
  the loaded round trip) after it leaves that path.
- **Counters**: vmcnt and lgkmcnt retire in issue order (SMEM too, conservatively);
  `s_waitcnt` stalls until the counted operations have returned.
- **s_barrier**: a wave waits until all waves of the workgroup arrived, plus barrier_cycles.

Waves advance in time order (the wave that can issue soonest goes next), so shared paths serve
requests in the order they are made. The result is the workgroup's cycles and, per unit, how
long it was busy. Busy clocks do not say which unit limits the time (a unit can be busy most of
it and still wait on another's results), so the model asks instead how much sooner the
workgroup ends with one unit UNIT_SPEEDUP times faster (simulate_workgroup's `faster`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from f4pipe.arch.effects import effects_of
from f4pipe.arch.isa import DS_DWORDS, MUBUF_DWORDS
from f4pipe.codeobj.program import Program
from f4pipe.perf.costs import COST
from f4pipe.perf.trace import WorkgroupTrace

#: Bump when the simulation's rules change (cached cycles of older versions are ignored).
CU_MODEL_VERSION = 1

#: The timing table's rows the trace and the simulation read: simulated cycles are cached
#: under these alone, so a row only the whole-kernel model reads (model.py) re-simulates nothing.
SIMULATED_COSTS = (
    "issue_cycles",
    "wait_state_cycles",
    "mfma_pass_cycles",
    "mfma_writeback_cycles",
    "lds_latency",
    "lds_pair_bytes_per_clk",
    "lds_bank_bytes_per_clk",
    "smem_latency",
    "barrier_cycles",
)

#: How much faster a unit runs when the model asks which unit limits a prediction
#: (predict.unit_savings): never in a predicted time.
UNIT_SPEEDUP = 1.25
#: The units inside a CU the simulation can run faster: the MFMA pipes and the LDS (the
#: vector-memory path's rate and latency are the calibration's, so the caller scales those).
CU_UNITS = ("MFMA", "LDS")

# op kinds
SCALAR, MFMA, VALU, DS, VMEM, SMEM, WAIT, BARRIER, NOP, END = range(10)


@dataclass(frozen=True)
class Op:
    """What the cycle model needs of one instruction (from its Effects)."""

    kind: int
    slots: int  # issue slots the wave spends (s_nop: its wait states)
    busy: int  # MFMA: pipe clocks
    wait_vm: int
    wait_lgkm: int
    reads_acc: tuple[int, ...]  # registers it reads that some MFMA writes
    writes: tuple[int, ...]  # MFMA destination registers
    dwords: int  # DS / buffer dwords per lane


@dataclass(frozen=True)
class WorkgroupCycles:
    """One workgroup's simulated time and what kept each unit busy (clocks)."""

    cycles: float
    mfma_busy: float  # the busiest SIMD's MFMA pipe
    lds_busy: float  # the busier SIMD pair's LDS path, or the bank array if higher
    vmem_busy: float  # the CU's vector-memory path
    vm_wait: float  # clocks the slowest wave stalled on vmcnt
    mfma_count: int
    lgkm_wait: float = 0.0  # the slowest wave's stalls on lgkmcnt (LDS, SMEM)
    barrier_wait: float = 0.0  # ... at s_barrier
    pipe_wait: float = 0.0  # ... for its SIMD's MFMA pipe
    dep_wait: float = 0.0  # ... for an MFMA result
    vmem_bytes: float = 0.0  # bytes all its buffer accesses move (in range)


def decode_ops(program: Program) -> dict[int, Op]:
    """Op per pc of the program."""
    effects = {inst.pc: (inst, effects_of(inst)) for inst in program.instructions()}
    acc = set()
    for _inst, eff in effects.values():
        if "mfma" in eff.tags:
            acc |= eff.writes
    ops: dict[int, Op] = {}
    pass_clk = int(COST["mfma_pass_cycles"])
    for pc, (inst, eff) in effects.items():
        # An MFMA accumulating onto an earlier MFMA's result (SrcC) is ordered by the pipe
        # itself (0 wait states for an exact SrcC overlap: f4pipe.arch.waitstates, rule B3.5).
        roles = [r for r in eff.reads if not ("mfma" in eff.tags and r == "src_c")]
        reads_acc = tuple(sorted(eff.read_regs(*roles) & acc)) if roles else ()
        writes: tuple[int, ...] = ()
        busy = 0
        wait_vm, wait_lgkm = eff.wait if eff.wait is not None else (63, 15)
        dwords = DS_DWORDS.get(inst.name) or MUBUF_DWORDS.get(inst.name) or 0
        if "mfma" in eff.tags:
            kind, busy, writes = MFMA, eff.passes * pass_clk, tuple(sorted(eff.writes))
        elif eff.wait is not None:
            kind = WAIT
        elif "barrier" in eff.tags:
            kind = BARRIER
        elif "endpgm" in eff.tags:
            kind = END
        elif inst.name == "s_nop":
            kind = NOP
        elif eff.unit == "ds":
            kind = DS
        elif eff.unit == "vmem":
            kind = VMEM
        elif eff.unit == "smem":
            kind = SMEM
        elif eff.unit == "valu":
            kind = VALU
        else:
            kind = SCALAR
        ops[pc] = Op(
            kind=kind,
            slots=eff.wait_states if kind == NOP else 1,
            busy=busy,
            wait_vm=wait_vm,
            wait_lgkm=wait_lgkm,
            reads_acc=reads_acc,
            writes=writes,
            dwords=dwords,
        )
    return ops


class _Wave:
    __slots__ = (
        "barrier_wait",
        "dep_wait",
        "end",
        "i",
        "lgkm_wait",
        "mfma_free",
        "pipe_wait",
        "returns",
        "vm_wait",
    )

    def __init__(self) -> None:
        self.i = 0  # index into the trace
        self.mfma_free = 0.0
        self.returns: tuple[list[float], list[float]] = ([], [])  # vm, lgkm (in order)
        self.vm_wait = 0.0
        self.lgkm_wait = 0.0
        self.barrier_wait = 0.0
        self.pipe_wait = 0.0
        self.dep_wait = 0.0
        self.end = 0.0


def wave_vmem_bytes(trace: WorkgroupTrace, m_frac: float = 1.0, n_frac: float = 1.0) -> list:
    """Per wave, the in-range bytes of each of its buffer accesses: the traced bytes, those of
    A and B scaled by the share of the tile's rows the launch really has (out-of-range lanes
    move nothing)."""
    scale = np.array([1.0, m_frac, n_frac])
    return [(w.vmem_bytes * scale[w.vmem_side]).tolist() for w in trace.waves]


def workgroup_vmem_bytes(trace: WorkgroupTrace, m_frac: float = 1.0, n_frac: float = 1.0) -> float:
    """Bytes all the workgroup's buffer accesses move (in range)."""
    return float(sum(sum(b) for b in wave_vmem_bytes(trace, m_frac, n_frac)))


def simulate_workgroup(
    ops: dict[int, Op],
    trace: WorkgroupTrace,
    vmem_latency: float,
    vmem_bpc: float,
    m_frac: float = 1.0,
    n_frac: float = 1.0,
    faster: str | None = None,
) -> WorkgroupCycles:
    """Clocks for the workgroup of `trace` to finish, given the loaded VMEM latency (clk) and
    the CU's vector-memory bytes per clock (both calibrated: costs.Calibration). m_frac /
    n_frac: the share of the tile's rows of A / B the launch really has (M < tile_m): the
    in-range bytes of those operands' accesses scale by it (out-of-range lanes move nothing).
    faster: one of CU_UNITS, run UNIT_SPEEDUP times faster (its busy clocks and latency), to
    find which unit limits the workgroup; None for the workgroup's predicted time."""
    if faster not in (None, *CU_UNITS):
        raise ValueError(f"faster must be one of {CU_UNITS} or None, not {faster!r}")
    mfma_time = 1 / UNIT_SPEEDUP if faster == "MFMA" else 1.0
    lds_time = 1 / UNIT_SPEEDUP if faster == "LDS" else 1.0
    issue = COST["issue_cycles"]
    wait_state = COST["wait_state_cycles"]
    writeback = COST["mfma_writeback_cycles"]
    lds_latency = COST["lds_latency"] * lds_time
    pair_bpc = COST["lds_pair_bytes_per_clk"] / lds_time
    smem_latency = COST["smem_latency"]
    barrier_cycles = COST["barrier_cycles"]

    waves = [_Wave() for _ in trace.waves]
    paths = [[ops[int(pc)] for pc in w.pcs] for w in trace.waves]
    lds_cyc = [w.lds_cycles.tolist() for w in trace.waves]
    vm_bytes = wave_vmem_bytes(trace, m_frac, n_frac)
    ready: list[dict[int, float]] = [{} for _ in waves]
    pair_free = [0.0, 0.0]
    bank_free = 0.0
    vmem_free = 0.0
    mfma_busy = [0.0] * len(waves)
    pair_busy = [0.0, 0.0]
    bank_busy = 0.0
    vmem_busy = 0.0
    mfma_count = 0
    arrived: dict[int, float] = {}  # wave -> arrival time at the pending barrier
    heap = [(0.0, w) for w in range(len(waves))]
    while heap:
        t, w = heapq.heappop(heap)
        wave = waves[w]
        path = paths[w]
        if wave.i >= len(path):
            continue
        op = path[wave.i]
        start = t
        if op.reads_acc:
            r = ready[w]
            for reg in op.reads_acc:
                start = max(start, r.get(reg, 0.0))
            if start > t:  # wait for the result, then compete for shared paths in time order
                wave.dep_wait += start - t
                heapq.heappush(heap, (start, w))
                continue
        kind = op.kind
        next_t = start + issue
        if kind == MFMA:
            wave.pipe_wait += max(0.0, wave.mfma_free - start)
            start = max(start, wave.mfma_free)
            busy = op.busy * mfma_time
            wave.mfma_free = start + busy
            mfma_busy[w] += busy
            mfma_count += 1
            done = start + busy + writeback
            r = ready[w]
            for reg in op.writes:
                r[reg] = done
            next_t = start + issue
        elif kind == WAIT:
            vm, lg = wave.returns
            if len(vm) > op.wait_vm:
                s0 = start
                start = max(start, vm[len(vm) - op.wait_vm - 1])
                wave.vm_wait += start - s0
            if len(lg) > op.wait_lgkm:
                s0 = start
                start = max(start, lg[len(lg) - op.wait_lgkm - 1])
                wave.lgkm_wait += start - s0
            next_t = start + issue
        elif kind == NOP:
            next_t = start + op.slots * wait_state
        elif kind == DS:
            pair = w // 2 % 2
            nbytes = 64 * op.dwords * 4
            s = max(start, pair_free[pair])
            pair_free[pair] = s + nbytes / pair_bpc
            pair_busy[pair] += nbytes / pair_bpc
            bank_cycles = lds_cyc[w][wave.i] * lds_time
            bank_free = max(bank_free, s) + bank_cycles
            bank_busy += bank_cycles
            ret = max(pair_free[pair], bank_free) + lds_latency
            _push_return(wave.returns[1], ret)
        elif kind == VMEM:
            nbytes = vm_bytes[w][wave.i]
            s = max(start, vmem_free)
            vmem_free = s + nbytes / vmem_bpc
            vmem_busy += nbytes / vmem_bpc
            _push_return(wave.returns[0], vmem_free + vmem_latency)
        elif kind == SMEM:
            _push_return(wave.returns[1], start + smem_latency)
        elif kind == BARRIER:
            arrived[w] = start
            wave.i += 1
            _release_barrier(waves, paths, arrived, heap, barrier_cycles)
            continue
        elif kind == END:
            vm, lg = wave.returns
            wave.end = max([start, wave.mfma_free + writeback, *vm[-1:], *lg[-1:]])
            wave.i = len(path)
            _release_barrier(waves, paths, arrived, heap, barrier_cycles)
            continue
        wave.i += 1
        heapq.heappush(heap, (next_t, w))
    cycles = max(w.end for w in waves)
    return WorkgroupCycles(
        cycles=cycles,
        mfma_busy=max(mfma_busy),
        lds_busy=max(max(pair_busy), bank_busy),
        vmem_busy=vmem_busy,
        vm_wait=max(w.vm_wait for w in waves),
        mfma_count=mfma_count,
        lgkm_wait=max(w.lgkm_wait for w in waves),
        barrier_wait=max(w.barrier_wait for w in waves),
        pipe_wait=max(w.pipe_wait for w in waves),
        dep_wait=max(w.dep_wait for w in waves),
        vmem_bytes=float(sum(sum(b) for b in vm_bytes)),
    )


def _release_barrier(waves, paths, arrived, heap, barrier_cycles: float) -> None:
    """Release the waves waiting at s_barrier once every wave still running has arrived
    (a wave that ended no longer holds the others)."""
    if not arrived:
        return
    live = [v for v in range(len(waves)) if waves[v].i < len(paths[v]) or v in arrived]
    if len(arrived) < len(live):
        return
    release = max(arrived.values()) + barrier_cycles
    for v, when in arrived.items():
        waves[v].barrier_wait += release - when
        heapq.heappush(heap, (release, v))
    arrived.clear()


def _push_return(queue: list[float], when: float) -> None:
    """Counters retire in issue order: an op counts as returned no earlier than the one
    before it."""
    queue.append(max(when, queue[-1]) if queue else when)
