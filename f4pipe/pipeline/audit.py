"""Audit of aiter's tuned GEMM tables: which asm rows would make a kernel compute wrong results.

aiter's `a4w4_blockscale_tuned_gemm.csv` (and the per-model tables under `model_configs/`) maps
([gfx,] cu_num, M, N, K) to a kernel; rows whose kernelName is a mangled f4gemm symbol (`_ZN...`)
run our code objects. Headers vary between aiter revisions (a `gfx` first column since 2026;
column names are matched without regard to case); rows for another arch than the kernels' are
not checked but kept as `other-arch` rows, so they are counted. Each such row is held
against the shape rules (f4pipe.host.kernarg.check_shape) and the edge rules
(f4pipe.aiter.shaperules); a row
that breaks an edge rule is then emulated at its own N (and a reduced M and K: the edge
classes it breaks depend on N only, or the reduced M keeps the row's M edge) in two workgroup
orders, and listed with a reproducer command. The emulated verdict is about the user's view:
"wrong" when D[:M, :N] misses the reference, "race" when only aiter's padding rows or the
order of stores differ, "fault" when the kernel leaves its buffers.

Each row keeps aiter's own recorded columns (us, tflops, errRatio) beside f4pipe's verdict, and
its `finding` says what f4pipe observed in terms that can be held against them: the
write-write race across workgroups (several workgroups store the same D element), and in which
legal workgroup orders D[:M,:N] came out wrong or right. aiter's tuner measures one run on
hardware, i.e. one order, so a recorded errRatio of 0 and an f4pipe "wrong" can both be true.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from f4pipe.aiter.aiterdir import AiterDir
from f4pipe.aiter.hostfacts import HostFact
from f4pipe.aiter.manifest import KernelEntry, Manifest
from f4pipe.aiter.shaperules import (
    EDGE_K_MIN,
    EDGE_M_ROWS,
    Violation,
    edge_rule,
    evidence_for,
    k_tail,
    k_tail_answers,
    reproducer,
    short_name,
    violations,
)
from f4pipe.aiter.tuned import ASM_PREFIX, GFX_COLUMN, RECORDED_COLUMNS, read_tuned
from f4pipe.arch.gfx950 import ARCH
from f4pipe.core.cache import f4pipe_identity
from f4pipe.core.errors import ShapeError
from f4pipe.core.layout import EMULATOR_DEVICE_ID
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.core.verdicts import FAULT, RACE, SAFE, WRONG, worst_verdict
from f4pipe.host.kernarg import check_shape
from f4pipe.perf.history import load_history
from f4pipe.pipeline.edgesweep import (
    DEFAULT_ORDERS,
    EdgeShape,
    OrderOutcome,
    reference_for,
    run_order,
)
from f4pipe.pipeline.resultstore import (
    REUSE_KEY,
    REUSED_FROM,
    ResultStore,
    kernel_identity,
    reuse_or_run,
)

if TYPE_CHECKING:
    from f4pipe.perf.predict import Predictor


def _emulation_shape(entry: KernelEntry, m: int, n: int, k: int) -> EdgeShape:
    """The row's N; M cut to at most one tile row unless the row breaks the M rule (then its
    residue is kept); K the smallest allowed, or 256 when K is the rule broken."""
    found = {v.edge_class for v in violations(entry, m, n, k)}
    rule = edge_rule(entry)
    if EDGE_M_ROWS in found:
        m_emu = m % rule.d_row_multiple + rule.d_row_multiple * (m > rule.d_row_multiple)
    else:
        m_emu = min(m, entry.tile_m)
    k_emu = 256 if EDGE_K_MIN in found else max(rule.min_k, 256)
    if k_tail(k):  # keep the tail: the last block reads what it reads at the row's K
        k_emu = max(rule.min_k, 256) + k % 256
    return EdgeShape("audit", m_emu, n, min(k, k_emu))


@dataclass(frozen=True)
class Emulated:
    verdict: str  # safe | race | wrong | fault: about the user's view, D[:M,:N]
    detail: str
    order: str  # the order to reproduce with
    orders: str  # per order: what came out
    finding: str  # what f4pipe shows, in words that can be held against aiter's errRatio


def _order_line(o: OrderOutcome) -> str:
    if o.fault:
        return f"{o.order}: fault ({o.fault})"
    state = f"wrong ({o.bad} bad element(s) of D[:M,:N])" if o.bad else "right"
    return f"{o.order}: {state}, {o.races} raced dword(s)"


def _finding(shape: EdgeShape, outcomes: Sequence[OrderOutcome]) -> str:
    """One paragraph: the race, and in which legal workgroup orders D[:M,:N] is wrong/right."""
    where = f"emulated at M={shape.m} N={shape.n} K={shape.k}, workgroups one at a time"
    faults = [o.order for o in outcomes if o.fault]
    if faults:
        return f"{where}: the kernel accesses memory outside its buffers in order(s) {faults}"
    raced = [o for o in outcomes if o.races]
    race = (
        f"a write-write race across workgroups ({raced[0].race_summary})"
        if raced
        else "no two workgroups store the same element"
    )
    wrong = [o.order for o in outcomes if o.bad]
    right = [o.order for o in outcomes if not o.bad]
    if not wrong:
        return (
            f"{where}: {race}; D[:M,:N] right in every order tried ({', '.join(right)}): "
            "the race touches only aiter's padding or stores equal values"
        )
    first = next(o for o in outcomes if o.bad)
    i, j = first.first_bad  # type: ignore[misc]
    return (
        f"{where}: {race}; D[:M,:N] wrong in workgroup order {', '.join(wrong)} (first "
        f"D[{i},{j}] expected {first.expected:.6g} got {first.got:.6g}), right in workgroup "
        f"order {', '.join(right) or '(none tried)'}. Each is a legal dispatch order, so the "
        "result depends on which workgroup stores last; a run on hardware (aiter's errRatio) "
        "sees one order and can measure 0"
    )


def _emulate(
    entry: KernelEntry, co_path: Path, shape: EdgeShape, orders: Sequence[str]
) -> Emulated:
    from f4pipe.emu import EmulatorDevice, SharedRuns  # only here: the report reads audits

    ref = reference_for(shape)
    outcomes = []
    shared = SharedRuns()  # the launch executes once; the other orders replay its stores
    for order in orders:
        device = EmulatorDevice(workgroup_order=order, isolate_workgroups=True, shared_runs=shared)
        try:
            outcomes.append(run_order(device, entry, co_path, shape, "unsafe", ref))
        finally:
            device.close()
    verdict, detail, order = emulated_verdict(outcomes, orders)
    return Emulated(
        verdict, detail, order, "; ".join(map(_order_line, outcomes)), _finding(shape, outcomes)
    )


def _stored_emulation(
    store: ResultStore | None,
    keys: ArtifactKeys,
    entry: KernelEntry,
    co_path: Path,
    shape: EdgeShape,
    orders: Sequence[str],
) -> tuple[Emulated, dict[str, Any]]:
    """One row's emulation and its reuse columns: from `store` when it holds this kernel's
    bytes and manifest row at this shape in these orders (and the toolchain and f4pipe), else
    run. Only the emulation is stored: the row around it (aiter's columns, the reproducer's
    directory) is this table's."""
    inputs: dict[str, Any] = {}
    if store is not None:
        inputs = {
            "kernel": kernel_identity(entry, co_path, EMULATOR_DEVICE_ID, store),
            "shape": shape,
            "orders": list(orders),
            "device_id": EMULATOR_DEVICE_ID,
            "toolchain_id": keys.toolchain_id,
            "f4pipe": f4pipe_identity(),
        }
    (stored,) = reuse_or_run(
        store,
        "audit",
        inputs,
        {"aiter_id": keys.aiter_id},
        lambda: [{"aiter_id": keys.aiter_id, **asdict(_emulate(entry, co_path, shape, orders))}],
    )
    emulated = Emulated(**{f.name: stored[f.name] for f in fields(Emulated)})
    return emulated, {REUSED_FROM: stored[REUSED_FROM], REUSE_KEY: stored[REUSE_KEY]}


