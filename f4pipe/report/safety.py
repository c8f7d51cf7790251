"""The report's "is it safe" sections: the shape-edge sweep (every kernel at its M, N and K
edges, on the emulator) and the audit of aiter's tuned tables against it. Split from
f4pipe.report.sections, which lists them in page order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from f4pipe.aiter.aiterdir import AiterDir
from f4pipe.aiter.hostfacts import MISSTRIDED, SCALE_SHUFFLE, UNKNOWN, HostFact
from f4pipe.aiter.shaperules import EDGE_CLASSES, EDGE_K_TAIL, EDGE_K_TAIL_ROW
from f4pipe.core.layout import BASE_VARIANTS, K_PADDINGS
from f4pipe.core.verdicts import (
    RACE,
    SAFE,
    SAFETY_MEANINGS,
    SAFETY_RANK,
    WRONG,
    worst_verdict,
)
from f4pipe.pipeline.audit import format_finding
from f4pipe.pipeline.resultset import ResultSet, find_aiter_provenance
from f4pipe.report.plots import HEATMAP_PNG, plot_predicted_vs_recorded, plot_safety_heatmap
from f4pipe.report.render import (
    KERNEL_PREFIX,
    Section,
    fmt_value,
    in_kernel_order,
    short_kernel,
)

ORIGINAL = BASE_VARIANTS[0]
K_TAIL_CLASSES = (EDGE_K_TAIL, EDGE_K_TAIL_ROW)


def _padding_cell(rows: pd.DataFrame) -> str:
    """A K-tail cell: the paddings (scale padding, +0K = A and B rows zero-padded in K) under
    which the kernel is not safe, each with its verdict."""
    unsafe = rows[rows["verdict"] != SAFE]
    if not len(unsafe):
        return "safe under every padding"
    pads = [
        f"{r['scale_pad']}{'+0K' if r['k_pad'] == 'zeros' else ''} {r['verdict']}"
        for _, r in unsafe.iterrows()
    ]
    return "not safe: " + ", ".join(dict.fromkeys(pads))


def _safety_cell(rows: pd.DataFrame) -> str:
    """The worst verdict of a kernel x edge class cell, with its first evidence."""
    if not len(rows):
        return "-"
    if "scale_pad" in rows and rows[["scale_pad", "k_pad"]].drop_duplicates().shape[0] > 1:
        return _padding_cell(rows)
    worst = rows.loc[rows["verdict"].map(SAFETY_RANK).idxmax()]
    v = str(worst["verdict"])
    if v == WRONG and worst["bad"]:
        return (
            f"wrong D[{int(worst['first_bad_row'])},{int(worst['first_bad_col'])}] "
            f"exp {fmt_value(worst['expected'])} got {fmt_value(worst['got'])}"
        )
    if v == WRONG:
        return f"wrong ({int(worst['canary_damaged'])} canaries)"
    if v == RACE:
        return f"race ({int(worst['races'])} dwords)"
    return v


def split_variants(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The original code objects' rows, and the edits' (a table written before edits were
    swept has no variant: every row is the original's)."""
    if "variant" not in df:
        return df, df.iloc[:0]
    original = df["variant"].isna() | (df["variant"] == ORIGINAL)
    return df[original], df[~original]


def _kernel_line(label: str, rows: pd.DataFrame, padded: pd.DataFrame) -> dict[str, Any]:
    """One row of the section's table: a kernel's (or an edit's) cell per edge class."""
    first = rows.iloc[0]
    line: dict[str, Any] = {"kernel": label, "store": first["store_class"]}
    for edge in EDGE_CLASSES:
        line[edge] = _safety_cell(rows[rows["edge_class"] == edge])
    line["padded"] = (
        "-" if not len(padded) else "safe" if (padded["verdict"] == SAFE).all() else "NOT safe"
    )
    line["static D bound"] = first["static_d_bound"]
    line["static N guards"] = first["static_n_guards"]
    return line


def broken_edges(original: pd.DataFrame, edit: pd.DataFrame) -> list[tuple[str, str]]:
    """(edge class, the edit's worst verdict) where the original kernel is safe and its edit
    is not: what an edit costs, in the seed layout (policy unsafe)."""
    broken = []
    for edge in EDGE_CLASSES:
        before = worst_verdict(original.loc[original["edge_class"] == edge, "verdict"])
        after = worst_verdict(edit.loc[edit["edge_class"] == edge, "verdict"])
        if before == SAFE and after not in ("", SAFE):
            broken.append((edge, after))
    return broken


