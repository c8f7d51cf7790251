"""One kernel's executed paths and simulated workgroup cycles, the cycle model's inputs.

A KernelProfile owns one kernel's executed paths (trace.py, one emulated workgroup per traced
K, cached on disk by the executed program's digest, so original and rebuilt objects with the
same decoded program share them) and its simulated workgroup cycles (cu.py, cached in memory
and on disk per calibration), at the traced Ks, the row fractions of FRACTION_STEPS and the
rates of model.SIM_BYTES_PER_CLK. Predictions (batch.py) are weighted sums of those points.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from f4pipe.aiter.manifest import KernelEntry
from f4pipe.codeobj.program import Program, executed_digest
from f4pipe.core.cache import cache_root
from f4pipe.core.fsio import sha256_file, write_text
from f4pipe.perf import trace as tracing
from f4pipe.perf.costs import COST, Calibration
from f4pipe.perf.cu import (
    CU_MODEL_VERSION,
    SIMULATED_COSTS,
    Op,
    WorkgroupCycles,
    decode_ops,
    simulate_workgroup,
    workgroup_vmem_bytes,
)
from f4pipe.perf.model import (
    SIM_BYTES_PER_CLK,
    TRACE_KS,
    bracket_bytes_per_clk,
    interpolate_cycles,
)

log = logging.getLogger(__name__)

#: A partial tile's row fractions are simulated at multiples of 1 / FRACTION_STEPS.
FRACTION_STEPS = 32


def trace_cache_dir() -> Path:
    return cache_root() / "perf" / "traces"


def program_digest(co_path: Path, symbol: str) -> str | None:
    """executed_digest of a code object, remembered on disk by the file's sha256 (decoding a
    kernel to digest it costs a third of a second; hashing its file, a millisecond)."""
    path = trace_cache_dir() / "digests.json"
    key = f"{sha256_file(co_path)}:{symbol}"
    try:
        known = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    digest = executed_digest(co_path, symbol)
    if digest is not None:
        known[key] = digest
        try:
            write_text(path, json.dumps(known))
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)
    return digest


class KernelProfile:
    """One kernel's paths and simulated cycles."""

    def __init__(self, entry: KernelEntry, co_path: Path) -> None:
        self.entry = entry
        self.co_path = Path(co_path)
        self.digest = program_digest(self.co_path, entry.symbol)
        self._ops: dict[int, Op] | None = None
        self._traces: dict[tuple[int, int], tracing.WorkgroupTrace] = {}
        self._cycles: dict[tuple, WorkgroupCycles] = {}
        self._disk: dict[str, Any] | None = None
        self._sides: dict[tuple[int, int], np.ndarray] = {}
        self._deferred = False
        self._unsaved = False

    @property
    def ops(self) -> dict[int, Op]:
        if self._ops is None:
            self._ops = decode_ops(Program.load(self.co_path, self.entry.symbol))
        return self._ops

    def trace(self, k_local: int, log2_k_split: int = 0) -> tracing.WorkgroupTrace:
        key = (k_local, log2_k_split)
        if key not in self._traces:
            self._traces[key] = self._load_or_record(k_local, log2_k_split)
        return self._traces[key]

    def _load_or_record(self, k_local: int, log2_k_split: int) -> tracing.WorkgroupTrace:
        path = None
        if self.digest is not None:
            name = tracing.cache_key(self.digest, k_local, log2_k_split)
            path = trace_cache_dir() / f"{name}.npz"
            if path.is_file():
                try:
                    return tracing.load_trace(path)
                except (OSError, ValueError, KeyError):
                    log.warning("ignoring unreadable trace cache %s", path)
        tr = tracing.record_workgroup(self.entry, self.co_path, k_local, log2_k_split)
        if path is not None:
            tracing.save_trace(tr, path)
        return tr

    def simulated(
        self,
        k_local: int,
        log2_k_split: int,
        cal: Calibration,
        fracs: tuple[float, float],
        bytes_per_clk: float | None = None,
        faster: str | None = None,
    ) -> WorkgroupCycles:
        """Simulated cycles at a traced K, with the operands' row fractions `fracs`, the CU's
        vector-memory path at `bytes_per_clk` (default: the L2-served rate), and `faster`
        (cu.CU_UNITS) the unit run faster to find which one limits a prediction."""
        bpc = cal.cu_vmem_bytes_per_clk if bytes_per_clk is None else float(bytes_per_clk)
        key: tuple = (k_local, log2_k_split, cal.vmem_latency, bpc, fracs)
        if faster is not None:
            key = (*key, faster)
        if key not in self._cycles:
            stored = self._stored_cycles().get(repr(key))
            if stored is not None:
                self._cycles[key] = WorkgroupCycles(**stored)
            else:
                tr = self.trace(k_local, log2_k_split)
                self._cycles[key] = simulate_workgroup(
                    self.ops, tr, cal.vmem_latency, bpc, *fracs, faster=faster
                )
                self._store_cycles(repr(key), asdict(self._cycles[key]))
        return self._cycles[key]

    def _cycles_path(self) -> Path | None:
        """Simulated cycles, cached on disk beside the traces: they depend only on the traced
        path, the timing table's rows the simulation reads, the CU model and the key's
        constants (all in the name)."""
        if self.digest is None:
            return None
        table = repr([(row, COST[row]) for row in SIMULATED_COSTS])
        name = hashlib.sha256(f"{self.digest}:{CU_MODEL_VERSION}:{table}".encode()).hexdigest()
        return trace_cache_dir() / f"cycles-{name[:32]}.json"

    def _stored_cycles(self) -> dict[str, Any]:
        if self._disk is None:
            self._disk = {}
            path = self._cycles_path()
            if path is not None and path.is_file():
                try:
                    self._disk = json.loads(path.read_text())
                except (OSError, ValueError):
                    log.warning("ignoring unreadable cycle cache %s", path)
        return self._disk

    def _store_cycles(self, key: str, value: dict | list) -> None:
        self._stored_cycles()[key] = value
        self._unsaved = True
        if not self._deferred:
            self._save_cycles()

    def _save_cycles(self) -> None:
        path = self._cycles_path()
        if path is None or not self._unsaved:
            return
        try:
            write_text(path, json.dumps(self._disk))
        except OSError as exc:  # a read-only cache only costs time
            log.warning("cannot write the cycle cache %s: %s", path, exc)
        self._unsaved = False

    @contextmanager
    def saving_once(self) -> Iterator[None]:
        """Within the block, simulated points are written to the cycle cache once, at its end
        (a batch may simulate thousands; rewriting the file after each costs quadratic time)."""
        self._deferred = True
        try:
            yield
        finally:
            self._deferred = False
            self._save_cycles()

    def row_fractions(self, m: int, n: int) -> tuple[float, float]:
        """The share of the tile's A rows and B rows a launch of M x N really has when it is a
        single partial tile in that dimension (1 otherwise)."""
        e = self.entry
        return min(1.0, m / e.tile_m), min(1.0, n / e.tile_n)

    def cycles(
        self,
        k_local: int,
        log2_k_split: int,
        cal: Calibration,
        fracs: tuple[float, float] = (1.0, 1.0),
        bytes_per_clk: float | None = None,
        faster: str | None = None,
    ) -> WorkgroupCycles:
        """Workgroup cycles at any per-workgroup K: simulated at the traced Ks around it and
        interpolated (linear in K beyond the largest: the main loop repeats). With
        `bytes_per_clk`, simulated at the rates of SIM_BYTES_PER_CLK around it and interpolated
        in clocks per byte; a partial tile's row fractions, simulated at the multiples of
        1/FRACTION_STEPS around them and interpolated linearly (so a few simulations serve
        every shape, and no kernel is charged rows it does not have)."""
        parts = [
            (wm * wn, self._at_rate(k_local, log2_k_split, cal, (fm, fn), bytes_per_clk, faster))
            for fm, wm in fraction_points(fracs[0])
            for fn, wn in fraction_points(fracs[1])
        ]
        return weighted_cycles(parts)

    def _at_rate(
        self, k_local, log2_k_split, cal, fracs, bytes_per_clk, faster=None
    ) -> WorkgroupCycles:
        if bytes_per_clk is None:
            return self._at_k(k_local, log2_k_split, cal, fracs, None, faster)
        lo, hi, weight = bracket_bytes_per_clk(bytes_per_clk)
        a = self._at_k(k_local, log2_k_split, cal, fracs, SIM_BYTES_PER_CLK[int(lo)], faster)
        b = self._at_k(k_local, log2_k_split, cal, fracs, SIM_BYTES_PER_CLK[int(hi)], faster)
        return blend_cycles(a, b, float(weight))

    def _at_k(self, k_local, log2_k_split, cal, fracs, bpc, faster=None) -> WorkgroupCycles:
        points = {
            x: self.simulated(x, log2_k_split, cal, fracs, bpc, faster)
            for x in _traced_ks_around(k_local)
        }
        if k_local in points:
            return points[k_local]
        values = {}
        for f in fields(WorkgroupCycles):
            series = {x: float(getattr(p, f.name)) for x, p in points.items()}
            values[f.name] = interpolate_cycles(series, k_local)
        values["mfma_count"] = round(values["mfma_count"])
        return WorkgroupCycles(**values)

    def vmem_side_bytes(self, k_local: int, log2_k_split: int) -> np.ndarray:
        """The in-range bytes of a traced K's buffer accesses by operand side (trace.SIDE_NONE,
        SIDE_M, SIDE_N): the bytes at row fractions (fm, fn) are their dot with (1, fm, fn)."""
        key = (k_local, log2_k_split)
        if key not in self._sides:
            name = f"vmem-sides:{key!r}"  # kept beside the cycles: loading a trace costs more
            stored = self._stored_cycles().get(name)
            if stored is None:
                waves = self.trace(k_local, log2_k_split).waves
                stored = sum(
                    np.bincount(w.vmem_side, weights=w.vmem_bytes, minlength=3) for w in waves
                ).tolist()
                self._store_cycles(name, stored)
            self._sides[key] = np.array(stored, dtype=float)
        return self._sides[key]

    def vmem_bytes(self, k_local: int, log2_k_split: int, fracs: tuple[float, float]) -> float:
        """Bytes one workgroup's buffer accesses move at per-workgroup K (from the traces:
        linear in K between and beyond the traced Ks)."""
        points = {
            x: workgroup_vmem_bytes(self.trace(x, log2_k_split), *fracs)
            for x in _traced_ks_around(k_local)
        }
        return interpolate_cycles(points, k_local) if k_local not in points else points[k_local]


