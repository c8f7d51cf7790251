"""How the emulator's lockstep batches are made, one module for both runners of them: the
device (device.py, the workgroups of one launch) and the co-launcher (colaunch.py, several
launches of one kernel). Each batch is an Executor with the launch's initial state and, when
timing is checked, a TimingRun over the program's timing model and the process's LDS
bookkeeping; an isolated batch is remembered in SharedRuns under a key of everything its
execution depends on but the memory it reads.

Before this module the co-launcher set its executors up with the device's private helpers;
now both read the one BatchSetup the device owns.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

import numpy as np

from f4pipe.analysis.timing import HazardReport, TimingModel
from f4pipe.analysis.timingrun import LdsWords, TimingRun
from f4pipe.codeobj.program import Program
from f4pipe.emu.engine import Executor, WaveIds
from f4pipe.emu.launching import IsolatedRun, initial_state
from f4pipe.emu.memory import GlobalMemory

if TYPE_CHECKING:
    from collections.abc import Callable

DEFAULT_MAX_WAVES_PER_BATCH = 512
DEFAULT_MAX_INSTRUCTIONS_PER_WAVE = 2_000_000
#: The LDS bookkeeping arrays by waves per workgroup, kept for the process (lds_pool).
LDS_POOLS: dict[int, LdsWords] = {}


def lds_pool(num_wg: int, words: int, waves_per_group: int, max_waves_per_batch: int) -> LdsWords:
    """The LDS bookkeeping arrays, reused across batches, launches and devices (see LdsWords):
    the shape-edge sweep makes two devices per kernel, and zeroing tens of MB of tags for each
    cost about 0.6 CPU-s of its 29. One set per workgroup size, for the process: batches run
    one at a time, each leaving the tags old for the next."""
    pool = LDS_POOLS.get(waves_per_group)
    if pool is None or not pool.fits(num_wg, words, waves_per_group):
        per_batch = max(1, max_waves_per_batch // waves_per_group)
        pool = LdsWords(max(num_wg, per_batch), words, waves_per_group)
        LDS_POOLS[waves_per_group] = pool
    return pool


class SharedRuns:
    """Isolated batches that EmulatorDevices launching the same kernel on the same inputs in
    other workgroup orders replay instead of executing (the shape-edge sweep runs every launch
    in two orders). Sound because an isolated batch's journal is independent: each workgroup's
    stores depend only on the launch and on the memory it read, never on the order. A batch
    that could not run isolated is remembered too, so the other orders go one workgroup at a
    time without trying. A batch is found by its key (BatchSetup.run_key) and the digest of
    the allocations it read (up to where it stopped, for a failed one)."""

    def __init__(self) -> None:
        self._runs: dict[tuple, list[tuple[set[int], tuple, object]]] = {}

    @staticmethod
    def _digest(memory: GlobalMemory, starts: set[int]) -> tuple:
        return tuple(
            (start, hashlib.blake2b(memory.array(start)).digest()) for start in sorted(starts)
        )

    def find(self, key: tuple, memory: GlobalMemory) -> tuple[bool, object]:
        """(found, what was added): None for a batch that failed."""
        for read, digest, run in self._runs.get(key, ()):
            if digest == self._digest(memory, read):
                return True, run
        return False, None

    def add(self, key: tuple, memory: GlobalMemory, read: set[int], run: object) -> None:
        """Remember a batch's `run` (an IsolatedRun, the co-launcher's list of them, or None
        for a failure) under `key` and the allocations it `read`."""
        self._runs.setdefault(key, []).append((read, self._digest(memory, read), run))


@dataclass
class BatchSetup:
    """A device's memory and the settings every batch it runs is made with; the device owns
    one and the co-launcher runs its batches through the same."""

    memory: GlobalMemory
    max_waves_per_batch: int = DEFAULT_MAX_WAVES_PER_BATCH
    max_instructions_per_wave: int = DEFAULT_MAX_INSTRUCTIONS_PER_WAVE
    check_hazards: bool = True
    shared_runs: SharedRuns | None = None
    _models: dict[int, TimingModel] = field(default_factory=dict, init=False, repr=False)

    def timing_model(self, prog: Program) -> TimingModel:
        """One per program, so its memoised transitions serve every later launch."""
        from f4pipe.analysis.hazards import timing_model

        model = self._models.get(id(prog))
        if model is None:
            model = timing_model(prog)
            self._models[id(prog)] = model
        return model

    def forget_programs(self) -> None:
        self._models.clear()

    def executor(
        self,
        prog: Program,
        ids: WaveIds,
        kernarg_addr: int | np.ndarray,
        block: tuple[int, int, int],
        hazards: HazardReport | None,
        *,
        per_workgroup: bool = False,
        trace_wave: int | None = None,
        trace_out: TextIO | None = None,
        observer: Callable[..., None] | None = None,
    ) -> Executor:
        """A batch ready to run: the waves `ids` names at their initial state, and, with
        `hazards`, their timing checked into it (per workgroup for an isolated batch). The
        timing model is built when a batch first executes, not for a replayed one."""
        ex = Executor(
            prog,
            self.memory,
            ids,
            max_instructions=self.max_instructions_per_wave,
            trace_wave=trace_wave,
            trace_out=trace_out,
        )
        initial_state(ex, prog, kernarg_addr, block)
        ex.observer = observer
        if hazards is not None:
            wpg = ids.waves_per_group
            ex.timing = TimingRun(
                self.timing_model(prog),
                hazards,
                lds_pool(ex.num_wg, ex.lds.shape[1], wpg, self.max_waves_per_batch),
                num_waves=ex.W,
                wave_wg=ex.wg,
                waves_per_group=wpg,
                per_workgroup=per_workgroup,
            )
        return ex

    def run_key(self, *launch: object) -> tuple:
        """The SharedRuns key of a batch: `launch` (what the runner knows of its launches and
        workgroups) and what this setup adds to their execution, the memory's layout
        included; the contents of the memory it reads are matched apart."""
        return (
            *launch,
            self.max_instructions_per_wave,
            self.check_hazards,
            self.memory.layout(),
        )

    def find_run(self, key: tuple) -> tuple[bool, object]:
        """SharedRuns.find in this setup's memory; (False, None) without SharedRuns."""
        if self.shared_runs is None:
            return False, None
        return self.shared_runs.find(key, self.memory)

    def keep_run(self, key: tuple, read: set[int], run: IsolatedRun | list | None) -> None:
        """SharedRuns.add in this setup's memory (nothing without SharedRuns)."""
        if self.shared_runs is not None:
            self.shared_runs.add(key, self.memory, read, run)
