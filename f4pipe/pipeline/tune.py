"""`f4pipe tune`: a tuned a4w4 table for every shape of a model's shape lists, in aiter's own
format, picked by the cycle model among the kernels safe at each shape.

For each shape list (f4pipe.aiter.traffic.read_shapes) every M range is cut to the M values
aiter's lookup distinguishes (f4pipe.aiter.lookup.distinct_ms: one row per getPaddedM gl=0
value serves every M). At each (M, N, K) every BpreShuffle kernel (aiter's gemm_a4w4 hands the
kernels a pre-shuffled B) at every split the launcher accepts and aiter's tuner races (log2 0..3
for the splitK kernels; f4pipe.aiter.shaperules.check_shape) is a candidate; it is safe when the
shape rules hold at the row's M and at the smallest M the row serves, and neither the shape-edge
sweep nor the splitK stage saw it fail where the rules call it safe. Every candidate is
predicted in one f4pipe.perf.batch.predict_rows call; `choose` picks the fastest safe one. A
shape with no safe candidate is kept in the TUNE table with status "no safe asm kernel" and
never written to the tuned CSV.

Nothing in the CSV (f4pipe.pipeline.tunedcsv) is invented: `us`, `tflops` and `bw` are
predicted (the provenance file beside it says so, with the model's error band per M range),
kernelId is -1 (aiter's dispatch never reads it: f4pipe.aiter.tuned.NO_KERNEL_ID) and errRatio
is measured the way aiter's tuner measures it (f4pipe.pipeline.tuneerr), on one emulated run per
(kernel, split, edge classes); a pick that run refutes is dropped and its shape picks again.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from f4pipe.aiter.lookup import TunedIndex, distinct_ms, lookup
from f4pipe.aiter.manifest import KernelEntry, Manifest
from f4pipe.aiter.shaperules import (
    EDGE_K_MIN,
    EDGE_K_MULTI,
    EDGE_K_TAIL,
    EDGE_K_TAIL_ROW,
    K_BLOCK,
    Violation,
    check_shape,
    violations,
)
from f4pipe.aiter.traffic import ShapeSpec, read_shapes
from f4pipe.arch.gfx950 import ARCH, NUM_CU
from f4pipe.core.errors import InputError, ShapeError
from f4pipe.core.layout import BASE_VARIANTS
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.host.benchprotocol import Protocol
from f4pipe.pipeline.resultstore import ResultStore
from f4pipe.pipeline.tuneerr import err_ratios
from f4pipe.pipeline.tunemeasure import BY_PREDICTION, decision_time, measure

if TYPE_CHECKING:
    from f4pipe.core.device import Device
    from f4pipe.perf.predict import Predictor

#: The variant whose verdicts hold for aiter's own code objects (the ones a tuned table names).
ORIGINAL = BASE_VARIANTS[0]
#: The splits aiter's a4w4 tuner races on a splitK kernel: range(compute_gemm_SplitK + 1), and
#: compute_gemm_SplitK returns 3 (aiter/ops/gemm_op_a4w4.py, both versions).
TUNER_SPLITS = (0, 1, 2, 3)
STATUS_TUNED = "tuned"
STATUS_NO_SAFE = "no safe asm kernel"
STATUS_REFUSED = "refused"


@dataclass(frozen=True)
class ShapeList:
    name: str  # the file's stem: results/<aiter-id>/tuned/<name>.csv
    path: Path
    specs: tuple[ShapeSpec, ...]
    exact: bool = False  # each M as given (aiter's own rows), not cut to aiter's M steps


def read_lists(paths: Sequence[Path], manifest: Manifest) -> list[ShapeList]:
    """The shape lists, each kernel a shape is pinned to checked against the manifest."""
    names = {e.name for e in manifest}
    lists = []
    for path in paths:
        specs = read_shapes(path)
        for s in specs:
            if s.kernel and s.kernel not in names:
                raise InputError(
                    f"{path}:{s.line}: kernel {s.kernel!r} is not in the f4gemm manifest "
                    f"(one of {', '.join(sorted(names)[:3])}, ...; `f4pipe predict` lists them)"
                )
        lists.append(ShapeList(path.stem, path, tuple(specs)))
    stems = [x.name for x in lists]
    if len(set(stems)) != len(stems):
        raise InputError(f"shape lists {[str(p) for p in paths]}: two share a file name")
    return lists


def aiter_rows_list(tables: Mapping[str, pd.DataFrame], manifest: Manifest) -> ShapeList:
    """aiter's own asm rows for this device (every fetched table, each (M, N, K) once) as a
    shape list tuned at exactly their M: the check of the model against aiter's tuner."""
    symbols = {e.symbol for e in manifest}
    specs: dict[tuple[int, int, int], ShapeSpec] = {}
    for name, df in tables.items():
        gfx = df["gfx"].astype(str).str.strip() if "gfx" in df.columns else None
        for i, r in enumerate(df.itertuples(index=False)):
            d = r._asdict()
            if str(d["kernelName"]).strip() not in symbols or int(d["cu_num"]) != NUM_CU:
                continue
            if gfx is not None and gfx.iloc[i] != ARCH:
                continue
            m, n, k = int(d["M"]), int(d["N"]), int(d["K"])
            where = f"{name}:{int(d['line'])}"
            specs.setdefault((m, n, k), ShapeSpec(where, m, m, n, k, int(d["line"])))
    return ShapeList(AITER_ROWS, Path("aiter-tables"), tuple(specs.values()), exact=True)


