"""A comparison as report sections (the report's own rendering), a ratio plot, and the
index.html + summary.md directory."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from f4pipe.compare import Comparison, set_label
from f4pipe.compare.archs import ArchitectureChanges
from f4pipe.compare.changes import change_text
from f4pipe.core.fsio import atomic_dir
from f4pipe.report.plots import pyplot, save_figure
from f4pipe.report.render import (
    Section,
    render_html,
    render_markdown,
    short_kernel,
)


def plot_ratio(table: pd.DataFrame, path: Path) -> str:
    """Left: TFLOP/s of A and B per run, each with its 95 % interval where launch times were
    kept; right: B / A with the range both intervals allow."""
    plt = pyplot()
    fig, (pair, ax) = plt.subplots(1, 2, figsize=(13, 4), layout="constrained")
    labels = [
        f"{r['variant']} {r['kernel']}\n{r['shape (MxNxK /split)']}" for _, r in table.iterrows()
    ]
    for i, side in enumerate("AB"):
        values = table[f"tflops {side}"].astype(float)
        yerr = None
        if f"tflops {side} lo" in table and table[f"tflops {side} lo"].notna().any():
            lo = (values - table[f"tflops {side} lo"].astype(float)).clip(lower=0).fillna(0)
            hi = (table[f"tflops {side} hi"].astype(float) - values).clip(lower=0).fillna(0)
            yerr = [lo, hi]
        xs = [j + 0.4 * i for j in range(len(table))]
        pair.bar(xs, values, 0.4, yerr=yerr, capsize=3, label=side)
    pair.set_xticks([j + 0.2 for j in range(len(table))], labels, fontsize=7)
    pair.set_ylabel("TFLOP/s")
    pair.legend()
    ratio = table["ratio B/A (TFLOP/s)"]
    yerr = None
    if "ratio lo" in table and table["ratio lo"].notna().any():
        lo = (ratio - table["ratio lo"].astype(float)).clip(lower=0).fillna(0)
        hi = (table["ratio hi"].astype(float) - ratio).clip(lower=0).fillna(0)
        yerr = [lo, hi]
    ax.bar(range(len(table)), ratio, yerr=yerr, capsize=3, color="tab:blue")
    ax.axhline(1.0, color="k", linestyle=":")
    ax.set_xticks(range(len(table)), labels, fontsize=7)
    ax.set_ylabel("TFLOP/s B / A")
    return save_figure(fig, path)


def _code_object_section(c: Comparison) -> Section:
    sec = Section("code", "Code objects that changed", "", "ok")
    if not c.code_objects:
        sec.verdict = "no code object changed (same sha256 for every kernel)"
        return sec
    sec.state = "bad"
    sec.verdict = f"{len(c.code_objects)} code objects changed"
    sec.table = pd.DataFrame(
        [
            {
                "kernel": short_kernel(x.kernel),
                "change": x.change,
                "sha256 A": x.sha_a[:16],
                "sha256 B": x.sha_b[:16],
                "instructions": change_text(x.insns_a, x.insns_b),
                "instruction diff": x.instructions,
                "asm lines changed": x.asm_lines_changed,
                "descriptor / metadata": "; ".join(x.descriptor) or "same",
            }
            for x in c.code_objects
        ]
    )
    for x in c.code_objects:
        if x.asm_diff:
            sec.code[f"{x.kernel}: assembly diff (A -> B, comments ignored)"] = x.asm_diff
    return sec


def _architecture_section(arch: ArchitectureChanges) -> Section:
    """One architecture beside gfx950: its kernels, manifest, code objects and round trip,
    one row per change, as the summary names them."""
    lines = arch.summary_lines()
    changed = sum(arch.counts().values())
    sec = Section(
        f"arch-{arch.arch}",
        f"{arch.arch} code objects",
        f"{changed} changes" if changed else f"no {arch.arch} kernel changed",
        "bad" if changed else "ok",
    )
    sec.code[f"{arch.arch}: every change"] = lines
    return sec


def _table_section(key: str, title: str, df: pd.DataFrame | None, what: str) -> Section:
    if df is None:
        return Section(key, title, f"{what}: not in both sets", "none")
    if not len(df):
        return Section(key, title, f"no {what} changed", "ok")
    return Section(key, title, f"{len(df)} {what} changed", "bad", table=df)


def _audit_section(c: Comparison) -> Section:
    sec = _table_section("audit", "Tuned-table audit", c.audit, "tuned-table rows")
    if c.audit is not None and len(c.audit):
        sec.verdict += f", {c.newly_unsafe} newly unsafe"
    return sec


def comparison_sections(c: Comparison, out_dir: Path | None) -> list[Section]:
    sections = [
        _table_section("kernels", "Kernels added, removed, renamed", c.kernels, "kernels"),
        _table_section("manifest", "Manifest attributes", c.manifest, "manifest attributes"),
        _code_object_section(c),
        _table_section("source", "aiter source and digests", c.provenance, "source facts"),
    ]
    if len(c.provenance):
        sections[-1].state = "info"
    sections.append(_table_section("host", "This release's host code", c.host_facts, "host facts"))
    sections.append(
        _table_section("roundtrip", "Round-trip verdicts", c.roundtrip, "round-trip verdicts")
    )
    sections += [_architecture_section(arch) for arch in c.architectures]
    sections.append(
        _table_section("verify", "Verification results", c.gemm["verify"], "verification results")
    )
    sections.append(_table_section("splitk", "splitK errors", c.gemm["splitk"], "splitK results"))
    sections.append(_table_section("safety", "Shape-edge safety", c.safety, "safety verdicts"))
    sections.append(_audit_section(c))
    tp = c.throughput
    if tp is None:
        sections.append(
            Section("bench", "Throughput", "not measured in both sets: no gfx950 device", "none")
        )
    else:
        summary = next(x for x in c.summary_lines() if x.startswith("throughput:"))
        sec = Section("bench", "Throughput", summary, "bad" if c.regressions else "info", table=tp)
        if out_dir is not None:
            sec.plot = plot_ratio(tp, out_dir / "throughput_ratio.png")
        sections.append(sec)
    return sections


def write_comparison(c: Comparison, out_dir: str | os.PathLike[str]) -> Path:
    """index.html + summary.md (+ throughput_ratio.png) in `out_dir`, replaced whole."""
    target = Path(out_dir)
    title = f"f4pipe compare: {c.a.aiter_id} -> {c.b.aiter_id}"
    prov = [("A", set_label(c.a)), ("B", set_label(c.b))]
    for label, rs in (("A", c.a), ("B", c.b)):
        prov.append((f"{label} f4pipe version (rows)", ", ".join(rs.f4pipe_versions) or "-"))
    with atomic_dir(target) as tmp:
        sections = comparison_sections(c, tmp)
        (tmp / "index.html").write_text(render_html(title, sections, prov))
        (tmp / "summary.md").write_text(render_markdown(title, sections, prov))
    return target
