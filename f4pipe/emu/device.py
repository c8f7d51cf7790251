"""EmulatorDevice: the gfx950 functional emulator as a launch backend
(f4pipe.core.device.Device).

A launch lays out the initial state the descriptor asks for (AMDGPUUsage, "Initial Kernel
Execution State"): s[0:1] the kernarg segment address, then one SGPR per enabled workgroup id,
v0 the packed work-item ids (x | y << 10 | z << 20, as on gfx90a+), EXEC all ones for full
waves. Workgroups run in batches of up to `max_waves_per_batch` waves in lockstep; batches run
one after another, which is one legal order of a launch's workgroups.

Hardware promises no order between workgroups, so the order is a parameter
(`workgroup_order`: in launch order, reversed, or a seeded shuffle): a kernel whose result
changes with it has a race. Every launch also records the dwords that non-atomic stores of
more than one workgroup wrote (LaunchStats.races), which is a race whatever the order.
"""

from __future__ import annotations

import io
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from f4pipe.analysis.timing import HazardReport
from f4pipe.arch.gfx950 import ARCH, NUM_CU
from f4pipe.codeobj.program import Program
from f4pipe.core.device import DeviceBuffer
from f4pipe.core.errors import EmulatorError, NoDeviceError
from f4pipe.core.fsio import write_text
from f4pipe.core.layout import EMULATOR_DEVICE_ID
from f4pipe.emu.batch import (
    DEFAULT_MAX_INSTRUCTIONS_PER_WAVE,
    DEFAULT_MAX_WAVES_PER_BATCH,
    BatchSetup,
    SharedRuns,
)
from f4pipe.emu.colaunch import launch_staged
from f4pipe.emu.engine import LANES, Executor, WaveIds
from f4pipe.emu.launching import (
    IsolatedRun,
    LaunchFault,
    LaunchStats,
    StagedLaunch,
    apply_run,
    order_workgroups,
    parse_workgroup_order,
)
from f4pipe.emu.memory import GlobalMemory, WriteConflict, keep_freed_host_memory


@dataclass
class EmulatorKernel:
    """A loaded kernel (f4pipe.core.device.Kernel)."""

    symbol: str
    co_path: Path
    program: Program = field(repr=False)