#: The list name of aiter's own rows in the TUNE table.
AITER_ROWS = "aiter-rows"


# --- safety --------------------------------------------------------------------------------


def edge_classes(
    entry: KernelEntry, m: int, n: int, k: int, found: Sequence[Violation] | None = None
) -> frozenset[str]:
    """The edge classes a shape exercises for a kernel: the rules it breaks (`found`, when the
    caller has them), its K class (the sweep's aligned shapes), and its K tail."""
    broken = found if found is not None else violations(entry, m, n, k)
    classes = {v.edge_class for v in broken}
    classes.add(EDGE_K_MIN if k == K_BLOCK else EDGE_K_MULTI)
    if k % K_BLOCK:
        classes.add(EDGE_K_TAIL_ROW if m == 1 else EDGE_K_TAIL)
    return frozenset(classes)


@dataclass(frozen=True)
class Evidence:
    """What the pipeline's runs saw fail where the rules call a kernel safe."""

    edge: Mapping[tuple[str, str], str]  # (kernel, edge class) -> the sweep's verdict
    splitk: Mapping[tuple[str, int], str]  # (kernel, log2_k_split) -> the splitK status

    @classmethod
    def none(cls) -> Evidence:
        return cls({}, {})

    @classmethod
    def from_tables(cls, safety: pd.DataFrame | None, splitk: pd.DataFrame | None) -> Evidence:
        edge: dict[tuple[str, str], str] = {}
        if safety is not None and len(safety):
            original = safety["variant"].fillna(ORIGINAL) == ORIGINAL  # null: before variants
            bad = safety[
                original
                & (safety["policy"] == "unsafe")
                & safety["rule_safe"]
                & (safety["verdict"] != "safe")
            ]
            edge = {(r.kernel, r.edge_class): r.verdict for r in bad.itertuples()}
        split: dict[tuple[str, int], str] = {}
        if splitk is not None and len(splitk):
            bad = splitk[
                (splitk["variant"] == ORIGINAL) & splitk["status"].isin(["failed", "hazard"])
            ]
            split = {(r.kernel, int(r.log2_k_split)): r.status for r in bad.itertuples()}
        return cls(edge, split)