def emulated_verdict(
    outcomes: Sequence[OrderOutcome], orders: Sequence[str]
) -> tuple[str, str, str]:
    """(verdict about the user's view, detail, order to reproduce with): the worst verdict any
    order shows (core.verdicts ranks them), with the first order that shows it. Damaged
    padding rows are aiter's, outside D[:M,:N]: a race here, not wrong."""
    found: dict[str, tuple[str, str]] = {SAFE: ("", orders[0])}
    for o in reversed(outcomes):  # the first order that shows a verdict is kept
        if o.fault:
            found[FAULT] = (o.fault, o.order)
        if o.bad:
            i, j = o.first_bad  # type: ignore[misc]
            found[WRONG] = (
                f"{o.bad} bad element(s) of D[:M,:N] ({o.order}); first D[{i},{j}] expected "
                f"{o.expected:.6g} got {o.got:.6g}; {o.race_summary}",
                o.order,
            )
        if o.races or o.canary_damaged:
            found[RACE] = (
                f"D[:M,:N] right in every order tried, but {o.race_summary}; "
                f"{o.canary_damaged} element(s) of aiter's padding rows overwritten",
                o.order,
            )
    verdict = worst_verdict(found)
    return (verdict, *found[verdict])


def _recorded(r: pd.Series, column: str) -> float | None:
    """aiter's recorded value of a row (None when the table lacks the column or the cell)."""
    value = pd.to_numeric(pd.Series([r.get(column)]), errors="coerce").iloc[0]
    return None if pd.isna(value) else float(value)


