"""Audit of aiter's tuned GEMM table: which asm rows would make a kernel compute wrong results.

aiter's `a4w4_blockscale_tuned_gemm.csv` maps (cu_num, M, N, K) to a kernel; rows whose
kernelName is a mangled f4gemm symbol (`_ZN...`) run our code objects. Each such row is held
against the shape rules (f4pipe.kernarg.check_shape) and the edge rules (f4pipe.safety); a row
that breaks an edge rule is then emulated at its own N (and a reduced M and K: the edge
classes it breaks depend on N only, or the reduced M keeps the row's M edge) in two workgroup
orders, and listed with a reproducer command. The emulated verdict is about the user's view:
"wrong" when D[:M, :N] misses the reference, "race" when only aiter's padding rows or the
order of stores differ, "fault" when the kernel leaves its buffers.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from f4pipe.edgesweep import DEFAULT_ORDERS, EdgeShape, reference_for, run_order
from f4pipe.emu import EmulatorDevice
from f4pipe.errors import InputError, ShapeError
from f4pipe.fsio import read_input_text
from f4pipe.kernarg import check_shape
from f4pipe.manifest import KernelEntry, Manifest
from f4pipe.safety import (
    EDGE_K_MIN,
    EDGE_M_ROWS,
    edge_rule,
    reproducer,
    violations,
)
from f4pipe.schemas import ArtifactKeys

TUNED_COLUMNS = ("cu_num", "M", "N", "K", "splitK", "kernelName")
TUNED_INT_COLUMNS = ("cu_num", "M", "N", "K", "splitK")
#: aiter's tuned table is ~100 kB.
MAX_TUNED_CSV_BYTES = 64 << 20
ASM_PREFIX = "_ZN"


def read_tuned(csv_path: Path) -> pd.DataFrame:
    """The tuned table, with its 1-based CSV line per row; missing columns are an error."""
    text = read_input_text(csv_path, "tuned CSV", MAX_TUNED_CSV_BYTES)
    try:
        df = pd.read_csv(io.StringIO(text))
    except (ValueError, csv.Error) as exc:
        raise InputError(f"{csv_path}: cannot read the tuned CSV: {exc}") from None
    missing = [c for c in TUNED_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(
            f"{csv_path}: columns {missing} missing (expected aiter's tuned GEMM CSV with "
            f"{', '.join(TUNED_COLUMNS)})"
        )
    for col in TUNED_INT_COLUMNS:
        values = pd.to_numeric(df[col], errors="coerce")
        bad = df.index[values.isna() | (values != values.round())]
        if len(bad):
            raise InputError(
                f"{csv_path}:{bad[0] + 2}: column {col} is {df[col][bad[0]]!r}, not an integer"
            )
    df = df.copy()
    df["line"] = range(2, len(df) + 2)
    return df


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
    return EdgeShape("audit", m_emu, n, min(k, k_emu))


def _emulate(
    entry: KernelEntry, co_path: Path, shape: EdgeShape, orders: Sequence[str]
) -> tuple[str, str, str]:
    """(verdict about the user's view, detail, order to reproduce with)."""
    ref = reference_for(shape)
    outcomes = []
    for order in orders:
        device = EmulatorDevice(workgroup_order=order, max_waves_per_batch=4)
        try:
            outcomes.append(run_order(device, entry, co_path, shape, "unsafe", ref))
        finally:
            device.close()
    for o in outcomes:
        if o.fault:
            return "fault", o.fault, o.order
    for o in outcomes:
        if o.bad:
            i, j = o.first_bad  # type: ignore[misc]
            return (
                "wrong",
                f"{o.bad} bad element(s) of D[:M,:N] ({o.order}); first D[{i},{j}] expected "
                f"{o.expected:.6g} got {o.got:.6g}; {o.race_summary}",
                o.order,
            )
    for o in outcomes:
        if o.races or o.canary_damaged:
            return (
                "race",
                f"D[:M,:N] right in every order tried, but {o.race_summary}; "
                f"{o.canary_damaged} element(s) of aiter's padding rows overwritten",
                o.order,
            )
    return "safe", "", orders[0]


def audit_tuned(
    csv_path: Path,
    manifest: Manifest,
    keys: ArtifactKeys,
    *,
    emulate: bool = True,
    orders: Sequence[str] = DEFAULT_ORDERS,
    co_dir_hint: str | None = None,
) -> list[dict[str, Any]]:
    """AUDIT rows, one per asm row of the tuned CSV."""
    df = read_tuned(csv_path)
    asm = df[df["kernelName"].astype(str).str.startswith(ASM_PREFIX)]
    by_symbol = {e.symbol: e for e in manifest}
    rows = []
    for _, r in asm.iterrows():
        m, n, k, split = int(r["M"]), int(r["N"]), int(r["K"]), int(r["splitK"])
        row: dict[str, Any] = {
            **keys.as_row(),
            "csv": csv_path.name,
            "line": int(r["line"]),
            "cu_num": int(r["cu_num"]),
            "m": m,
            "n": n,
            "k": k,
            "kernel": "",
            "symbol": str(r["kernelName"]),
            "log2_k_split": split,
            "status": "safe",
            "edge_classes": "",
            "reason": "",
            "emu_m": None,
            "emu_n": None,
            "emu_k": None,
            "emulated": "",
            "emu_detail": "",
            "reproducer": "",
        }
        entry = by_symbol.get(row["symbol"])
        if entry is None:
            row.update(status="unknown-kernel", reason="symbol not in the f4gemm manifest")
            rows.append(row)
            continue
        row["kernel"] = entry.name
        problems = []
        try:
            check_shape(m, n, k, split)
        except ShapeError as exc:
            problems.append(f"shape rule: {exc}")
        found = violations(entry, m, n, k)
        problems += [v.message for v in found]
        if not problems:
            rows.append(row)
            continue
        row.update(
            status="unsafe",
            edge_classes=",".join(sorted({v.edge_class for v in found})),
            reason="; ".join(problems) + (f" ({edge_rule(entry).evidence})" if found else ""),
        )
        if emulate and found:
            shape = _emulation_shape(entry, m, n, k)
            verdict, detail, order = _emulate(entry, manifest.co_path(entry), shape, orders)
            row.update(
                emu_m=shape.m,
                emu_n=shape.n,
                emu_k=shape.k,
                emulated=verdict,
                emu_detail=detail,
                reproducer=reproducer(
                    entry.name, shape.m, shape.n, shape.k, order=order, co_dir=co_dir_hint
                ),
            )
        rows.append(row)
    return rows


def summarize(rows: Sequence[dict[str, Any]]) -> str:
    unsafe = [r for r in rows if r["status"] == "unsafe"]
    wrong = [r for r in unsafe if r["emulated"] == "wrong"]
    return (
        f"{len(rows)} asm row(s) checked, {len(unsafe)} unsafe by the rules "
        f"({len(wrong)} compute wrong D[:M,:N] on the emulator), "
        f"{sum(r['status'] == 'unknown-kernel' for r in rows)} with unknown kernels"
    )