class EmulatorDevice:
    """Runs gfx950 code objects on the CPU (fidelity.py says how faithfully); throughput is
    not measured here.

    trace_wave: the wave to trace, numbered in launch order (workgroups with x fastest, then
    y, z; times waves per workgroup; plus the wave's index in its workgroup, whatever the
    workgroup order). trace_out: a
    text stream, or a path written atomically at the end of each launch. Each line is
    `pc: instruction ; registers it changed` (see trace.py).
    max_waves_per_batch bounds memory (register files are [regs, waves, 64]); an access that
    leaves every allocation, an unknown instruction, a bad LDS access or more than
    max_instructions_per_wave instructions in one wave raises LaunchFault (an EmulatorError
    that carries the launch's stats).
    workgroup_order: "in-order", "reversed" or "shuffle:SEED" (see the module docstring);
    with max_waves_per_batch = waves per workgroup each workgroup runs alone, to completion,
    in exactly that order.
    check_hazards: check memory counters, LDS visibility and wait states as hardware timing
    requires (timing.py); each launch's findings are in the hazards of the LaunchStats it
    returns. Off only for speed.
    isolate_workgroups: every workgroup's effects are those of running it alone, to completion,
    in workgroup_order (what the shape-edge sweep needs to see one workgroup overwrite
    another's output). Batches still run in lockstep where that provably changes nothing
    (_BatchRunner.isolated); otherwise, and when tracing, one workgroup at a time.
    shared_runs: with isolate_workgroups, a SharedRuns that devices running the same launches
    in other orders share, so each isolated batch executes once.
    """

    device_id = EMULATOR_DEVICE_ID
    arch = ARCH
    num_cu = NUM_CU
    can_time = False

    def __init__(
        self,
        *,
        trace_wave: int | None = None,
        trace_out: TextIO | str | Path | None = None,
        max_waves_per_batch: int = DEFAULT_MAX_WAVES_PER_BATCH,
        max_instructions_per_wave: int = DEFAULT_MAX_INSTRUCTIONS_PER_WAVE,
        workgroup_order: str = "in-order",
        check_hazards: bool = True,
        isolate_workgroups: bool = False,
        shared_runs: SharedRuns | None = None,
    ) -> None:
        parse_workgroup_order(workgroup_order)
        if trace_wave is not None and trace_wave < 0:
            raise EmulatorError(f"trace_wave={trace_wave} must be a wave number >= 0")
        if max_waves_per_batch < 1:
            raise EmulatorError(f"max_waves_per_batch={max_waves_per_batch} must be >= 1")
        keep_freed_host_memory()
        #: The memory and the batch settings, shared with the co-launcher (f4pipe.emu.batch).
        self.batches = BatchSetup(
            GlobalMemory(),
            max_waves_per_batch,
            max_instructions_per_wave,
            check_hazards,
            shared_runs,
        )
        self.memory = self.batches.memory
        self.trace_wave = trace_wave
        self.trace_out = trace_out
        self.workgroup_order = workgroup_order
        self.isolate_workgroups = isolate_workgroups
        self._programs: dict[tuple[Path, str], Program] = {}
        self._buffers: dict[int, DeviceBuffer] = {}
        #: Attached to every batch's Executor (Executor.observer): sees each step before it
        #: executes. The cycle model's path recorder (f4pipe.perf.trace) sets it.
        self.observer: Callable[..., None] | None = None

    # --- Device protocol -----------------------------------------------------------------

    def load(self, co_path: Path, symbol: str) -> EmulatorKernel:
        key = (Path(co_path).resolve(), symbol)
        prog = self._programs.get(key)
        if prog is None:
            prog = Program.load(co_path, symbol)
            self._programs[key] = prog
        return EmulatorKernel(symbol=symbol, co_path=Path(co_path), program=prog)

    def alloc(self, nbytes: int) -> DeviceBuffer:
        buf = DeviceBuffer(addr=self.memory.alloc(nbytes), nbytes=nbytes)
        self._buffers[buf.addr] = buf
        return buf

    def free(self, buf: DeviceBuffer) -> None:
        self._check(buf)
        self.memory.free(buf.addr)
        del self._buffers[buf.addr]

    def upload(self, buf: DeviceBuffer, data: np.ndarray) -> None:
        self._check(buf)
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        if raw.size > buf.nbytes:
            raise EmulatorError(f"upload of {raw.size} bytes into a {buf.nbytes}-byte buffer")
        self.memory.array(buf.addr)[: raw.size] = raw

    def download(self, buf: DeviceBuffer, nbytes: int | None = None) -> np.ndarray:
        self._check(buf)
        n = buf.nbytes if nbytes is None else nbytes
        if not 0 <= n <= buf.nbytes:
            raise EmulatorError(f"download of {n} bytes from a {buf.nbytes}-byte buffer")
        return self.memory.array(buf.addr)[:n].copy()

    def memset(self, buf: DeviceBuffer, value: int, nbytes: int | None = None) -> None:
        self._check(buf)
        n = buf.nbytes if nbytes is None else nbytes
        if not 0 <= n <= buf.nbytes or not 0 <= value <= 0xFF:
            raise EmulatorError(f"memset of {n} bytes to {value} on a {buf.nbytes}-byte buffer")
        self.memory.array(buf.addr)[:n] = value

    def launch(
        self,
        kernel: EmulatorKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
    ) -> LaunchStats:
        """Run one launch; its stats (races, hazards, cost) are returned, or carried by the
        LaunchFault it raises when the kernel faults."""
        stats = self.new_stats(grid, block)
        ka = self.kernarg_block(kernel.program, kernarg)
        try:
            self.run_launch(kernel.program, grid, block, kernarg, ka, stats)
        finally:
            self.memory.free(ka)
        return stats

    def new_stats(self, grid: tuple[int, int, int], block: tuple[int, int, int]) -> LaunchStats:
        """The empty LaunchStats of a launch of `grid` x `block`, refused when the launch is
        malformed."""
        if any(g < 1 for g in grid) or any(b < 1 for b in block):
            raise EmulatorError(f"launch grid {grid} / block {block} must be positive")
        if block[0] > 1024 or block[1] > 1024 or block[2] > 1024:
            raise EmulatorError(f"block {block}: work-item ids are 10-bit fields")
        threads = block[0] * block[1] * block[2]
        if threads % LANES:
            raise EmulatorError(f"block {block}: partial waves (EXEC != all ones) are not modelled")
        return LaunchStats(
            workgroups=grid[0] * grid[1] * grid[2],
            waves=grid[0] * grid[1] * grid[2] * (threads // LANES),
            workgroup_order=self.workgroup_order,
        )

    def kernarg_block(self, prog: Program, kernarg: bytes) -> int:
        """Allocate and fill a launch's kernarg segment; its device address."""
        ka = self.memory.alloc(max(len(kernarg), prog.kernarg_bytes, 4))
        self.memory.array(ka)[: len(kernarg)] = np.frombuffer(kernarg, dtype=np.uint8)
        return ka

    def run_launch(
        self,
        prog: Program,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
        ka: int,
        stats: LaunchStats,
        one_at_a_time: bool = False,
    ) -> None:
        """Run a launch whose kernarg segment is at `ka` into `stats`; a fault raises
        LaunchFault carrying them. `one_at_a_time`: see _run."""
        t0 = time.perf_counter()
        try:
            self._run(prog, grid, block, kernarg, ka, stats, one_at_a_time)
        except EmulatorError as exc:
            raise LaunchFault(str(exc), stats) from exc
        finally:
            stats.seconds = time.perf_counter() - t0

    def stage_launch(
        self,
        kernel: EmulatorKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
        buffers: Sequence[DeviceBuffer],
    ) -> StagedLaunch:
        """A launch to run later with launch_staged, its kernarg segment allocated now (so
        every address is the one a launch made now would get); `buffers` are its own."""
        self.new_stats(grid, block)
        ka = self.kernarg_block(kernel.program, kernarg)
        owned = frozenset([ka, *(b.addr for b in buffers)])
        return StagedLaunch(kernel.program, grid, block, kernarg, ka, owned)

    def launch_staged(self, staged: Sequence[StagedLaunch]) -> list[LaunchStats | LaunchFault]:
        """Run staged launches, in order, exactly as launch would have one after another
        with only each one's buffers allocated: the stats of each, or its LaunchFault. With
        isolate_workgroups, launches of one kernel run as one lockstep batch where that
        provably changes nothing (f4pipe.emu.colaunch). Frees their kernarg segments."""
        return launch_staged(self, staged)

    def _run(
        self,
        prog: Program,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        kernarg: bytes,
        ka: int,
        stats: LaunchStats,
        one_at_a_time: bool = False,
    ) -> None:
        """Every workgroup of the launch, batch by batch, accumulating into `stats`;
        `one_at_a_time`: isolated workgroups skip the lockstep batch (the caller knows it
        would fault) and go one by one straight away."""
        waves_per_group = stats.waves // stats.workgroups
        sink, owned = self._trace_sink()
        hazards = HazardReport() if self.batches.check_hazards else None
        self.memory.begin_launch()
        try:
            groups = list(itertools.product(range(grid[2]), range(grid[1]), range(grid[0])))
            wg_ids = np.array([(x, y, z) for z, y, x in groups], dtype=np.int64).reshape(-1, 3)
            run_order = order_workgroups(len(wg_ids), self.workgroup_order)
            per_batch = max(1, self.batches.max_waves_per_batch // waves_per_group)
            run = _BatchRunner(self, prog, ka, block, waves_per_group, wg_ids, sink, kernarg, grid)
            for start in range(0, len(wg_ids), per_batch):
                batch = run_order[start : start + per_batch]
                if not self.isolate_workgroups:
                    run.batch(batch, start, hazards, stats)
                    continue
                tried = not one_at_a_time and self._lockstep_worthwhile(batch, sink)
                if tried and run.isolated(batch, hazards, stats):
                    continue
                for i in range(len(batch)):  # each workgroup alone, in order
                    one = batch[i : i + 1]
                    if (
                        (tried and len(batch) == 1)
                        or not self._lockstep_worthwhile(one, sink)
                        or not run.isolated(one, hazards, stats)
                    ):
                        run.batch(one, start + i, hazards, stats)
        finally:
            stats.races = self.memory.end_launch()
            stats.hazards = hazards
            if owned is not None and sink is not None:
                write_text(owned, sink.getvalue())  # type: ignore[union-attr]

    def _lockstep_worthwhile(self, batch: np.ndarray, sink: TextIO | None) -> bool:
        """Whether an isolated batch goes through _BatchRunner.isolated: never when tracing;
        a lone workgroup only when another device may replay it (SharedRuns): then the sweep's
        second order replays its stores instead of executing it again."""
        return sink is None and (len(batch) > 1 or self.batches.shared_runs is not None)

    def time_launches(self, *args, **kwargs) -> float:
        raise NoDeviceError(
            "the emulator cannot time launches: throughput is measured only on gfx950 hardware "
            "(use --device hip on an MI355X)"
        )

    def time_launch_series(self, *args, **kwargs):
        return self.time_launches(*args, **kwargs)  # refused the same way

    def close(self) -> None:
        for addr in list(self._buffers):
            self.memory.free(addr)
        self._buffers.clear()
        self._programs.clear()
        self.batches.forget_programs()

    # --- helpers -------------------------------------------------------------------------

    def _check(self, buf: DeviceBuffer) -> None:
        if self._buffers.get(buf.addr) != buf:
            raise EmulatorError(
                f"buffer at {buf.addr:#x} ({buf.nbytes} bytes) is not allocated on this emulator"
            )

    def _trace_sink(self) -> tuple[TextIO | None, Path | None]:
        if self.trace_wave is None:
            return None, None
        if self.trace_out is None:
            raise EmulatorError("trace_wave is set but trace_out is not: give a path or a stream")
        if isinstance(self.trace_out, str | Path):
            return io.StringIO(), Path(self.trace_out)
        return self.trace_out, None


@dataclass
class _BatchRunner:
    """Runs batches of one launch: the workgroups `batch` (launch-order numbers) in lockstep."""

    device: EmulatorDevice
    prog: Program
    kernarg_addr: int
    block: tuple[int, int, int]
    waves_per_group: int
    wg_ids: np.ndarray
    sink: TextIO | None
    kernarg: bytes
    grid: tuple[int, int, int]
    #: The executor of the batch that ran last (trial reads a faulted one's hazards).
    last: Executor | None = field(default=None, init=False)

    def batch(
        self,
        batch: np.ndarray,
        start: int,
        hazards: HazardReport | None,
        stats: LaunchStats,
        per_workgroup: bool = False,
    ) -> Executor:
        dev, wpg = self.device, self.waves_per_group
        self.last = None
        ids = WaveIds(
            first_global_wave=start * wpg,
            waves_per_group=wpg,
            wg_ids=self.wg_ids[batch],
            wg_linear=batch,
        )
        ex = dev.batches.executor(
            self.prog,
            ids,
            self.kernarg_addr,
            self.block,
            hazards,
            per_workgroup=per_workgroup,
            trace_wave=dev.trace_wave,
            trace_out=self.sink,
            observer=dev.observer,
        )
        self.last = ex
        try:
            ex.run()
        finally:  # a faulting batch's LDS tags must still read as old to the next one, and
            if ex.timing is not None:  # its LaunchFault's stats count the work up to the fault
                ex.timing.finish()
            stats.wave_instructions += ex.dynamic_instructions
            stats.steps += ex.steps
        return ex

    def isolated(self, batch: np.ndarray, hazards: HazardReport | None, stats: LaunchStats) -> bool:
        """Run `batch` in lockstep with its stores deferred, then apply them workgroup by
        workgroup in batch order: exactly what running each workgroup alone, in that order,
        leaves in memory and in the race log, since no workgroup saw another's stores. The
        timing hazards are kept per workgroup (TimingRun per_workgroup) and reported the same
        way, so the report's order and first sites are a one-at-a-time run's too. False
        (nothing applied, nothing reported) when that cannot be shown: the batch read an
        allocation it stores to (even before the store: run alone, a later workgroup would
        have seen it), used an atomic or faulted; the caller then runs it one workgroup at a
        time. A lone workgroup's fault is kept instead: its stores and hazards up to there
        land and the same error is raised, as running it directly would. With the device's
        SharedRuns, a batch another device already ran on the same inputs (a fault included)
        is replayed without executing it again."""
        batches = self.device.batches
        key = self.shared_key(batch) if batches.shared_runs is not None else ()
        found, run = batches.find_run(key)
        if found and run is None:
            return False  # the same batch failed on another device: it fails here too
        executed = not found
        if not found:
            read, run = self.trial(batch)
            batches.keep_run(key, read, run)
        if run is None:
            return False
        assert isinstance(run, IsolatedRun)
        apply_run(batches.memory, run, batch, hazards)
        stats.wave_instructions += run.wave_instructions
        stats.steps += run.steps if executed else 0
        if run.fault is not None:
            raise EmulatorError(run.fault)
        stats.isolated_in_lockstep += len(batch)
        return True

    def trial(self, batch: np.ndarray) -> tuple[set[int], IsolatedRun | None]:
        """Execute `batch` with stores deferred: the allocations it read, and its run, or
        None when the journal cannot stand for a one-at-a-time run (see isolated). A lone
        workgroup that faults has a run too (IsolatedRun.fault): with one workgroup there is
        no order to get wrong, and an independent journal means it saw what a direct run
        sees up to the fault."""
        memory = self.device.memory
        scratch = HazardReport() if self.device.batches.check_hazards else None
        trial = LaunchStats()
        memory.defer_writes()
        fault = None
        try:
            self.batch(batch, 0, scratch, trial, per_workgroup=True)
        except WriteConflict:
            return memory.take_journal().read, None
        except EmulatorError as exc:
            if len(batch) > 1:
                return memory.take_journal().read, None
            fault = str(exc)
        journal = memory.take_journal()
        if not journal.independent or self.last is None:  # None: it failed before running
            return journal.read, None
        timing = self.last.timing
        events = (timing.events or []) if timing is not None else []
        hazards = [(int(batch[slot]), hazard, where) for slot, hazard, where in events]
        run = IsolatedRun(journal, hazards, trial.wave_instructions, trial.steps, fault)
        return journal.read, run

    def shared_key(self, batch: np.ndarray) -> tuple:
        """The SharedRuns key of the workgroups `batch` of this launch."""
        prog = self.prog
        return self.device.batches.run_key(
            prog.symbol,
            prog.text,
            prog.entry,
            self.kernarg,
            self.grid,
            self.block,
            frozenset(int(w) for w in batch),
        )
