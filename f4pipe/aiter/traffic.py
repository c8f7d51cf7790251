"""Coverage of real traffic: for each GEMM a model dispatches, what aiter runs and whether it
is right and fast.

A shape list is a CSV with columns M, N, K and optionally `name` (what the GEMM is, e.g.
`mlp.down_proj`) and `kernel` (a kernel the shape is pinned to: `f4pipe tune` then weighs only
it); M is one value or a range `lo-hi` (every batch size in it). Each shape is
resolved through aiter's lookup (f4pipe.aiter.lookup) for every M; consecutive M values that
resolve alike (same row or fallback, same kernels, same safety verdict) form one group, so a
range of 16,384 batch sizes prints as a handful of lines. With the cycle model, each group
also gets the predicted time of what runs and of the predicted best kernel safe there, at the
group's largest M (the slowest of the group); predicted, never measured.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from f4pipe.aiter.lookup import (
    LEVELS,
    Resolution,
    TunedIndex,
    fallback_pool,
    lookup,
    padded_m_array,
)
from f4pipe.aiter.manifest import Manifest
from f4pipe.aiter.shaperules import check_shape, short_name
from f4pipe.core.errors import InputError, ShapeError
from f4pipe.core.fsio import read_input_text

if TYPE_CHECKING:
    from f4pipe.perf.predict import Ranked

#: A shape list is small (a model has tens of GEMMs).
MAX_SHAPES_BYTES = 1 << 20
#: The widest M range one shape may span (every M in it is looked up).
MAX_M_RANGE = 1 << 17
#: Candidates of a fallback listed by name (more are counted).
MAX_LISTED = 4


@dataclass(frozen=True)
class ShapeSpec:
    name: str
    m_lo: int
    m_hi: int
    n: int
    k: int
    line: int
    kernel: str = ""  # the .co name the shape is pinned to ("" = any)


@dataclass(frozen=True)
class Group:
    """M values of one shape that aiter serves alike."""

    spec: ShapeSpec
    m_lo: int
    m_hi: int
    resolution: Resolution  # at m_hi
    hows: str  # how its M values reach the row: exact, padded (gl=0), ... or heuristic


def _positive(text: str, what: str, where: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{where}: {what} is {text!r}, not an integer") from None
    if value < 1:
        raise InputError(f"{where}: {what} is {value}, must be >= 1")
    return value


def parse_m(text: str, where: str) -> tuple[int, int]:
    """M as `64` or `1-8192`."""
    text = text.strip()
    lo, sep, hi = text.partition("-")
    m_lo = _positive(lo, "M", where)
    m_hi = _positive(hi, "M", where) if sep else m_lo
    if m_hi < m_lo:
        raise InputError(f"{where}: M range {text!r} runs backwards")
    if m_hi - m_lo >= MAX_M_RANGE:
        raise InputError(f"{where}: M range {text!r} spans more than {MAX_M_RANGE} values")
    return m_lo, m_hi


def read_shapes(path: Path) -> list[ShapeSpec]:
    """A shape list (columns M, N, K[, name]; names matched without regard to case)."""
    text = read_input_text(path, "shape list", MAX_SHAPES_BYTES)
    reader = csv.DictReader(io.StringIO(text))
    columns = {c.strip().lower(): c for c in reader.fieldnames or []}
    missing = [c for c in ("m", "n", "k") if c not in columns]
    if missing:
        raise InputError(
            f"{path}:1: columns {[c.upper() for c in missing]} missing (a shape list has columns "
            "M, N, K and optionally name and kernel; M may be a range such as 1-8192)"
        )
    specs = []
    for line, row in enumerate(reader, start=2):
        where = f"{path}:{line}"
        m_lo, m_hi = parse_m(row[columns["m"]] or "", where)
        spec = ShapeSpec(
            name=(row.get(columns.get("name", ""), "") or "").strip(),
            m_lo=m_lo,
            m_hi=m_hi,
            n=_positive((row[columns["n"]] or "").strip(), "N", where),
            k=_positive((row[columns["k"]] or "").strip(), "K", where),
            line=line,
            kernel=(row.get(columns.get("kernel", ""), "") or "").strip(),
        )
        specs.append(checked(spec, where))
    if not specs:
        raise InputError(f"{path}: no shapes (one row per GEMM: M, N, K)")
    return specs


def parse_shape(text: str) -> ShapeSpec:
    """`M,N,K` from the command line (M may be a range)."""
    parts = text.split(",")
    if len(parts) != 3:
        raise InputError(f"--shape {text!r}: expected M,N,K (M may be a range such as 1-256)")
    m_lo, m_hi = parse_m(parts[0], f"--shape {text}")
    n = _positive(parts[1].strip(), "N", f"--shape {text}")
    k = _positive(parts[2].strip(), "K", f"--shape {text}")
    return checked(ShapeSpec("", m_lo, m_hi, n, k, 0))


def checked(spec: ShapeSpec, where: str = "") -> ShapeSpec:
    """`spec`, if the one shape check (f4pipe.aiter.shaperules.check_shape, the words `predict`
    and `gemm` use) admits both ends of its M range; else its ShapeError, prefixed by `where`."""
    try:
        for m in sorted({spec.m_lo, spec.m_hi}):
            check_shape(m, spec.n, spec.k)
    except ShapeError as exc:
        raise ShapeError(f"{where}: {exc}" if where else str(exc)) from None
    return spec


def _signature(r: Resolution) -> tuple:
    """What a user sees of a resolution: the same row (however M got there), kernels and
    verdict."""
    how = "" if r.row is not None else r.how
    return (r.outcome, r.row, r.kernel, r.candidates, r.unsafe, r.log2_k_split, how)


def _run_keys(
    index: TunedIndex, manifest: Manifest, ms: np.ndarray, n: int, k: int, cu_num: int, gfx: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per M: an id that changes wherever aiter's answer may change (the row hit, or the set
    of kernels its fallback may pick), and the lookup level (0 exact, 1 and 2 padded, 3 miss).
    Computed for the whole range at once, so a range of M costs one lookup per distinct answer."""
    tuned = np.array(
        sorted(
            key[-3]
            for key in index.rows
            if key[-2:] == (n, k) and key[:-3] == index.key(gfx, cu_num, 0, n, k)[:-3]
        ),
        dtype=np.int64,
    )
    target = np.where(np.isin(ms, tuned), ms, 0)
    level = np.where(target > 0, 0, 3)
    for gl in (0, 1):
        padded = padded_m_array(ms, n, gl)
        fill = (target == 0) & np.isin(padded, tuned)
        target = np.where(fill, padded, target)
        level = np.where(fill, gl + 1, level)
    pool = fallback_pool(index.rules, manifest, n)
    if pool:
        tiles_n = np.array([-(-n // e.tile_n) for e in pool], dtype=np.int64)[:, None]
        tiles_m = -(-ms[None, :] // np.array([e.tile_m for e in pool], dtype=np.int64)[:, None])
        rounds = -(-(tiles_m * tiles_n) // cu_num)
        best = rounds == rounds.min(axis=0)
        _, fallback = np.unique(best.T, axis=0, return_inverse=True)
    else:
        fallback = np.zeros(len(ms), dtype=np.int64)
    return np.where(target > 0, target, -1 - fallback.reshape(-1)), level


def groups(
    index: TunedIndex, manifest: Manifest, spec: ShapeSpec, *, cu_num: int, gfx: str
) -> list[Group]:
    """The shape's M values grouped by how aiter serves them."""
    ms = np.arange(spec.m_lo, spec.m_hi + 1, dtype=np.int64)
    keys, level = _run_keys(index, manifest, ms, spec.n, spec.k, cu_num, gfx)
    cuts = np.flatnonzero(np.diff(keys)) + 1
    out: list[Group] = []
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(ms)], strict=True):
        out += _split_run(index, manifest, spec, ms[a:b], level[a:b], cu_num, gfx)
    return out


def _split_run(index, manifest, spec, ms, level, cu_num: int, gfx: str) -> list[Group]:
    """Groups of one run of M that hits one row or one fallback: one lookup, unless the
    kernel's safety depends on M (a row's noBpreShuffle kernel: M against its tile)."""

    def resolve(m: int) -> Resolution:
        return lookup(index, manifest, m, spec.n, spec.k, cu_num=cu_num, gfx=gfx)

    hows = ", ".join(LEVELS[x] for x in sorted(set(level.tolist())))
    first, last = resolve(int(ms[0])), resolve(int(ms[-1]))
    if _signature(first) == _signature(last) and _m_independent(first, manifest):
        return [Group(spec, int(ms[0]), int(ms[-1]), last, hows)]
    out: list[Group] = []
    start, prev = int(ms[0]), first
    for m in ms[1:].tolist():
        r = resolve(m)
        if _signature(r) != _signature(prev):
            out.append(Group(spec, start, m - 1, prev, prev.how))
            start = m
        prev = r
    out.append(Group(spec, start, int(ms[-1]), prev, prev.how))
    return out


def _m_independent(r: Resolution, manifest: Manifest) -> bool:
    """Whether the verdict of what runs cannot change with M inside a run (only a
    noBpreShuffle kernel's safety depends on M)."""
    names = [r.kernel] if r.kernel else list(r.candidates)
    entries = {e.name: e for e in manifest}
    return all(entries[x].bpreshuffle for x in names if x in entries)


def coverage_row(g: Group, ranked: list[Ranked] | None = None) -> dict[str, Any]:
    """One COVERAGE row (f4pipe.core.schemas) of a group; `ranked`: every kernel predicted at
    the group's largest M (Predictor.rank_shapes), for the predicted columns."""
    r = g.resolution
    row: dict[str, Any] = {
        "name": g.spec.name,
        "m_lo": g.m_lo,
        "m_hi": g.m_hi,
        "n": g.spec.n,
        "k": g.spec.k,
        "cu_num": r.cu_num,
        "gfx": r.gfx,
        "outcome": r.outcome,
        "how": g.hows if r.outcome == "hit" else r.how,
        "padded_m": r.padded_m,
        "table": r.row.table if r.row else "",
        "line": r.row.line if r.row else None,
        "kernel": r.kernel,
        "candidates": ",".join(r.candidates),
        "unsafe_candidates": ",".join(r.unsafe),
        "log2_k_split": r.log2_k_split,
        "safe": r.safe,
        "us_pred": None,
        "best_kernel_pred": "",
        "best_us_pred": None,
        "gain_pct_pred": None,
    }
    if ranked is not None and r.outcome != "error":
        row.update(_predicted(ranked, g))
    return row


def predicted_shape(g: Group) -> tuple[int, int, int]:
    """The shape a group is predicted at: its largest M, where it runs longest."""
    return g.m_hi, g.spec.n, g.spec.k


def _predicted(ranked: list[Ranked], g: Group) -> dict[str, Any]:
    """The slowest of what may run (one kernel, or every candidate of the fallback) against
    the predicted best kernel safe at the shape, at the group's largest M."""
    r = g.resolution
    running = [r.kernel] if r.kernel else list(r.candidates)
    by_name = {x.prediction.kernel: x for x in ranked}
    times = [by_name[k].prediction.us for k in running if k in by_name]
    best = next((x for x in ranked if x.safe), None)
    if not times or best is None:
        return {}
    us = max(times)
    return {
        "us_pred": round(us, 2),
        "best_kernel_pred": best.prediction.kernel,
        "best_us_pred": round(best.prediction.us, 2),
        "gain_pct_pred": round((us / best.prediction.us - 1) * 100, 1),
    }


def format_row(row: dict[str, Any]) -> str:
    """A coverage row as a person reads it."""
    ms = f"M={row['m_lo']}" if row["m_lo"] == row["m_hi"] else f"M={row['m_lo']}-{row['m_hi']}"
    what = f"{row['name']} " if row["name"] else ""
    head = f"{what}{ms} N={row['n']} K={row['k']}"
    if row["outcome"] == "error":
        return f"{head}: ERROR {row['how']}"
    if row["outcome"] == "hit":
        where = f"{row['table']}:{row['line']} (M={row['padded_m']}; {row['how']})"
        ran = short_name(row["kernel"]) if "_ZN" not in row["kernel"] else row["kernel"]
        split = f" splitK={row['log2_k_split']}" if row["log2_k_split"] else ""
        text = f"{head}: hit {where}, runs {ran}{split}"
    elif row["kernel"]:
        text = f"{head}: MISS, heuristic runs {short_name(row['kernel'])}"
    else:
        names = [short_name(k) for k in row["candidates"].split(",")]
        listed = ", ".join(names) if len(names) <= MAX_LISTED else f"{len(names)} kernels"
        text = (
            f"{head}: MISS, heuristic runs one of {listed} (all take the fewest rounds; the "
            "order of aiter's unordered_map decides)"
        )
    unsafe = [x for x in row["unsafe_candidates"].split(",") if x]
    if row["safe"] is None:
        text += " (CK kernel: not judged)"
    elif row["safe"]:
        text += " (safe)"
    elif unsafe and len(unsafe) < len(row["candidates"].split(",")):
        named = ", ".join(short_name(x) for x in unsafe[:MAX_LISTED])
        more = f" and {len(unsafe) - MAX_LISTED} more" if len(unsafe) > MAX_LISTED else ""
        text += f" ({len(unsafe)} of them UNSAFE at this shape: {named}{more})"
    else:
        text += " (UNSAFE at this shape)"
    if row["us_pred"] is not None:
        slowest = "" if row["kernel"] else " (slowest candidate)"
        text += (
            f"; PREDICTED {row['us_pred']:.1f} us{slowest} vs best safe "
            f"{short_name(row['best_kernel_pred'])} {row['best_us_pred']:.1f} us"
        )
    return text