def unsafe_reason(
    entry: KernelEntry, m_key: int, m_low: int, n: int, k: int, split: int, evidence: Evidence
) -> str:
    """Why the candidate is unsafe for the M values its row serves ("" = safe)."""
    reasons = []
    name = _name(entry)
    for m in sorted({m_low, m_key}):
        found = violations(entry, m, n, k)
        reasons += [f"M={m}: {v.message}" for v in found]
        if not evidence.edge:
            continue
        for cls in sorted(edge_classes(entry, m, n, k, found)):
            if (name, cls) in evidence.edge:
                reasons.append(f"the edge sweep found {cls} {evidence.edge[name, cls]}")
    if (name, split) in evidence.splitk:
        reasons.append(f"the splitK stage found split {split} {evidence.splitk[name, split]}")
    return "; ".join(dict.fromkeys(reasons))


# --- candidates ----------------------------------------------------------------------------


@functools.cache
def _name(entry: KernelEntry) -> str:
    """entry.name, a property that builds a Path, kept: the candidates ask for it 10^5 times."""
    return entry.name


@functools.cache
def _splits(entry: KernelEntry, k: int) -> tuple[int, ...]:
    """The splits of TUNER_SPLITS the launcher accepts for the kernel at K."""
    ok = []
    for split in TUNER_SPLITS if entry.splitk else (0,):
        try:
            check_shape(1, 16, k, split, entry=entry, edge_policy="unsafe")
        except ShapeError:
            continue
        ok.append(split)
    return tuple(ok)


def candidates(lists: Sequence[ShapeList], manifest: Manifest, evidence: Evidence) -> pd.DataFrame:
    """One row per (list, shape, kernel, split) the launcher accepts, with its safety; a shape
    the kernels refuse outright keeps one row (kernel "", status refused)."""
    pool = [(e, _name(e)) for e in manifest if e.bpreshuffle]
    rows: list[dict[str, Any]] = []
    for sl in lists:
        for spec in sl.specs:
            keys, lows = distinct_ms(spec.m_lo, spec.m_hi, spec.n)
            if sl.exact:
                keys = lows = np.arange(spec.m_lo, spec.m_hi + 1)
            entries = [(e, name) for e, name in pool if not spec.kernel or name == spec.kernel]
            for m_key, m_low in zip(keys.tolist(), lows.tolist(), strict=True):
                base = {
                    "list": sl.name,
                    "name": spec.name,
                    "line": spec.line,
                    "m": m_key,
                    "m_low": max(m_low, 1),
                    "n": spec.n,
                    "k": spec.k,
                }
                try:
                    check_shape(m_key, spec.n, spec.k)
                except ShapeError as exc:
                    rows.append({**base, "kernel": "", "log2_k_split": 0, "reason": str(exc)})
                    continue
                for e, name in entries:
                    for split in _splits(e, spec.k):
                        reason = unsafe_reason(e, m_key, m_low, spec.n, spec.k, split, evidence)
                        rows.append(
                            {**base, "kernel": name, "log2_k_split": split, "reason": reason}
                        )
    frame = pd.DataFrame(rows)
    frame["safe"] = (frame["kernel"] != "") & (frame["reason"] == "")
    return frame


def predict(frame: pd.DataFrame, manifest: Manifest, predictor: Predictor) -> pd.DataFrame:
    """us_pred and tflops_pred of every candidate, in one predict_rows call."""
    from f4pipe.perf.batch import predict_rows

    frame = frame.copy()
    frame["us_pred"] = np.nan
    frame["tflops_pred"] = np.nan
    run = frame.index[frame["kernel"] != ""]
    if len(run):
        by_name = {e.name: e for e in manifest}
        sub = frame.loc[run]
        got = predict_rows(
            predictor,
            [by_name[x] for x in sub["kernel"]],
            sub["m"].to_numpy(),
            sub["n"].to_numpy(),
            sub["k"].to_numpy(),
            sub["log2_k_split"].to_numpy(),
        )
        frame.loc[run, "us_pred"] = got.us
        frame.loc[run, "tflops_pred"] = got.tflops
    return frame


SHAPE_KEY = ["list", "name", "line", "m", "n", "k"]


