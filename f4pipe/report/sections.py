"""The report's sections, one function each, from a ResultSet to a Section: what ran, the
verdict, the table and the plot. A stage that did not run says so; nothing is drawn that a stage
did not record."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from f4pipe.aiter.shaperules import EDGE_CLASSES
from f4pipe.core.layout import BASE_VARIANTS, SEED_SPLITK_ERR_PCT, SEED_SPLITK_SHAPE
from f4pipe.pipeline.audit import format_finding
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.report.plots import (
    HEATMAP_PNG,
    SPLITK_PNG,
    THROUGHPUT_PNG,
    plot_bench,
    plot_predicted,
    plot_predicted_vs_recorded,
    plot_safety_heatmap,
    plot_splitk,
)
from f4pipe.report.render import (
    KERNEL_PREFIX,
    Section,
    fmt_value,
    in_kernel_order,
    shape_label,
    short_kernel,
)
from f4pipe.report.reuse import reuse_section
from f4pipe.report.roundtrip import roundtrip_section

NOT_MEASURED = "not measured: no gfx950 device"


def _gemm_rows(rs: ResultSet, name: str) -> pd.DataFrame | None:
    df = rs.table(name)
    return None if df is None or not len(df) else df


def _not_run(sec: Section, name: str, df: pd.DataFrame | None) -> bool:
    """Mark `sec` "not run" (no table) or "skipped" (no row ran); True if nothing to show."""
    if df is None:
        sec.verdict, sec.state = "not run", "none"
        sec.notes.append(f"{name}.parquet is missing: the {name} stage has not run.")
        return True
    ran = df[df["status"].isin(["passed", "failed"])]
    if not len(ran):
        errored = (df["status"] == "error").any()
        sec.verdict = f"no {name} run completed: {_status_counts(df)}"
        sec.state = "bad" if errored else "none"
        sec.notes.extend(f"reason: {r}" for r in sorted(set(df["reason"])))
        return True
    return False


def _status_counts(df: pd.DataFrame) -> str:
    counts = df["status"].value_counts().sort_index()
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def _side_by_side(df: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """One line per (kernel, shape): each variant's status and metrics in columns, then one
    reason column (what each variant's row says when it did not run through)."""
    key = ["kernel", "m", "n", "k", "log2_k_split"]
    variants = [v for v in BASE_VARIANTS if v in set(df["variant"])]
    variants += sorted(set(df["variant"]) - set(variants))
    merged: pd.DataFrame | None = None
    for variant in variants:
        part = df[df["variant"] == variant][[*key, "status", *metrics, "reason"]]
        part = part.drop_duplicates(key).rename(
            columns={c: f"{variant} {c}" for c in ["status", *metrics, "reason"]}
        )
        merged = part if merged is None else merged.merge(part, on=key, how="outer")
    assert merged is not None
    merged = merged.sort_values(
        ["m", "n", "k", "log2_k_split", "kernel"], key=in_kernel_order
    ).reset_index(drop=True)
    merged.insert(1, "shape (MxNxK /split)", [shape_label(r) for _, r in merged.iterrows()])
    merged["kernel"] = merged["kernel"].map(short_kernel)
    reason_cols = [f"{v} reason" for v in variants]
    merged["reason"] = [
        "; ".join(f"{v}: {r[c]}" for v, c in zip(variants, reason_cols, strict=True) if r[c])
        for _, r in merged[reason_cols].fillna("").iterrows()
    ]
    return merged.drop(columns=["m", "n", "k", "log2_k_split", *reason_cols])


def _identical(df: pd.DataFrame, metrics: Sequence[str]) -> tuple[int, int]:
    """(runs whose original and rebuilt results are bit-identical, runs both variants ran)."""
    cols = [f"{v} {m}" for v in BASE_VARIANTS for m in ("status", *metrics)]
    if not all(c in df.columns for c in cols):
        return 0, 0
    ran = ["passed", "failed"]
    both = df[df["original status"].isin(ran) & df["rebuilt status"].isin(ran)]
    same = both[
        [
            all(
                fmt_value(row[f"original {m}"], 17) == fmt_value(row[f"rebuilt {m}"], 17)
                for m in ("status", *metrics)
            )
            for _, row in both.iterrows()
        ]
    ]
    return len(same), len(both)


#: The error metrics of a GEMM run, side by side per variant (also what compare lines up).
VERIFY_METRICS = ("max_abs_err", "err_frac", "bad")


def verify_section(rs: ResultSet, out_dir: Path | None) -> Section:
    df = _gemm_rows(rs, "verify")
    sec = Section("verify", "Verification matrix: kernel x shape, original and rebuilt", "", "")
    if _not_run(sec, "verify", df):
        if df is not None:
            sec.table = _side_by_side(df, VERIFY_METRICS)
        return sec
    assert df is not None
    per_variant = "; ".join(
        f"{v}: {_status_counts(df[df['variant'] == v])}" for v in sorted(set(df["variant"]))
    )
    sec.table = _side_by_side(df, VERIFY_METRICS)
    same, both = _identical(sec.table, VERIFY_METRICS)
    sec.verdict = per_variant + (
        f"; rebuilt matches original in {same} of {both} runs both ran" if both else ""
    )
    if both:
        sec.notes.append(
            "Original and rebuilt matching on the emulator is expected, not independent "
            "evidence: the decoder reads the same instructions from both (the round trip's "
            "decoded-instruction identity; the differing bytes are don't-care bits). Only "
            "hardware runs of both variants test the rebuilt bytes beyond that."
        )
    hazards = df["hazards"].fillna(0).sum()
    if df["hazards"].notna().any():
        sec.notes.append(
            f"timing checked on the emulator (memory counters, LDS visibility, wait states): "
            f"{int(hazards)} hazard(s) in {int((df['hazards'].fillna(0) > 0).sum())} run(s)"
        )
    bad = df["status"].isin(["failed", "error", "hazard"]).any() or same != both
    sec.state = "bad" if bad else "ok"
    sec.notes.append(f"device: {', '.join(sorted(set(df['device_id'])))}")
    sec.notes.extend(_problems(df))
    return sec


def _problems(df: pd.DataFrame) -> list[str]:
    """One line per failed or errored run, so they are seen without reading the whole table."""
    bad = df[df["status"].isin(["failed", "hazard", "error"])]
    lines = [
        f"{r['status']}: {r['variant']} {short_kernel(r['kernel'])} {shape_label(r)}"
        + (f" ({r['reason']})" if r["reason"] else f" ({r['bad']} bad elements)")
        for _, r in bad.iterrows()
    ]
    return lines + _advisories(df)


def _advisories(df: pd.DataFrame) -> list[str]:
    """One finding per (variant, kernel) whose runs carry timing advisories (f4pipe.analysis.timing:
    what the kernel relies on beyond the ISA's promises), with the first pair named."""
    out = []
    flagged = df[df["advisories"].fillna(0) > 0]
    for (variant, kernel), rows in flagged.groupby(["variant", "kernel"], sort=True):
        reason = str(rows.iloc[0]["reason"])
        at = reason.find("advisory: ")
        detail = reason[at + len("advisory: ") :] if at >= 0 else reason
        out.append(
            f"finding (advisory, not a failure): {variant} {short_kernel(kernel)}: "
            f"{int(rows['advisories'].max())} pair(s) in {len(rows)} run(s); {detail}"
        )
    return out


def splitk_section(rs: ResultSet, out_dir: Path | None) -> Section:
    df = _gemm_rows(rs, "splitk")
    sec = Section("splitk", "splitK: error vs split count", "", "")
    ref = ", ".join(f"{1 << k}: {v} %" for k, v in SEED_SPLITK_ERR_PCT.items())
    m, n, k = SEED_SPLITK_SHAPE
    sec.notes.append(f"reference: seed MI355X at M={m} N={n} K={k}, split {ref} of max|ref|")
    if _not_run(sec, "splitk", df):
        if df is not None:
            sec.table = _side_by_side(df, ("err_frac", "max_abs_err"))
        if (
            out_dir is not None
        ):  # the seed's reference alone, marked as such: the plot always exists
            sec.plot = plot_splitk(None, out_dir / SPLITK_PNG)
        return sec
    assert df is not None
    ran = df[df["status"].isin(["passed", "failed"])]
    worst = ran.groupby("log2_k_split")["err_frac"].max()
    sec.verdict = f"{_status_counts(df)}; worst error by split: " + ", ".join(
        f"{1 << int(lg)}: {v * 100:.2f} %" for lg, v in worst.items()
    )
    sec.state = "bad" if df["status"].isin(["failed", "error"]).any() else "ok"
    sec.notes.extend(_problems(df))
    sec.table = _side_by_side(df, ("err_frac", "max_abs_err"))
    if out_dir is not None:
        sec.plot = plot_splitk(ran, out_dir / SPLITK_PNG)
    return sec


def bench_section(rs: ResultSet, out_dir: Path | None) -> Section:
    df = _gemm_rows(rs, "bench")
    sec = Section("bench", "Throughput: original vs rebuilt", NOT_MEASURED, "none")
    if df is None:
        sec.notes.append("bench.parquet is missing: the bench stage has not run.")
        return sec
    measured = df[df["status"] == "measured"]
    if not len(measured):
        devices = ", ".join(sorted(set(df["device_id"])))
        sec.notes.append(f"{len(df)} bench rows on device {devices}, none measured")
        sec.notes.extend(f"reason: {r}" for r in sorted(set(df["reason"])))
        _predicted_view(sec, df, out_dir)
        return sec
    measured = _with_tflops_interval(measured)
    metrics = ("us", "tflops", "tflops_lo", "tflops_hi")
    table = _side_by_side(measured, metrics if "tflops_lo" in measured else ("us", "tflops"))
    if "original tflops" in table and "rebuilt tflops" in table:
        table["ratio rebuilt/original"] = table["rebuilt tflops"] / table["original tflops"]
    sec.table = table
    sec.state = "info"
    sec.verdict = (
        f"{len(measured)} runs measured on {', '.join(sorted(set(measured['device_id'])))}"
    )
    if "ratio rebuilt/original" in table:
        ratios = table["ratio rebuilt/original"].dropna()
        if len(ratios):
            sec.verdict += f"; rebuilt/original TFLOP/s {ratios.min():.3f} .. {ratios.max():.3f}"
    if out_dir is not None:
        sec.plot = plot_bench(table, out_dir / THROUGHPUT_PNG)
    return sec


def _with_tflops_interval(measured: pd.DataFrame) -> pd.DataFrame:
    """TFLOP/s at the ends of each run's interval of the median launch time (a shorter time
    is more TFLOP/s: the interval's high end gives tflops_lo)."""
    if "us_ci_low" not in measured or measured["us_ci_low"].isna().all():
        return measured
    flop = 2.0 * measured["m"] * measured["n"] * measured["k"] / 1e6
    return measured.assign(
        tflops_lo=flop / measured["us_ci_high"], tflops_hi=flop / measured["us_ci_low"]
    )


def _predicted_view(sec: Section, df: pd.DataFrame, out_dir: Path | None) -> None:
    """Without measurements: the cycle model's predictions, labelled, beside the seed driver's
    MI355X measurements where the shape is one of the seed's."""
    if "us_pred" not in df or df["us_pred"].isna().all():
        return
    from f4pipe.perf.costs import HELD_BACK, load_calibration
    from f4pipe.perf.fit import SEED_MEASURED

    table = _side_by_side(df, ("us_pred", "tflops_pred", "bound"))
    seed = {(m, n, k, kern): us for m, n, k, kern, us in SEED_MEASURED}
    keyed = df.drop_duplicates(["kernel", "m", "n", "k", "log2_k_split"]).sort_values(
        ["m", "n", "k", "log2_k_split", "kernel"], key=in_kernel_order
    )
    table["seed measured us (MI355X)"] = [
        seed.get((r.m, r.n, r.k, r.kernel)) if r.log2_k_split == 0 else None
        for r in keyed.itertuples()
    ]
    sec.table = table
    sec.state = "info"
    ids = ", ".join(sorted(set(df["calibration_id"].dropna())))
    cal = load_calibration()
    med, p90 = cal.error_band()
    held_med, held_p90 = cal.error_band(measure=HELD_BACK)
    held = (
        f"; on aiter's later tuning sessions, held back from the fit: median {held_med} %, "
        f"p90 {held_p90} %"
        if held_med is not None
        else ""
    )
    sec.verdict = (
        f"{NOT_MEASURED}; PREDICTED by the cycle model (calibration {ids}; out-of-sample "
        f"median error {med if med is not None else 'n/a'} %, "
        f"p90 {p90 if p90 is not None else 'n/a'} %{held})"
    )
    sec.notes.append(
        "bound: the limit whose being 1.25 times faster saves the most predicted time "
        "(MFMA pipes, LDS, a CU's vector-memory path VMEM, the L2, HBM, the launch overhead; "
        "docs/model-card.md, What bounds a prediction)"
    )
    variants = set(df["variant"])
    if {"original", "rebuilt"} <= variants:
        sec.notes.append(
            "original and rebuilt predictions agree wherever the two decode to the same "
            "program: the model reads only the decoded instructions, so this is no evidence "
            "that the rebuilt object runs as fast (only hardware can show that)"
        )
    if out_dir is not None:
        sec.plot = plot_predicted(table, out_dir / THROUGHPUT_PNG)


VERDICT_RANK = {"safe": 0, "race": 1, "wrong": 2, "fault": 3}


def _worst_verdict(rows: pd.DataFrame) -> str:
    return "" if not len(rows) else max(rows["verdict"], key=VERDICT_RANK.__getitem__)


def _padding_cell(rows: pd.DataFrame) -> str:
    """A K-tail cell: the paddings (scale padding, +0K = A and B rows zero-padded in K) under
    which the kernel is not safe, each with its verdict."""
    unsafe = rows[rows["verdict"] != "safe"]
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
    worst = rows.loc[rows["verdict"].map(VERDICT_RANK).idxmax()]
    v = str(worst["verdict"])
    if v == "wrong" and worst["bad"]:
        return (
            f"wrong D[{int(worst['first_bad_row'])},{int(worst['first_bad_col'])}] "
            f"exp {fmt_value(worst['expected'])} got {fmt_value(worst['got'])}"
        )
    if v == "wrong":
        return f"wrong ({int(worst['canary_damaged'])} canaries)"
    if v == "race":
        return f"race ({int(worst['races'])} dwords)"
    return v


def safety_section(rs: ResultSet, out_dir: Path | None) -> Section:
    df = rs.table("safety")
    sec = Section("safety", "Shape-edge safety: kernel x edge class (emulator)", "not run", "none")
    if df is None or not len(df):
        sec.notes.append("safety.parquet is missing: the safety sweep has not run.")
        return sec
    # natural kernel order once: the table and the heatmap below group in this order
    raw = df[df["policy"] == "unsafe"].sort_values("kernel", key=in_kernel_order, kind="stable")
    padded = df[df["policy"] == "pad"]
    counts = []
    for edge in EDGE_CLASSES:
        cell = raw[raw["edge_class"] == edge].groupby("kernel")["verdict"]
        worst = cell.agg(lambda v: max(v, key=VERDICT_RANK.__getitem__))
        tally = worst.value_counts()
        counts.append(f"{edge}: " + ", ".join(f"{n} {v}" for v, n in sorted(tally.items())))
    disagree = df[~df["agrees"]]
    sec.verdict = f"{df['kernel'].nunique()} kernels; worst verdict per kernel: " + "; ".join(
        counts
    )
    sec.verdict += (
        f"; padded-output remedy safe in {int((padded['verdict'] == 'safe').sum())} of "
        f"{len(padded)} unsafe shapes"
    )
    sec.state = "bad" if len(disagree) else "info"
    sec.notes.append(
        "safe: D[:M,:N] right and no canary outside it moved in every workgroup order, no "
        "races; race: right here, but two workgroups store to one address (hardware order "
        "decides); wrong: first bad element (expected, got) in some order; fault: the kernel "
        "left its buffers (the emulator refuses; hardware writes or reads whatever is there)"
    )
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
    table = []
    for kernel, rows in raw.groupby("kernel", sort=False):
        first = rows.iloc[0]
        line: dict[str, Any] = {"kernel": short_kernel(str(kernel))}
        line["store"] = first["store_class"]
        for edge in EDGE_CLASSES:
            line[edge] = _safety_cell(rows[rows["edge_class"] == edge])
        pads = padded[padded["kernel"] == kernel]
        line["padded"] = (
            "-" if not len(pads) else "safe" if (pads["verdict"] == "safe").all() else "NOT safe"
        )
        line["static D bound"] = first["static_d_bound"]
        line["static N guards"] = first["static_n_guards"]
        table.append(line)
    sec.table = pd.DataFrame(table)
    if out_dir is not None:
        worst = {
            short_kernel(str(kernel)): {
                edge: _worst_verdict(rows[rows["edge_class"] == edge]) for edge in EDGE_CLASSES
            }
            for kernel, rows in raw.groupby("kernel", sort=False)
        }
        cells = pd.DataFrame.from_dict(worst, orient="index")
        sec.plot = plot_safety_heatmap(cells, out_dir / HEATMAP_PNG)
    repro = []
    for (kernel, edge), rows in raw[raw["verdict"] != "safe"].groupby(["kernel", "edge_class"]):
        worst = rows.loc[rows["verdict"].map(VERDICT_RANK).idxmax()]
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
    if df is None:
        sec.notes.append("audit.parquet is missing: the tuned-config audit has not run.")
        return sec
    if not len(df):
        sec.verdict = "the fetched aiter has no a4w4 tuned GEMM table with asm rows"
        return sec
    unsafe = df[df["status"] == "unsafe"]
    parts = []
    for name, t in df.groupby("csv", sort=True):
        other = int((t["status"] == "other-arch").sum())
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


def fidelity_section(rs: ResultSet, out_dir: Path | None) -> Section:
    """What an emulator verdict is worth: f4pipe.emu.fidelity's table."""
    from f4pipe.emu.fidelity import FIDELITY

    sec = Section(
        "fidelity",
        "Emulator fidelity: what a verdict from the emulator covers",
        "exact where the ISA defines the result; memory values in one legal schedule, with "
        "the timing that schedule hides checked; no throughput",
        "info",
    )
    sec.table = pd.DataFrame(FIDELITY, columns=["aspect", "how", "detail"])
    return sec


#: A section from a result set; `out_dir` is where its plot goes (None: no plots).
SectionBuilder = Callable[[ResultSet, "Path | None"], Section]

#: The report's sections in page order. A new section is one function with this signature,
#: added here.
SECTIONS: list[SectionBuilder] = [
    roundtrip_section,
    verify_section,
    splitk_section,
    bench_section,
    safety_section,
    audit_section,
    fidelity_section,
    reuse_section,
]
