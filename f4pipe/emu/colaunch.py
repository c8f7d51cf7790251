"""Several launches of one kernel as one lockstep batch (EmulatorDevice.launch_staged).

The shape-edge sweep makes about thirty small launches per kernel (1 to 12 waves each), so
running them one after another pays numpy's per-call overhead at every step of every launch.
With isolate_workgroups every workgroup's effects are those of running it alone, so the
launches' workgroups can run together in lockstep with their stores deferred (as
_BatchRunner.isolated does for the workgroups of one launch), each wave reading its own
launch's kernarg segment, and then each launch's stores land, workgroup by workgroup in the
device's order, inside that launch's own race record. That is exactly what running the
launches one after another leaves, provided

- no workgroup reads memory any of them stores to (the journal is independent),
- every access stays in its own launch's allocations (GlobalMemory.partition checks each
  one before it touches memory; run alone, a launch does not see another's buffers).

A launch with an access that would fault or leave its allocations is stopped there (its
waves count as done, which no other launch can notice) and the others go on; it then runs
alone, as launch would, with only its own allocations visible, so its fault names the same
addresses. Any other error takes the waves' launches out and the rest run again.

Each batch is set up and recorded in SharedRuns by the device's BatchSetup
(f4pipe.emu.batch), as the device's own batches are, so the sweep's other workgroup orders
replay it instead of executing it again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from f4pipe.analysis.timing import HazardReport
from f4pipe.core.errors import EmulatorError
from f4pipe.emu.engine import WaveIds
from f4pipe.emu.launching import (
    IsolatedRun,
    LaunchFault,
    LaunchStats,
    StagedLaunch,
    apply_run,
    order_workgroups,
)
from f4pipe.emu.memory import DeferredStore, Journal, WriteConflict, positions_by_key

if TYPE_CHECKING:  # the device imports this module: the device is only a type here
    from f4pipe.emu.device import EmulatorDevice

#: A batch's verdict on a launch stopped at a faulting access (it then runs alone); None:
#: a launch the batch could not stand for, for another reason.
FAULTED = "faulted"
Outcome = IsolatedRun | str | None


def launch_staged(
    device: EmulatorDevice, staged: Sequence[StagedLaunch]
) -> list[LaunchStats | LaunchFault]:
    """See EmulatorDevice.launch_staged."""
    results: list[LaunchStats | LaunchFault] = []
    try:
        for chunk in _chunks(device, staged):
            runs = _batched_runs(device, chunk) if _batchable(device) else [None] * len(chunk)
            for launch, run in zip(chunk, runs, strict=True):
                if isinstance(run, IsolatedRun):
                    results.append(_replay(device, launch, run))
                else:
                    results.append(_alone(device, launch, faulted=run == FAULTED))
    finally:
        for launch in staged:
            device.memory.free(launch.kernarg_addr)
    return results


def _batchable(device: EmulatorDevice) -> bool:
    """Batching needs isolated workgroups and nobody watching single steps."""
    return device.isolate_workgroups and device.trace_wave is None and device.observer is None


def _chunks(device: EmulatorDevice, staged: Sequence[StagedLaunch]) -> list[list[StagedLaunch]]:
    """Consecutive launches of one program and block, at most max_waves_per_batch waves."""
    chunks: list[list[StagedLaunch]] = []
    waves = 0
    for launch in staged:
        size = launch.workgroups * launch.waves_per_group
        last = chunks[-1] if chunks else None
        if (
            last is None
            or last[0].program is not launch.program
            or last[0].block != launch.block
            or waves + size > device.batches.max_waves_per_batch
        ):
            chunks.append([launch])
            waves = size
        else:
            last.append(launch)
            waves += size
    return chunks


def _alone(
    device: EmulatorDevice, launch: StagedLaunch, faulted: bool
) -> LaunchStats | LaunchFault:
    """Run `launch` as launch would, seeing only its own allocations; one that `faulted` in
    the batch goes workgroup by workgroup at once (all of them together would fault again,
    and only one at a time tells which faults first in the device's order)."""
    memory = device.memory
    stats = device.new_stats(launch.grid, launch.block)
    memory.hide_all_but(set(launch.owned))
    try:
        device.run_launch(
            launch.program,
            launch.grid,
            launch.block,
            launch.kernarg,
            launch.kernarg_addr,
            stats,
            one_at_a_time=faulted,
        )
    except LaunchFault as fault:
        return fault
    finally:
        memory.show_all()
    return stats


def _replay(device: EmulatorDevice, launch: StagedLaunch, run: IsolatedRun) -> LaunchStats:
    """Land a batched launch's stores and hazards as its own launch, in the device's order."""
    t0 = time.perf_counter()
    stats = device.new_stats(launch.grid, launch.block)
    hazards = HazardReport() if device.batches.check_hazards else None
    device.memory.begin_launch()
    try:
        order = order_workgroups(launch.workgroups, device.workgroup_order)
        apply_run(device.memory, run, order, hazards)
        stats.wave_instructions += run.wave_instructions
        stats.steps += run.steps
        stats.isolated_in_lockstep += launch.workgroups
    finally:
        stats.races = device.memory.end_launch()
        stats.hazards = hazards
        stats.seconds = time.perf_counter() - t0
    return stats


def _batched_runs(device: EmulatorDevice, chunk: list[StagedLaunch]) -> list[Outcome]:
    """Each launch's run from one lockstep batch of the chunk (FAULTED or None: run it
    alone), found in the device's SharedRuns when another order already ran the same
    chunk."""
    batches = device.batches
    key = batches.run_key(
        "launches",
        tuple(
            (launch.program.text, launch.program.entry, launch.kernarg, launch.grid)
            for launch in chunk
        ),
        chunk[0].block,
    )
    found, runs = batches.find_run(key)
    if found:
        return runs  # type: ignore[return-value]
    runs_by: dict[int, Outcome] = {}
    active = list(range(len(chunk)))
    read: set[int] = set()
    while active:
        outcome = _trial(device, [chunk[i] for i in active])
        if isinstance(outcome, tuple):
            read, found_runs = outcome
            runs_by = {i: run for i, run in zip(active, found_runs, strict=True)}
            break
        if not outcome:  # a failure no launch can be blamed for: every one runs alone
            break
        active = [i for j, i in enumerate(active) if j not in outcome]
    result = [runs_by.get(i) for i in range(len(chunk))]
    batches.keep_run(key, read, result)
    return result


def _trial(
    device: EmulatorDevice, launches: list[StagedLaunch]
) -> tuple[set[int], list[Outcome]] | set[int]:
    """Run `launches` as one batch with stores deferred: (allocations read, each launch's
    run, FAULTED for one stopped at a faulting access), or the positions of the launches to
    leave out (an error other than a memory access: the waves it was raised for; empty: no
    launch to blame, or the journal cannot stand for one-at-a-time runs)."""
    memory = device.memory
    prog, block = launches[0].program, launches[0].block
    wpg = launches[0].waves_per_group
    sizes = [launch.workgroups for launch in launches]
    owner = np.repeat(np.arange(len(launches)), sizes)
    linear = np.concatenate([np.arange(n, dtype=np.int64) for n in sizes])
    ids = WaveIds(
        first_global_wave=0,
        waves_per_group=wpg,
        wg_ids=np.concatenate([launch.wg_ids() for launch in launches]),
        wg_linear=linear,
        wg_owner=owner,
        wg_writer=np.arange(len(owner), dtype=np.int64),
    )
    kernarg_addrs = np.repeat([launch.kernarg_addr for launch in launches], sizes)
    hazards = HazardReport() if device.batches.check_hazards else None
    ex = device.batches.executor(prog, ids, kernarg_addrs, block, hazards, per_workgroup=True)
    memory.partition({start: j for j, launch in enumerate(launches) for start in launch.owned})
    memory.defer_writes()
    try:
        ex.run()
    except EmulatorError:
        waves = ex.fault_waves
        return set() if waves is None else {int(j) for j in owner[ex.wg[waves]]}
    except WriteConflict:
        return set()
    finally:
        if ex.timing is not None:
            ex.timing.finish()
        journal = memory.take_journal()
        memory.partition(None)
    if not journal.independent:
        return set()
    events = (ex.timing.events or []) if ex.timing is not None else []
    wave_owner = owner[ex.wg]
    stores_of = _stores_by_launch(journal, owner, linear, len(launches))
    runs: list[Outcome] = []
    for j in range(len(launches)):
        if j in ex.dropped:
            runs.append(FAULTED)
            continue
        stores = stores_of[j]
        hazards = [(int(linear[g]), hz, where) for g, hz, where in events if owner[g] == j]
        runs.append(
            IsolatedRun(
                Journal(stores),
                hazards,
                int(ex.icount[wave_owner == j].sum()),
                ex.steps if j == 0 else 0,  # the batch's steps are counted once
            )
        )
    return journal.read, runs


def _stores_by_launch(
    journal: Journal, owner: np.ndarray, linear: np.ndarray, launches: int
) -> list[list[DeferredStore]]:
    """Each launch's part of every deferred store, in store order (and C order within one),
    its writers renumbered within the launch."""
    stores_of: list[list[DeferredStore]] = [[] for _ in range(launches)]
    for store in journal.stores:
        addr, values, writers = (a.reshape(-1) for a in (store.addr, store.values, store.writers))
        launch = owner[writers]
        for j, part in positions_by_key(launch, np.bincount(launch)):
            stores_of[j].append(
                DeferredStore(
                    addr[part], values[part], store.what, linear[writers[part]], store.site
                )
            )
    return stores_of