def _edit_lines(
    raw: pd.DataFrame, edits: pd.DataFrame
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Each edit's table row by its kernel (shown beneath the original's), and one sentence per
    edit that breaks an edge its original keeps."""
    lines: dict[str, list[dict[str, Any]]] = {}
    broke: list[str] = []
    if not len(edits):
        return lines, broke
    for (variant, kernel), rows in edits.groupby(["variant", "kernel"], sort=True):
        unsafe_rows = rows[rows["policy"] == "unsafe"]
        label = f"{short_kernel(str(kernel))} ({variant})"
        lines.setdefault(str(kernel), []).append(
            _kernel_line(label, unsafe_rows, rows[rows["policy"] == "pad"])
        )
        broken = broken_edges(raw[raw["kernel"] == kernel], unsafe_rows)
        if broken:
            broke.append(
                f"{variant} breaks {short_kernel(str(kernel))} where the original is safe: "
                + ", ".join(f"{edge} {verdict}" for edge, verdict in broken)
            )
    return lines, broke


def release_facts(rs: ResultSet) -> dict[str, HostFact] | None:
    """The host facts of the aiter the set was made from, when its fetch is beside it (a set
    stand-in built from tables alone has none)."""
    if not isinstance(rs, ResultSet):
        return None
    path = find_aiter_provenance(rs.directory.resolve(), rs.aiter_id)
    return AiterDir(path.parent).host_facts() if path is not None else None


def release_k_tail_line(raw: pd.DataFrame, facts: dict[str, HostFact] | None) -> str:
    """The K-tail cells under the padding the release's e8m0_shuffle writes, stated before
    every padding's answer: "K tails under uninitialised scale padding (this release's
    e8m0_shuffle): 30 of 35 kernels wrong"; "" when the sweep ran no K tail."""
    tails = raw[raw["edge_class"].isin(K_TAIL_CLASSES)] if "scale_pad" in raw else raw.iloc[:0]
    if not len(tails):
        return ""
    fact = (facts or {}).get(SCALE_SHUFFLE)
    if fact is None or fact.value == UNKNOWN:
        said = fact.words if fact is not None else "this release's scale padding: not read"
        return f"K tails: {said}: every padding's verdict below"
    padding = fact.value.removesuffix(MISSTRIDED)
    mine = tails[(tails["scale_pad"] == padding) & (tails["k_pad"] == K_PADDINGS[0])]
    bad = mine.loc[mine["verdict"] != SAFE, "kernel"].nunique()
    return (
        f"K tails under {fact.words} [{fact.where()}]: {bad} of {mine['kernel'].nunique()} "
        "kernels not safe"
    )