def _row(keys: ArtifactKeys, name: str, r: pd.Series, gfx: str) -> dict[str, Any]:
    """A tuned row as an AUDIT row before any check: safe, nothing emulated."""
    return {
        **keys.as_row(),
        "csv": name,
        "line": int(r["line"]),
        "gfx": gfx,
        "cu_num": int(r["cu_num"]),
        "m": int(r["M"]),
        "n": int(r["N"]),
        "k": int(r["K"]),
        "kernel": "",
        "symbol": str(r["kernelName"]),
        "log2_k_split": int(r["splitK"]),
        "status": "safe",
        "edge_classes": "",
        "reason": "",
        "emu_m": None,
        "emu_n": None,
        "emu_k": None,
        "emulated": "",
        "emu_detail": "",
        "emu_orders": "",
        "reproducer": "",
        "finding": "",
        **{ours: _recorded(r, theirs) for theirs, ours in RECORDED_COLUMNS.items()},
        REUSED_FROM: None,
        REUSE_KEY: None,
        "us_pred": None,
        "best_kernel_pred": None,
        "best_us_pred": None,
        "gain_pct_pred": None,
        "suspect": None,
        "best_raced": None,
        "reached_by_m": None,
        "lookup_finding": "",
    }


def retune_fields(predictor: Predictor, entry: KernelEntry, row: dict[str, Any]) -> dict[str, Any]:
    """The cycle model's view of one tuned row: the recorded kernel's predicted time, the
    predicted best kernel safe at the shape and the predicted gain of switching to it, and
    whether aiter's recorded time is suspect (off the prediction by more than the model's
    out-of-sample p90 error, in either direction), and whether aiter's tuner had the predicted
    best kernel when it timed the row: a row timed before that kernel existed was never raced
    against it, the cheapest re-tune to try. Only kernels that read B in the recorded kernel's
    layout compete: a pre-shuffled B cannot feed the noBpreShuffle kernel, nor the reverse."""
    m, n, k, split = row["m"], row["n"], row["k"], row["log2_k_split"]
    try:
        ranked = predictor.rank(m, n, k, split, kernels=predictor.manifest.same_b_layout(entry))
    except ShapeError:  # a shape the kernels refuse: the shape rule reports it
        return {}
    mine = next(r.prediction for r in ranked if r.prediction.kernel == entry.name)
    best = next((r.prediction for r in ranked if r.safe), None)
    out: dict[str, Any] = {"us_pred": mine.us}
    if best is not None:
        out.update(
            best_kernel_pred=best.kernel,
            best_us_pred=best.us,
            gain_pct_pred=(mine.us / best.us - 1) * 100,
        )
    recorded = row.get("aiter_us")
    raced = None if recorded is None else load_history().raced(m, n, k, entry.name, recorded)
    if best is not None and raced is not None:
        out["best_raced"] = best.kernel in raced
    _, p90 = predictor.calibration_file.error_band()
    if recorded and p90:
        off = (recorded / mine.us - 1) * 100
        if abs(off) > p90:
            side = "slower" if off > 0 else "faster"
            out["suspect"] = (
                f"aiter recorded {recorded:.1f} us, {abs(off):.0f} % {side} than predicted "
                f"({mine.us:.1f} us; the model's p90 error is {p90:.0f} %)"
            )
    return out