def choose(frame: pd.DataFrame) -> pd.Series:
    """The pick of each shape: its fastest safe candidate by predicted time (ties: the first
    in manifest order), or by measured time where tunemeasure timed the shape's candidates the
    model cannot separate. The one place a pick is made."""
    time = decision_time(frame)
    safe = frame[frame["safe"] & time.notna()]
    order = time[safe.index].sort_values(kind="stable").index
    best = safe.loc[order].groupby(SHAPE_KEY, sort=False).head(1)
    return frame.index.isin(best.index)


def shape_status(frame: pd.DataFrame) -> pd.Series:
    """Per candidate row: its shape's status (tuned, no safe asm kernel, refused)."""
    refused = (frame["kernel"] == "").groupby([frame[c] for c in SHAPE_KEY]).transform("all")
    picked = frame.groupby(SHAPE_KEY)["picked"].transform("any")
    return pd.Series(
        np.where(refused, STATUS_REFUSED, np.where(picked, STATUS_TUNED, STATUS_NO_SAFE)),
        index=frame.index,
    )


# --- aiter's own tables at the same shapes --------------------------------------------------


def aiter_view(frame: pd.DataFrame, index: TunedIndex | None, manifest: Manifest) -> pd.DataFrame:
    """What aiter's own tables make of each shape (its lookup at the row's M): hit / miss /
    error, the recorded kernel and split, whether it is safe, where the row is."""
    shapes = frame.drop_duplicates(SHAPE_KEY)[[*SHAPE_KEY, "m_low"]]
    out = []
    for r in shapes.itertuples(index=False):
        view = {c: getattr(r, c) for c in SHAPE_KEY}
        if index is None:
            out.append(
                {
                    **view,
                    "aiter_outcome": "",
                    "aiter_kernel": "",
                    "aiter_split": None,
                    "aiter_safe": None,
                    "aiter_row": "",
                }
            )
            continue
        hit = lookup(index, manifest, r.m, r.n, r.k, cu_num=NUM_CU, gfx=ARCH)
        low = lookup(index, manifest, r.m_low, r.n, r.k, cu_num=NUM_CU, gfx=ARCH)
        safe = hit.safe if hit.safe is None or low.row != hit.row else hit.safe and low.safe
        out.append(
            {
                **view,
                "aiter_outcome": hit.outcome,
                "aiter_kernel": hit.kernel if hit.row is not None else "",
                "aiter_split": hit.log2_k_split if hit.row is not None else None,
                "aiter_safe": safe if hit.row is not None else None,
                "aiter_row": hit.row.where() if hit.row is not None else "",
            }
        )
    return frame.merge(pd.DataFrame(out), on=SHAPE_KEY, how="left")


#: Rounds of pick, emulate, drop what the emulator refutes: each round only emulates picks new
#: to it, and a shape runs out of candidates long before this.
MAX_ROUNDS = 8


def emulated_picks(
    frame: pd.DataFrame, manifest: Manifest, keys: ArtifactKeys, store: ResultStore | None
) -> pd.DataFrame:
    """The picks, each emulated for its errRatio; a pick whose run faults or exceeds aiter's
    errRatio limit is marked unsafe (the reason names the run) and its shape picks again."""
    from f4pipe.aiter.tuned import ERR_RATIO_LIMIT

    frame = frame.copy()
    if "err_ratio" not in frame:  # a second pass (after timing) keeps what the first found
        frame["err_ratio"] = np.nan
        frame["err_shape"] = ""
    runs: dict[tuple, dict[str, Any]] = {}
    for _ in range(MAX_ROUNDS):
        frame["picked"] = choose(frame)
        todo = frame[frame["picked"] & (frame["err_shape"] == "")]
        if not len(todo):
            break
        errs = err_ratios(todo, manifest, keys, store, runs)
        frame.loc[errs.index, "err_ratio"] = errs["err_ratio"].astype(float)
        frame.loc[errs.index, "err_shape"] = errs["err_shape"]
        bad = errs[(errs["fault"] != "") | (errs["err_ratio"].astype(float) > ERR_RATIO_LIMIT)]
        for i, r in bad.iterrows():
            what = r["fault"] or f"errRatio {r['err_ratio']} > {ERR_RATIO_LIMIT}"
            frame.loc[i, ["safe", "reason"]] = False, f"emulated at {r['err_shape']}: {what}"
    else:
        raise RuntimeError(f"tune: picks still refuted by the emulator after {MAX_ROUNDS} rounds")
    return frame