def _traced_ks_around(k_local: int) -> list[int]:
    if k_local in TRACE_KS:
        return [k_local]
    if k_local < TRACE_KS[-1]:
        return [max(x for x in TRACE_KS if x < k_local), min(x for x in TRACE_KS if x > k_local)]
    return list(TRACE_KS[-2:])


def blend_cycles(a: WorkgroupCycles, b: WorkgroupCycles, weight: float) -> WorkgroupCycles:
    """(1 - weight) a + weight b, field by field."""
    return weighted_cycles([(1 - weight, a), (weight, b)])


def weighted_cycles(parts: list[tuple[float, WorkgroupCycles]]) -> WorkgroupCycles:
    """The weighted sum of workgroup cycles (weights summing to 1), field by field."""
    if len(parts) == 1:
        return parts[0][1]
    values = {
        f.name: sum(w * float(getattr(c, f.name)) for w, c in parts)
        for f in fields(WorkgroupCycles)
    }
    values["mfma_count"] = round(values["mfma_count"])
    return WorkgroupCycles(**values)


def fraction_points(frac: float) -> list[tuple[float, float]]:
    """The simulated row fractions around `frac` with their linear interpolation weights."""
    scaled = frac * FRACTION_STEPS
    lo = int(scaled)
    if scaled == lo:
        return [(frac, 1.0)]
    weight = scaled - lo
    return [(lo / FRACTION_STEPS, 1.0 - weight), ((lo + 1) / FRACTION_STEPS, weight)]