def _check(
    row: dict[str, Any], entry: KernelEntry, facts: Mapping[str, HostFact] | None = None
) -> list[Violation]:
    """Hold a row against the shape and edge rules; marks it unsafe. The edge violations."""
    m, n, k = row["m"], row["n"], row["k"]
    problems = []
    try:
        check_shape(m, n, k, row["log2_k_split"])
    except ShapeError as exc:
        problems.append(f"shape rule: {exc}")
    found = violations(entry, m, n, k)
    problems += [v.message for v in found]
    if k_tail(k) and found:
        problems.append(k_tail_answers(entry, m, n, k, facts))
    if problems:
        row.update(
            status="unsafe",
            edge_classes=",".join(sorted({v.edge_class for v in found})),
            reason="; ".join(problems) + (f" ({evidence_for(entry, found)})" if found else ""),
            finding="breaks the rules above; not emulated",
        )
    return found


def audit_tuned(
    csv_path: Path,
    manifest: Manifest,
    keys: ArtifactKeys,
    *,
    emulate: bool = True,
    orders: Sequence[str] = DEFAULT_ORDERS,
    co_dir_hint: str | None = None,
    name: str | None = None,
    store: ResultStore | None = None,
    predictor: Predictor | None = None,
) -> list[dict[str, Any]]:
    """AUDIT rows, one per asm row of the tuned CSV (`name`, default its file name); an
    emulation `store` holds (f4pipe.pipeline.resultstore) is not run again. With a `predictor` (the
    cycle model), each row of a known kernel also gets its re-tune columns (retune_fields)."""
    df = read_tuned(csv_path)
    asm = df[df["kernelName"].astype(str).str.startswith(ASM_PREFIX)]
    by_symbol = {e.symbol: e for e in manifest}
    holder = AiterDir.holding(manifest.directory)  # the release's own host facts, if fetched
    facts = holder.host_facts() if holder is not None else None
    rows = []
    for _, r in asm.iterrows():
        gfx = str(r[GFX_COLUMN]).strip() if GFX_COLUMN in df.columns else ""
        row = _row(keys, name or csv_path.name, r, gfx)
        rows.append(row)
        entry = by_symbol.get(row["symbol"])
        if gfx and gfx != ARCH:
            row.update(status="other-arch", reason=f"row is for {gfx}, the kernels for {ARCH}")
        elif entry is None:
            row.update(status="unknown-kernel", reason="symbol not in the f4gemm manifest")
        else:
            row["kernel"] = entry.name
            if predictor is not None:
                row.update(retune_fields(predictor, entry, row))
            if _check(row, entry, facts) and emulate:
                shape = _emulation_shape(entry, row["m"], row["n"], row["k"])
                emu, reuse = _stored_emulation(
                    store, keys, entry, manifest.co_path(entry), shape, orders
                )
                row.update(
                    **reuse,
                    emu_m=shape.m,
                    emu_n=shape.n,
                    emu_k=shape.k,
                    emulated=emu.verdict,
                    emu_detail=emu.detail,
                    emu_orders=emu.orders,
                    finding=emu.finding,
                    reproducer=reproducer(
                        entry.name, shape.m, shape.n, shape.k, order=emu.order, co_dir=co_dir_hint
                    ),
                )
    return rows


def audit_tables(
    tables: Mapping[str, Path],
    manifest: Manifest,
    keys: ArtifactKeys,
    *,
    emulate: bool = True,
    orders: Sequence[str] = DEFAULT_ORDERS,
    co_dir_hint: str | None = None,
    store: ResultStore | None = None,
    predictor: Predictor | None = None,
) -> list[dict[str, Any]]:
    """AUDIT rows of every table ({name, e.g. its path below aiter/configs: file}), each with
    what aiter's lookup makes of it (lookup_fields)."""
    rows: list[dict[str, Any]] = []
    for name, path in sorted(tables.items()):
        rows += audit_tuned(
            path,
            manifest,
            keys,
            emulate=emulate,
            orders=orders,
            co_dir_hint=co_dir_hint,
            name=name,
            store=store,
            predictor=predictor,
        )
    lookup_fields(rows, {name: read_tuned(path) for name, path in sorted(tables.items())})
    return rows


