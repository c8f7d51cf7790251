"""The report's sections, one function each, from a ResultSet to a Section: what ran, the
verdict, the table and the plot. A stage that did not run says so; nothing is drawn that a stage
did not record."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from f4pipe.core.layout import BASE_VARIANTS, SEED_SPLITK_ERR_PCT, SEED_SPLITK_SHAPE
from f4pipe.core.verdicts import RAN_AS, RUN_COMPLETED, RUN_PROBLEMS
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.report.plots import (
    SPLITK_PNG,
    THROUGHPUT_PNG,
    plot_bench,
    plot_predicted,
    plot_splitk,
)
from f4pipe.report.render import (
    Section,
    fmt_value,
    in_kernel_order,
    shape_label,
    short_kernel,
)
from f4pipe.report.reuse import reuse_section
from f4pipe.report.roundtrip import roundtrip_section
from f4pipe.report.safety import audit_section, safety_section
from f4pipe.report.tune import tune_section

NOT_MEASURED = "not measured: no gfx950 device"


def _gemm_rows(rs: ResultSet, name: str) -> pd.DataFrame | None:
    df = rs.table(name)
    return None if df is None or not len(df) else df


def _not_run(sec: Section, name: str, df: pd.DataFrame | None) -> bool:
    """Mark `sec` "not run" (no table) or "skipped" (no row ran); True if nothing to show."""
    if df is None:
        sec.verdict, sec.state, sec.headline = "not run", "none", "not run"
        sec.notes.append(f"{name}.parquet is missing: the {name} stage has not run.")
        return True
    ran = df[df["status"].isin(RUN_COMPLETED)]
    if not len(ran):
        errored = (df["status"] == "error").any()
        sec.verdict = f"no {name} run completed: {_status_counts(df)}"
        sec.headline = "no run completed"
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
    ran = RUN_COMPLETED
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
    sec.verdict = f"{_run_counts(df)} ({per_variant})" + (
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
    bad = df["status"].isin(RUN_PROBLEMS).any() or same != both
    sec.state = "bad" if bad else "ok"
    sec.headline = _run_counts(df)
    if not bad and same != both:
        sec.headline = f"rebuilt differs in {both - same} of {both} runs"
    sec.notes.append(f"device: {', '.join(sorted(set(df['device_id'])))}")
    sec.notes.extend(_problems(df))
    return sec


def _run_counts(df: pd.DataFrame) -> str:
    """'100 of 100 runs passed', or the runs that did not pass first ('2 of 100 runs failed,
    1 errored'): the per-variant statuses' counts summed over the variants; the verdicts of
    verify and splitK lead with it, so the card's numbers are theirs."""
    counts = df["status"].value_counts()
    total = len(df)
    not_passed = [s for s in counts.index if s not in ("passed", "skipped")]
    if not not_passed:
        skipped = int(counts.get("skipped", 0))
        return f"{int(counts.get('passed', 0))} of {total} runs passed" + (
            f", {skipped} skipped" if skipped else ""
        )
    worst, *others = sorted(not_passed, key=lambda s: (-int(counts[s]), s))
    return f"{int(counts[worst])} of {total} runs {RAN_AS.get(worst, worst)}" + "".join(
        f", {int(counts[s])} {RAN_AS.get(s, s)}" for s in others
    )


def _problems(df: pd.DataFrame) -> list[str]:
    """One line per failed or errored run, so they are seen without reading the whole table."""
    bad = df[df["status"].isin(RUN_PROBLEMS)]
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
    ran = df[df["status"].isin(RUN_COMPLETED)]
    worst = ran.groupby("log2_k_split")["err_frac"].max()
    sec.verdict = f"{_run_counts(df)}; worst error by split: " + ", ".join(
        f"{1 << int(lg)}: {v * 100:.2f} %" for lg, v in worst.items()
    )
    sec.state = "bad" if df["status"].isin(["failed", "error"]).any() else "ok"
    at = worst.idxmax()
    sec.headline = f"worst {worst[at] * 100:.2f} % at split {1 << int(at)}"
    if sec.state == "bad":
        sec.headline = _run_counts(df)
    sec.notes.extend(_problems(df))
    sec.table = _side_by_side(df, ("err_frac", "max_abs_err"))
    if out_dir is not None:
        sec.plot = plot_splitk(ran, out_dir / SPLITK_PNG)
    return sec


def bench_section(rs: ResultSet, out_dir: Path | None) -> Section:
    df = _gemm_rows(rs, "bench")
    sec = Section("bench", "Throughput: original vs rebuilt", NOT_MEASURED, "none")
    sec.headline = "not measured"
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
    sec.headline = f"MEASURED, {len(measured)} runs"
    if "ratio rebuilt/original" in table:
        ratios = table["ratio rebuilt/original"].dropna()
        if len(ratios):
            spread = f"{ratios.min():.3f} .. {ratios.max():.3f}"
            sec.verdict += f"; rebuilt/original TFLOP/s {spread}"
            sec.headline += f", rebuilt/original {spread}"
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
    median = f"{med if med is not None else 'n/a'} %"
    sec.verdict = (
        f"{NOT_MEASURED}; PREDICTED by the cycle model (calibration {ids}; out-of-sample "
        f"median error {median}, p90 {p90 if p90 is not None else 'n/a'} %{held})"
    )
    sec.headline = f"PREDICTED, median error {median}"
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
    sec.headline = "ISA-exact values, no throughput"  # what it covers: no count to lead
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
    tune_section,
    fidelity_section,
    reuse_section,
]