def safety_section(rs: ResultSet, out_dir: Path | None) -> Section:
    """The original code objects' sweep (the heatmap, the counts), and each edit's kernel
    beside its original's row, with every edge the edit breaks named in words."""
    table_rows = rs.table("safety")
    sec = Section("safety", "Shape-edge safety: kernel x edge class (emulator)", "not run", "none")
    sec.headline = "not run"
    if table_rows is None or not len(table_rows):
        sec.notes.append("safety.parquet is missing: the safety sweep has not run.")
        return sec
    df, edits = split_variants(table_rows)
    # natural kernel order once: the table and the heatmap below group in this order
    raw = df[df["policy"] == "unsafe"].sort_values("kernel", key=in_kernel_order, kind="stable")
    padded = df[df["policy"] == "pad"]
    counts = []
    for edge in EDGE_CLASSES:
        cell = raw[raw["edge_class"] == edge].groupby("kernel")["verdict"]
        worst = cell.agg(worst_verdict)
        tally = worst.value_counts()
        counts.append(f"{edge}: " + ", ".join(f"{n} {v}" for v, n in sorted(tally.items())))
    disagree = df[~df["agrees"]]
    kernels = df["kernel"].nunique()
    unsafe = raw.loc[raw["verdict"] != SAFE, "kernel"].nunique()
    sec.verdict = (
        f"{kernels} kernels, {unsafe} unsafe at some edge; worst verdict per kernel: "
        + "; ".join(counts)
    )
    sec.verdict += (
        f"; padded-output remedy safe in {int((padded['verdict'] == 'safe').sum())} of "
        f"{len(padded)} unsafe shapes"
    )
    sec.headline = f"unsafe edges in {unsafe} of {kernels} kernels"
    release = release_k_tail_line(raw, release_facts(rs))
    if release:
        sec.verdict = f"{release}; {sec.verdict}"
    if len(disagree):
        sec.verdict = (
            f"{len(disagree)} row(s) where the rules disagree with the emulator; {sec.verdict}"
        )
        sec.headline = f"{len(disagree)} rows: rules and emulator disagree"
    sec.state = "bad" if len(disagree) else "info"
    sec.notes.append("; ".join(f"{v}: {meaning}" for v, meaning in SAFETY_MEANINGS.items()))
    sec.notes.append(
        f"orders: {', '.join(sorted(set(df['orders'])))}; kernel names drop "
        f"the prefix {KERNEL_PREFIX}"
    )
    if len(disagree):
        sec.notes.append(
            f"{len(disagree)} row(s) where f4pipe.aiter.shaperules's rules disagree with the "
            "emulator: "
            + ", ".join(
                f"{short_kernel(r['kernel'])} {r['edge_class']} M={r['m']} N={r['n']} K={r['k']}"
                for _, r in disagree.iterrows()
            )
        )
    edit_lines, broke = _edit_lines(raw, edits)
    if broke:
        sec.state = "bad"
        sec.verdict = f"{len(broke)} edit(s) break an edge the original keeps; {sec.verdict}"
        sec.headline = f"{len(broke)} edit(s) break a safe edge"
        sec.notes[:0] = broke
    table = []
    for kernel, rows in raw.groupby("kernel", sort=False):
        pads = padded[padded["kernel"] == kernel]
        table.append(_kernel_line(short_kernel(str(kernel)), rows, pads))
        table += edit_lines.get(str(kernel), [])
    sec.table = pd.DataFrame(table)
    if out_dir is not None:
        worst = {
            short_kernel(str(kernel)): {
                edge: worst_verdict(rows.loc[rows["edge_class"] == edge, "verdict"])
                for edge in EDGE_CLASSES
            }
            for kernel, rows in raw.groupby("kernel", sort=False)
        }
        cells = pd.DataFrame.from_dict(worst, orient="index")
        sec.plot = plot_safety_heatmap(cells, out_dir / HEATMAP_PNG)
    repro = []
    for (kernel, edge), rows in raw[raw["verdict"] != SAFE].groupby(["kernel", "edge_class"]):
        worst = rows.loc[rows["verdict"].map(SAFETY_RANK).idxmax()]
        repro.append(f"# {short_kernel(str(kernel))} {edge}: {worst['verdict']}")
        repro.append(str(worst["reproducer"]))
    if repro:
        sec.code["Reproducers (one per unsafe cell; exit 1 or 2 on the emulator)"] = repro
    return sec


def audit_section(rs: ResultSet, out_dir: Path | None) -> Section:
    """Per tuned table: rows checked, unsafe, other-arch; every unsafe row as a finding with
    aiter's recorded columns beside f4pipe's verdict."""
    df = rs.table("audit")
    sec = Section("audit", "Tuned-config audit: aiter's a4w4 tuned GEMM tables", "not run", "none")
    sec.headline = "not run"
    if df is None:
        sec.notes.append("audit.parquet is missing: the tuned-config audit has not run.")
        return sec
    if not len(df):
        sec.verdict = "the fetched aiter has no a4w4 tuned GEMM table with asm rows"
        sec.headline = "no tuned table with asm rows"
        return sec
    unsafe = df[df["status"] == "unsafe"]
    parts = []
    checked = 0
    for name, t in df.groupby("csv", sort=True):
        other = int((t["status"] == "other-arch").sum())
        checked += len(t) - other
        bad = t[t["status"] == "unsafe"]
        emulated = bad["emulated"].value_counts()
        parts.append(
            f"{name}: {len(t) - other} asm rows checked, {len(bad)} unsafe"
            + (
                " (emulated: " + ", ".join(f"{n} {v}" for v, n in sorted(emulated.items())) + ")"
                if len(emulated)
                else ""
            )
            + (f", {other} rows for other archs skipped" if other else "")
            + _lookup_counts(t)
        )
    unknown = int((df["status"] == "unknown-kernel").sum())
    sec.verdict = "; ".join(parts) + (
        f"; {unknown} rows name kernels not in the manifest" if unknown else ""
    )
    sec.headline = f"{len(unsafe)} of {checked} asm rows unsafe"
    if len(parts) > 1:  # the headline's total, stated in the verdict too
        sec.verdict = f"{sec.headline} in {len(parts)} tables: {sec.verdict}"
    sec.state = "bad" if len(unsafe) else "ok"
    if len(unsafe):
        sec.table = pd.DataFrame(
            {
                "table": unsafe["csv"],
                "line": unsafe["line"],
                "M": unsafe["m"],
                "N": unsafe["n"],
                "K": unsafe["k"],
                "kernel": unsafe["kernel"].map(short_kernel),
                "aiter us": unsafe["aiter_us"],
                "aiter errRatio": unsafe["aiter_err_ratio"],
                "f4pipe": unsafe["emulated"].where(unsafe["emulated"] != "", "rules only"),
                "per order": unsafe["emu_orders"],
                "edge": unsafe["edge_classes"],
            }
        ).reset_index(drop=True)
        for name, t in unsafe.groupby("csv", sort=True):
            sec.code[f"Findings in {name} (aiter's record beside f4pipe's verdict)"] = [
                line for _, r in t.iterrows() for line in format_finding(r.to_dict()).splitlines()
            ]
    _lookup_view(sec, df)
    _retune_view(sec, df, out_dir)
    return sec