# --- the whole stage -----------------------------------------------------------------------


def tune_lists(
    lists: Sequence[ShapeList],
    manifest: Manifest,
    keys: ArtifactKeys,
    predictor: Predictor,
    *,
    index: TunedIndex | None = None,
    evidence: Evidence | None = None,
    store: ResultStore | None = None,
    bench: pd.DataFrame | None = None,
    device: Device | None = None,
    protocol: Protocol | None = None,
) -> pd.DataFrame:
    """TUNE rows (f4pipe.core.schemas): every candidate of every shape, the picks marked, with
    aiter's own answer at the shape, the pick's errRatio, and the time a GPU measured where
    the bench stage (`bench`) ran the candidate at its shape. On a `device` that times
    launches, the candidates the model cannot separate are timed with `protocol` and the
    measured fastest is picked (tunemeasure)."""
    frame = candidates(lists, manifest, evidence or Evidence.none())
    frame = predict(frame, manifest, predictor)
    cal = predictor.calibration_file
    p90 = {m: cal.error_band(m)[1] for m in frame["m"].unique().tolist()}
    frame["band_p90_pct"] = frame["m"].map(p90).astype(float)
    frame["us_measured"] = measured_us(frame, bench)
    frame["measured_on"] = ""
    frame["decided_by"] = BY_PREDICTION
    frame = emulated_picks(frame, manifest, keys, store)
    if device is not None and device.can_time:
        frame = measure(frame, manifest, device, protocol or Protocol(), SHAPE_KEY)
        frame = emulated_picks(frame, manifest, keys, store)  # errRatio of measured picks
    frame["status"] = shape_status(frame)
    frame = aiter_view(frame, index, manifest)
    for col, value in keys.as_row().items():
        frame[col] = value
    return frame


def measured_us(frame: pd.DataFrame, bench: pd.DataFrame | None) -> pd.Series:
    """Per candidate: the median launch time the bench stage measured on a GPU for the
    original kernel at exactly its shape and split (NaN where none did)."""
    key = ["kernel", "m", "n", "k", "log2_k_split"]
    if bench is None or not len(bench):
        return pd.Series(np.nan, index=frame.index)
    ran = bench[(bench["status"] == "measured") & (bench["variant"] == ORIGINAL)]
    times = ran.groupby(key)["us"].median().rename("us_measured").reset_index()
    return frame[key].merge(times, on=key, how="left")["us_measured"].set_axis(frame.index)


