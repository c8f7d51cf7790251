"""Predictions for many (kernel, shape, split) rows at once: the one path `predict --shapes`,
`audit-tuned --predict` and `tune` share.

A row is one kernel at one shape and split. The rows are answered kernel by kernel, so a
profile's traces and simulated cycles are read once for every shape that kernel meets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from f4pipe.aiter.manifest import KernelEntry
from f4pipe.perf.predict import Predictor


@dataclass(frozen=True)
class Predictions:
    """Predicted times of rows (arrays of one length, in the rows' order)."""

    us: np.ndarray
    tflops: np.ndarray
    compute_us: np.ndarray
    memory_us: np.ndarray
    rounds: np.ndarray
    workgroups: np.ndarray
    wg_cycles: np.ndarray

    def __len__(self) -> int:
        return len(self.us)


def predict_rows(
    predictor: Predictor,
    entries: Sequence[KernelEntry],
    m: Sequence[int] | np.ndarray,
    n: Sequence[int] | np.ndarray,
    k: Sequence[int] | np.ndarray,
    log2_k_split: Sequence[int] | np.ndarray | int = 0,
    warm: bool = False,
) -> Predictions:
    """Row i: `entries[i]` at (m[i], n[i], k[i]) with split log2_k_split[i] (or one split for
    every row). Every shape must have passed shaperules.check_shape."""
    rows = len(entries)
    ms, ns, ks = (np.asarray(x, dtype=np.int64).reshape(-1) for x in (m, n, k))
    splits = np.broadcast_to(np.asarray(log2_k_split, dtype=np.int64), (rows,))
    if not len(ms) == len(ns) == len(ks) == rows:
        raise ValueError("entries, m, n and k must have one length")
    cols: dict[str, list[float]] = {f: [] for f in Predictions.__dataclass_fields__}
    for i, entry in enumerate(entries):
        p = predictor.predict(entry, int(ms[i]), int(ns[i]), int(ks[i]), int(splits[i]), warm)
        for f in cols:
            cols[f].append(getattr(p, f))
    return Predictions(
        us=np.asarray(cols["us"], dtype=float),
        tflops=np.asarray(cols["tflops"], dtype=float),
        compute_us=np.asarray(cols["compute_us"], dtype=float),
        memory_us=np.asarray(cols["memory_us"], dtype=float),
        rounds=np.asarray(cols["rounds"], dtype=np.int64),
        workgroups=np.asarray(cols["workgroups"], dtype=np.int64),
        wg_cycles=np.asarray(cols["wg_cycles"], dtype=float),
    )
