"""What a launch is made of, apart from the device that runs it: the workgroup order, its
stats and fault, a launch staged to run with others, the initial register state, and an
isolated run's stores and how they land. EmulatorDevice (device.py) and the batches of several
launches (colaunch.py) share them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from f4pipe.analysis.timing import Hazard, HazardReport
from f4pipe.arch import isa
from f4pipe.codeobj.program import Program
from f4pipe.core.errors import EmulatorError
from f4pipe.emu.engine import LANES, Executor
from f4pipe.emu.memory import GlobalMemory, Journal, RaceReport


def parse_workgroup_order(order: str) -> tuple[str, int]:
    """'in-order' | 'reversed' | 'shuffle' | 'shuffle:SEED' -> (kind, seed)."""
    kind, _, seed_text = order.partition(":")
    if kind in ("in-order", "reversed") and not seed_text:
        return kind, 0
    if kind == "shuffle":
        try:
            seed = int(seed_text or "0")
        except ValueError:
            seed = -1
        if seed >= 0:  # numpy's Generator takes non-negative seeds only
            return kind, seed
    raise EmulatorError(
        f"workgroup order {order!r}: use one of in-order, reversed, shuffle or shuffle:SEED"
    )


def order_workgroups(num: int, order: str) -> np.ndarray:
    """The launch-order numbers 0..num-1 in the order `order` runs them."""
    kind, seed = parse_workgroup_order(order)
    ids = np.arange(num, dtype=np.int64)
    if kind == "reversed":
        return ids[::-1].copy()
    if kind == "shuffle":
        return np.random.default_rng(seed).permutation(ids)
    return ids


@dataclass(frozen=True)
class StagedLaunch:
    """A launch whose kernarg segment is allocated (EmulatorDevice.stage_launch), to run with others
    (colaunch.launch_staged)."""

    program: Program
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    kernarg: bytes
    kernarg_addr: int
    owned: frozenset[int]  # start addresses of its allocations, kernarg segment included

    @property
    def workgroups(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def waves_per_group(self) -> int:
        return self.block[0] * self.block[1] * self.block[2] // LANES

    def wg_ids(self) -> np.ndarray:
        """[workgroups, 3] (x, y, z) in launch order (x fastest)."""
        gx, gy, _ = self.grid
        n = np.arange(self.workgroups, dtype=np.int64)
        return np.stack([n % gx, (n // gx) % gy, n // (gx * gy)], axis=1)


@dataclass
class LaunchStats:
    """What one launch found and cost (EmulatorDevice.launch returns it; it implements
    f4pipe.core.device.LaunchReport): races, hazards, wall time, waves, dynamic instructions."""

    seconds: float = 0.0
    waves: int = 0
    workgroups: int = 0
    wave_instructions: int = 0  # instructions executed, summed over waves
    steps: int = 0  # lockstep groups executed (numpy dispatches)
    workgroup_order: str = "in-order"
    races: RaceReport = field(default_factory=RaceReport)
    hazards: HazardReport | None = None  # None: timing was not checked (check_hazards=False)
    isolated_in_lockstep: int = 0  # isolated workgroups that ran (or were replayed) batched

    @property
    def instructions_per_second(self) -> float:
        return self.wave_instructions / self.seconds if self.seconds else 0.0


class LaunchFault(EmulatorError):
    """A launch stopped at a fault (an access outside every allocation, an instruction it
    cannot run, ...); `stats` is what the launch found up to there (its races, its hazards)."""

    def __init__(self, message: str, stats: LaunchStats) -> None:
        super().__init__(message)
        self.stats = stats


@dataclass(frozen=True)
class IsolatedRun:
    """An isolated batch's deferred stores and what executing it cost.

    `fault`: the error a lone workgroup stopped at (None: it ran to the end). Its stores and
    hazards up to there are what running it directly leaves before raising the same error,
    since its loads never read what it stored (the journal is independent)."""

    journal: Journal
    hazards: list[tuple[int, Hazard, str]]  # (workgroup, hazard, where), as each met them
    wave_instructions: int
    steps: int
    fault: str | None = None


def apply_run(
    memory: GlobalMemory, run: IsolatedRun, order: np.ndarray, hazards: HazardReport | None
) -> None:
    """Land an isolated run's stores and report its hazards workgroup by workgroup in
    `order` (launch-order numbers): what running each alone, in that order, leaves."""
    for wg in order:
        for store in run.journal.stores:
            mine = store.writers == wg
            if mine.any():
                memory.write_dwords(
                    store.addr[mine],
                    store.values[mine],
                    store.what,
                    store.writers[mine],
                    store.site,
                )
    if hazards is not None:
        for wg in order:
            for owner, hazard, where in run.hazards:
                if owner == wg:
                    hazards.add(hazard, where)


def initial_state(
    ex: Executor, prog: Program, kernarg_addr: int | np.ndarray, block: tuple[int, int, int]
) -> None:
    """Registers at wave start: kernarg pointer (one, or one per batch workgroup when the
    batch holds several launches), workgroup ids, packed work-item ids, EXEC."""
    if prog.kernarg_sgpr >= 0:
        addr = kernarg_addr if isinstance(kernarg_addr, int) else kernarg_addr[ex.wg]
        ex.sgpr[prog.kernarg_sgpr] = addr & 0xFFFFFFFF
        ex.sgpr[prog.kernarg_sgpr + 1] = addr >> 32
    wg_of_wave = ex.ids.wg_ids[ex.wg]  # [W, 3]
    for dim, sreg in prog.workgroup_id_sgprs.items():
        ex.sgpr[sreg] = wg_of_wave[:, dim].astype(np.uint32)
    flat = (np.arange(ex.W) % ex.ids.waves_per_group)[:, None] * LANES + np.arange(LANES)
    x = flat % block[0]
    y = (flat // block[0]) % block[1]
    z = flat // (block[0] * block[1])
    ex.vgpr[0] = (x | (y << 10) | (z << 20)).astype(np.uint32)
    ex.sgpr[isa.EXEC_LO] = 0xFFFFFFFF
    ex.sgpr[isa.EXEC_HI] = 0xFFFFFFFF
    ex.exec_changed()