def lookup_fields(rows: Sequence[dict[str, Any]], frames: Mapping[str, pd.DataFrame]) -> None:
    """Add to each audit row how many M values reach it through aiter's lookup
    (`reached_by_m`: 0 when a merge drops it or a duplicate key breaks the table) and the key
    findings about it (`lookup_finding`, f4pipe.aiter.lookup.key_findings kinds)."""
    from f4pipe.aiter.lookup import build_index, catchment, key_findings

    index = build_index(frames)
    reached = {}
    for key, n in catchment(index).items():
        reached[(index.rows[key].table, index.rows[key].line)] = n
    kinds: dict[tuple[str, int], list[str]] = {}
    for f in key_findings(index):
        kinds.setdefault((f.row.table, f.row.line), []).append(f.kind)
    for row in rows:
        where = (row["csv"], row["line"])
        row["reached_by_m"] = 0 if index.error else reached.get(where, 0)
        row["lookup_finding"] = ",".join(sorted(set(kinds.get(where, []))))


def retune_candidates(rows: Sequence[dict[str, Any]], top: int = 20) -> list[str]:
    """The rows where re-tuning is predicted to gain most, largest gain first (one line
    each), from rows that carry predictions."""
    have = [r for r in rows if r.get("gain_pct_pred") and r["gain_pct_pred"] > 0]
    have.sort(key=lambda r: -r["gain_pct_pred"])
    return [
        f"{r['csv']}:{r['line']} M={r['m']} N={r['n']} K={r['k']}: aiter runs "
        f"{short_name(r['kernel'])} (recorded {r['aiter_us'] or float('nan'):.1f} us, predicted "
        f"{r['us_pred']:.1f} us); predicted best {short_name(r['best_kernel_pred'])} "
        f"{r['best_us_pred']:.1f} us (PREDICTED gain {r['gain_pct_pred']:.0f} %)"
        f"{_never_raced(r)}"
        for r in have[:top]
    ]


def _never_raced(row: dict[str, Any]) -> str:
    """'; never raced: ...' for a row timed before its predicted best kernel existed."""
    if row.get("best_raced") is not False:
        return ""
    history = load_history()
    key = (row["m"], row["n"], row["k"], row["kernel"], row["aiter_us"])
    had = history.raced(*key) or frozenset()
    return (
        f"; never raced: aiter timed the row on {history.recorded_on(*key)} racing "
        f"{len(had)} f4gemm kernels, before {short_name(row['best_kernel_pred'])} existed"
    )


def summarize(rows: Sequence[dict[str, Any]]) -> str:
    unsafe = [r for r in rows if r["status"] == "unsafe"]
    emulated = [r for r in unsafe if r["emulated"]]
    wrong = [r for r in emulated if r["emulated"] == WRONG]
    other = sum(r["status"] == "other-arch" for r in rows)
    how = (
        f"{len(wrong)} of {len(emulated)} emulated compute wrong D[:M,:N]"
        if emulated or not unsafe
        else "not emulated"
    )
    return (
        f"{len(rows) - other} asm row(s) checked, {len(unsafe)} unsafe by the rules ({how}), "
        f"{sum(r['status'] == 'unknown-kernel' for r in rows)} with unknown kernels, "
        f"{other} for other archs skipped"
    )


def format_finding(r: Mapping[str, Any]) -> str:
    """A row as a person reads it: where, aiter's record, f4pipe's verdict and evidence."""
    aiter = ", ".join(
        f"{theirs} {r[ours]:g}" for theirs, ours in RECORDED_COLUMNS.items() if r[ours] is not None
    )
    lines = [
        f"{r['csv']}:{r['line']}: M={r['m']} N={r['n']} K={r['k']} splitK={r['log2_k_split']} "
        f"{r['kernel'] or r['symbol']}",
        f"  aiter recorded: {aiter or 'nothing'}",
        f"  f4pipe: {r['status']}" + (f", emulated {r['emulated']}" if r["emulated"] else ""),
        f"  rules: {r['reason']}",
    ]
    if r["finding"]:
        lines.append(f"  shows: {r['finding']}")
    if r["reproducer"]:
        lines.append(f"  reproduce: {r['reproducer']}")
    return "\n".join(lines)
