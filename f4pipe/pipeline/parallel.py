"""A stage's independent runs spread over forked worker processes, results in input order.

Why processes and fork: the emulator is pure Python, so threads would share one interpreter
lock, and a fresh interpreter per worker would pay f4pipe's start-up again. A forked worker
starts with what the parent imported before the map (numpy, pyarrow, the stage's modules), so
one stage process per variant can use every core Snakemake gives it (`threads:`) without a
process per kernel. What the parent defers stays deferred: the lazily opened emulator and the
result store's per-content decode cache are built in each worker that needs them (a run taken
from the store needs neither). Forking a process that has opened a GPU is unsafe, so callers
ask for workers only on the emulator (`workers_for`).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from f4pipe.core.layout import EMULATOR_DEVICE_ID
from f4pipe.pipeline.progress import track

T = TypeVar("T")
R = TypeVar("R")

#: (function, items) of the map in progress; forked workers inherit it, so neither the
#: function (often a closure) nor the items need to be picklable, only the results.
_WORK: tuple[Callable[[Any], Any], Sequence[Any]] | None = None


def workers_for(device_id: str | None, workers: int) -> int:
    """Worker processes to use on this device: as asked on the emulator, one elsewhere (a GPU
    runs one launch at a time, and a forked child of a HIP process must not touch the GPU)."""
    return max(1, workers) if device_id == EMULATOR_DEVICE_ID else 1


def _call(index: int) -> Any:
    assert _WORK is not None  # set by map_ordered before the pool forks
    fn, items = _WORK
    return fn(items[index])


def map_ordered(
    fn: Callable[[T], R], items: Sequence[T], *, workers: int = 1, label: str = ""
) -> list[R]:
    """[fn(x) for x in items], on up to `workers` forked processes, with progress lines on
    stderr when `label` is given. An exception in a worker is raised here, as in the loop."""
    global _WORK
    workers = min(workers, len(items))
    progress = (lambda xs: track(xs, label, total=len(items))) if label else (lambda xs: xs)
    if workers <= 1:
        return [fn(x) for x in progress(items)]
    _WORK = (fn, items)
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            return list(progress(pool.imap(_call, range(len(items)))))
    finally:
        _WORK = None