def gains(frame: pd.DataFrame) -> pd.DataFrame:
    """Per shape whose aiter row runs an asm kernel: the pick, aiter's recorded kernel, both
    predicted times, the predicted gain of the pick (%), and whether it is inside the model's
    p90 error for that M ("within the model's error")."""
    picks = frame[frame["picked"]].set_index(SHAPE_KEY)
    cand = frame.set_index([*SHAPE_KEY, "kernel", "log2_k_split"])["us_pred"]
    asm = picks[(picks["aiter_kernel"].isin(set(frame["kernel"]))) & picks["aiter_split"].notna()]
    rows = []
    for key, r in asm.iterrows():
        ck = (*key, r["aiter_kernel"], int(r["aiter_split"]))
        aiter_us = cand.get(ck) if ck in cand.index else None
        gain = None if aiter_us is None else (aiter_us / r["us_pred"] - 1) * 100
        rows.append(
            {
                **dict(zip(SHAPE_KEY, key, strict=True)),
                "pick": r["kernel"],
                "pick_split": int(r["log2_k_split"]),
                "pick_us": r["us_pred"],
                "aiter_kernel": r["aiter_kernel"],
                "aiter_split": int(r["aiter_split"]),
                "aiter_us_pred": aiter_us,
                "aiter_safe": r["aiter_safe"],
                "gain_pct": gain,
                "within_error": gain is not None and gain <= r["band_p90_pct"],
                "same": r["kernel"] == r["aiter_kernel"]
                and int(r["log2_k_split"]) == int(r["aiter_split"]),
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Summary:
    """One shape list at a glance (the report's card, the command's lines)."""

    list: str
    shapes: int
    tuned: int
    no_safe: int
    refused: int
    aiter_hits: int  # shapes aiter's own tables have a row for
    aiter_asm: int  # of them, rows that run an asm kernel
    aiter_unsafe: int  # of those, rows unsafe at the shape (the tuned table replaces them)
    same: int  # the pick is aiter's recorded kernel and split
    within_error: int  # a different pick whose predicted gain is inside the model's p90 error
    gain_median_pct: float | None  # median predicted gain of the pick where it is not aiter's
    lacking: int  # shapes aiter's tables miss (heuristic or raise) that the tuned table covers


def summarize(frame: pd.DataFrame) -> list[Summary]:
    out = []
    for name, mine in frame.groupby("list", sort=False):
        shapes = mine.drop_duplicates(SHAPE_KEY)
        g = gains(mine)
        safe = g[g["aiter_safe"].astype(bool)] if len(g) else g
        counts = shapes["status"].value_counts()
        out.append(
            Summary(
                list=str(name),
                shapes=len(shapes),
                tuned=int(counts.get(STATUS_TUNED, 0)),
                no_safe=int(counts.get(STATUS_NO_SAFE, 0)),
                refused=int(counts.get(STATUS_REFUSED, 0)),
                aiter_hits=int((shapes["aiter_outcome"] == "hit").sum()),
                aiter_asm=len(g),
                aiter_unsafe=int((~g["aiter_safe"].astype(bool)).sum()) if len(g) else 0,
                same=int(safe["same"].sum()) if len(safe) else 0,
                within_error=int((safe["within_error"] & ~safe["same"]).sum()) if len(safe) else 0,
                gain_median_pct=_median_gain(safe),
                lacking=int(
                    ((shapes["aiter_outcome"] != "hit") & (shapes["status"] == STATUS_TUNED)).sum()
                ),
            )
        )
    return out


def _median_gain(compared: pd.DataFrame) -> float | None:
    """The median predicted gain over the rows where the pick is not aiter's kernel."""
    if not len(compared):
        return None
    gains_pct = compared.loc[~compared["same"], "gain_pct"].dropna()
    return float(gains_pct.median()) if len(gains_pct) else None


def summary_line(s: Summary) -> str:
    """A list's summary as one line (clauses with nothing to say left out)."""
    head = [f"{s.list}: {s.shapes} shape(s), {s.tuned} tuned"]
    if s.no_safe:
        head.append(f"{s.no_safe} with no safe asm kernel")
    if s.refused:
        head.append(f"{s.refused} refused by every kernel")
    parts = [", ".join(head)]
    if s.aiter_hits:
        ck = s.aiter_hits - s.aiter_asm
        parts.append(
            f"aiter's tables have a row for {s.aiter_hits} ({s.aiter_asm} asm, "
            f"{s.aiter_unsafe} of them unsafe and replaced; {ck} CK, left to aiter's tuner)"
        )
    compared = s.aiter_asm - s.aiter_unsafe
    if compared:
        agree = s.same + s.within_error
        gain = (
            ""
            if s.gain_median_pct is None
            else f"; where they differ, median PREDICTED gain {s.gain_median_pct:.1f} %"
        )
        parts.append(
            f"the pick is aiter's kernel or within the model's error of it at {agree} of "
            f"{compared} safe asm rows ({100 * agree / compared:.0f} %: {s.same} the same, "
            f"{s.within_error} within the error){gain}"
        )
    parts.append(f"{s.lacking} shape(s) aiter's tables lack are covered")
    return (
        ", ".join(parts[: 1 + bool(s.no_safe) + bool(s.refused)])
        + "; "
        + "; ".join(parts[1 + bool(s.no_safe) + bool(s.refused) :])
    )