def _lookup_counts(t: pd.DataFrame) -> str:
    """', key findings of aiter's lookup on its asm rows: 3 exact-only' for one table's rows
    ('' if none). The audit holds a table's asm rows only, while `audit-tuned --shape` counts
    the whole table, CK rows too: the words say which count this is, the number the CLI prints
    for asm rows (f4pipe.cli.safety.findings_line)."""
    if "lookup_finding" not in t.columns:
        return ""
    kinds = [k for v in t["lookup_finding"].dropna() for k in str(v).split(",") if k]
    if not kinds:
        return ""
    counts = pd.Series(kinds).value_counts().sort_index()
    return ", key findings of aiter's lookup on its asm rows: " + ", ".join(
        f"{n} {k}" for k, n in counts.items()
    )


def _lookup_view(sec: Section, df: pd.DataFrame) -> None:
    """Rows aiter's lookup cannot use as written (f4pipe.aiter.lookup.key_findings), per table."""
    if "lookup_finding" not in df.columns:
        return
    found = df[df["lookup_finding"].fillna("") != ""]
    if len(found):
        sec.notes.append(
            "Key findings count the audit's rows, a table's asm rows: `f4pipe audit-tuned "
            "--shape M,N,K --findings` lists them for the whole table, CK rows included."
        )
    for name, t in found.groupby("csv", sort=True):
        sec.code[f"Key findings in {name} (aiter's lookup: `f4pipe audit-tuned --shapes`)"] = [
            f"{name}:{r['line']} M={r['m']} N={r['n']} K={r['k']}: {r['lookup_finding']} "
            f"(reached by {fmt_reached(r['reached_by_m'])} M value(s))"
            for _, r in t.iterrows()
        ]


def fmt_reached(value: object) -> str:
    return "?" if value is None or pd.isna(value) else str(int(value))


def _retune_view(sec: Section, df: pd.DataFrame, out_dir: Path | None) -> None:
    """With the cycle model's re-tune columns (audit-tuned --predict): predicted against
    aiter's recorded time for every row, the error per kernel, and the re-tune candidates;
    every number labelled predicted."""
    if "us_pred" not in df:
        return
    have = df[df["us_pred"].notna() & df["aiter_us"].notna()]
    if not len(have):
        return
    from f4pipe.pipeline.audit import retune_candidates

    err = (have["aiter_us"] / have["us_pred"] - 1).abs() * 100
    sec.notes.append(
        f"cycle model (PREDICTED, not measured): {len(have)} rows, predicted vs aiter's "
        f"recorded time median {err.median():.1f} %, p90 {err.quantile(0.9):.1f} %; "
        f"{int(have['suspect'].notna().sum())} row(s) marked suspect; "
        f"{int(have['best_raced'].eq(False).sum()) if 'best_raced' in have else 0} row(s) "
        "timed before their predicted best kernel existed (never raced against it)"
    )
    per_kernel = (
        have.assign(err=err, kernel=have["kernel"].map(short_kernel))
        .groupby("kernel")["err"]
        .agg(["count", "median", "max"])
    )
    sec.code["Cycle model error per kernel (|aiter us / predicted us - 1| %)"] = [
        f"{k:>28}: {int(r['count']):4d} rows, median {r['median']:5.1f} %, max {r['max']:6.1f} %"
        for k, r in per_kernel.iterrows()
    ]
    sec.code["Re-tune candidates (PREDICTED gains, largest first)"] = retune_candidates(
        have.to_dict("records")
    )
    if out_dir is not None:
        sec.plot = plot_predicted_vs_recorded(have, out_dir / "predicted_vs_recorded.png")
