"""The report's plots (matplotlib with the Agg backend: no display needed), with metadata
stripped so the same rows give the same PNG bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from f4pipe.core.layout import BASE_VARIANTS, SEED_SPLITK_ERR_PCT, SEED_SPLITK_SHAPE
from f4pipe.core.verdicts import SAFETY_COLOURS
from f4pipe.report.render import short_kernel

#: The plots `snakemake --report` carries beside the page (workflow/rules/report.smk): the
#: report always writes them, a picture saying so where a set has nothing to draw.
SPLITK_PNG = "splitk.png"
THROUGHPUT_PNG = "throughput.png"
HEATMAP_PNG = "safety_heatmap.png"
#: The splitK error's spread over operand draws, atomic orders and the bf16 atomic's rounding
#: at the seed's shape (written by research/f4research/splitkspread.py; docs/reference/gfx950.md,
#: "The bf16 atomic's rounding", reads the same numbers).
SPLITK_SPREAD = Path(__file__).with_name("splitk_spread.json")
#: (media type, extension) of the tables: Python's table of types has no Parquet, and
#: `snakemake --report` names each file's type from it (workflow/rules/common.smk adds this).
PARQUET_MEDIA_TYPE = ("application/vnd.apache.parquet", ".parquet")  # IANA, 2024


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> str:
    # No "Software"/date metadata: the same rows give the same PNG bytes (archives stay stable).
    fig.savefig(path, dpi=110, metadata={"Software": None})
    pyplot().close(fig)
    return path.name


def plot_splitk(ran: pd.DataFrame | None, path: Path) -> str:
    """Error vs split count per (variant, kernel, shape) beside the seed's MI355X line;
    with no runs (`ran` None) only the seed's line, titled so nobody mistakes it for a result."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.0), layout="constrained")
    xs = sorted(SEED_SPLITK_ERR_PCT)
    m, n, k = SEED_SPLITK_SHAPE
    ax.plot(
        [1 << x for x in xs],
        [SEED_SPLITK_ERR_PCT[x] for x in xs],
        "k:",
        marker="s",
        label=f"seed MI355X (M={m} N={n} K={k})",
    )
    _plot_splitk_spread(ax)
    styles = {"original": ("-", "o"), "rebuilt": ("--", "x")}
    if ran is None:
        ran = pd.DataFrame(columns=["variant", "kernel", "m", "n", "k", "log2_k_split"])
        ax.set_title("no splitK runs in this set: seed reference only", fontsize=9)
    for (variant, kernel, mm, nn, kk), grp in ran.groupby(["variant", "kernel", "m", "n", "k"]):
        grp = grp.sort_values("log2_k_split")
        line, marker = styles.get(str(variant), ("-.", "^"))
        short = short_kernel(str(kernel))
        ax.plot(
            [1 << int(v) for v in grp["log2_k_split"]],
            grp["err_frac"] * 100,
            line,
            marker=marker,
            label=f"{short} {variant} (M={mm} N={nn} K={kk})",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks([1 << x for x in xs], [str(1 << x) for x in xs])
    ax.set_xlabel("K split count")
    ax.set_ylabel("max |err| / max |ref|  (%)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return save_figure(fig, path)


def _plot_splitk_spread(ax: Any) -> None:
    """Under the runs: the range of the splitK error over operand draws and every order of the
    atomics measured, under each atomic rounding, and the emulator's own draw."""
    record = json.loads(SPLITK_SPREAD.read_text())
    for rounding, color in (("rne", "tab:blue"), ("rtz", "tab:red")):
        cells = record["spread"][rounding]
        splits = sorted(int(s) for s in next(iter(cells.values())))
        low = [min(cells[f][str(s)]["min"] for f in cells) for s in splits]
        high = [max(cells[f][str(s)]["max"] for f in cells) for s in splits]
        ax.fill_between(
            [1 << s for s in splits],
            low,
            high,
            color=color,
            alpha=0.15,
            linewidth=0,
            label=f"atomic {rounding}: {record['draws']} draws x orders (range)",
        )
    points = record["emulator_pct"]
    ax.plot(
        [1 << int(s) for s in points],
        list(points.values()),
        "+",
        color="tab:blue",
        markersize=9,
        label="emulator, f4pipe's draw, launch order",
    )


def plot_bench(table: pd.DataFrame, path: Path) -> str:
    """Measured TFLOP/s per run and variant, with the 95 % interval of each run's median as
    error bars where its launch times were kept (f4pipe.host.benchstats)."""
    plt = pyplot()
    labels = [f"{r['kernel']}\n{r['shape (MxNxK /split)']}" for _, r in table.iterrows()]
    cols = [c for c in (f"{v} tflops" for v in BASE_VARIANTS) if c in table]
    has_ratio = "ratio rebuilt/original" in table
    fig, axes = plt.subplots(
        1, 2 if has_ratio else 1, figsize=(11, 4.2), layout="constrained", squeeze=False
    )
    ax = axes[0][0]
    width = 0.8 / max(len(cols), 1)
    for i, col in enumerate(cols):
        xs = [j + i * width for j in range(len(table))]
        values = table[col].fillna(0)
        lo, hi = f"{col}_lo", f"{col}_hi"
        yerr = None
        if lo in table and hi in table:
            yerr = [(values - table[lo]).clip(lower=0).fillna(0), (table[hi] - values).fillna(0)]
        ax.bar(xs, values, width, yerr=yerr, capsize=3, label=col.split()[0])
    ax.set_xticks([j + width * (len(cols) - 1) / 2 for j in range(len(table))], labels, fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.legend()
    if has_ratio:
        ax2 = axes[0][1]
        ax2.bar(range(len(table)), table["ratio rebuilt/original"].fillna(0), color="tab:green")
        ax2.axhline(1.0, color="k", linestyle=":")
        ax2.set_xticks(range(len(table)), labels, fontsize=7)
        ax2.set_ylabel("rebuilt / original")
    return save_figure(fig, path)


def plot_predicted(table: pd.DataFrame, path: Path) -> str:
    """Predicted TFLOP/s per (kernel, shape), one bar per variant (original and rebuilt side by
    side), with the seed driver's MI355X measurement as a marker where there is one; titled as
    a prediction, and saying so when the variants' bars coincide (same decoded program)."""
    plt = pyplot()
    labels = [f"{r['kernel']}\n{r['shape (MxNxK /split)']}" for _, r in table.iterrows()]
    cols = [c for c in (f"{v} tflops_pred" for v in BASE_VARIANTS) if c in table]
    fig, ax = plt.subplots(figsize=(5.2, 4.0), layout="constrained")
    width = 0.8 / max(len(cols), 1)
    shades = {"original": "tab:gray", "rebuilt": "tab:blue"}
    for i, col in enumerate(cols):
        variant = col.split()[0]
        xs = [j + (i - (len(cols) - 1) / 2) * width for j in range(len(table))]
        ax.bar(
            xs,
            table[col].fillna(0),
            width,
            label=f"{variant}, predicted",
            color=shades.get(variant),
        )
    xs = list(range(len(table)))
    measured = table.get("seed measured us (MI355X)")
    if measured is not None:
        flops = [
            2 * float(m) * float(n) * float(k) / (us * 1e6) if us == us and us else None
            for (m, n, k), us in zip(
                (s.split()[0].split("x") for s in table["shape (MxNxK /split)"]),
                measured.astype(float),
                strict=True,
            )
        ]
        pts = [(x, f) for x, f in zip(xs, flops, strict=True) if f]
        if pts:
            ax.scatter(
                *zip(*pts, strict=True),
                color="tab:red",
                zorder=3,
                label="seed driver, measured on MI355X",
            )
    ax.set_xticks(xs, labels, fontsize=6)
    ax.set_ylabel("TFLOP/s")
    title = "PREDICTED throughput (no gfx950 device: not measured)"
    if len(cols) == 2 and table[cols[0]].equals(table[cols[1]]):
        title += "\noriginal = rebuilt: the same decoded program, so the same prediction"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)


def plot_predicted_vs_recorded(rows: pd.DataFrame, path: Path) -> str:
    """Log-log: the cycle model's predicted time against aiter's recorded MI355X time for
    every tuned row, one colour per kernel, with the diagonal and a +-20 % band."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 6.5), layout="constrained")
    colours = plt.get_cmap("tab10").colors
    for i, (kernel, part) in enumerate(rows.groupby("kernel", sort=True)):
        ax.scatter(
            part["aiter_us"],
            part["us_pred"],
            s=12,
            color=colours[i % 10],
            marker="os^Dv<>"[i // 10 % 7],  # a distinct (colour, marker) per kernel
            label=short_kernel_label(kernel),
        )
    lo = float(min(rows["aiter_us"].min(), rows["us_pred"].min())) * 0.8
    hi = float(max(rows["aiter_us"].max(), rows["us_pred"].max())) * 1.25
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    for f in (0.8, 1.2):
        ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("aiter's recorded time on MI355X (us)")
    ax.set_ylabel("PREDICTED time, cycle model (us)")
    ax.set_title("Cycle model vs aiter's recorded times (dotted: +-20 %)")
    ax.legend(fontsize=6, ncol=2, markerscale=1.5)
    return save_figure(fig, path)


def short_kernel_label(kernel: str) -> str:
    return kernel.rsplit("_", 1)[-1] if "_" in kernel else kernel


#: Inches per heatmap cell (width, height): at dpi 110 about 50 x 11 px, which the report
#: shows at about that size (render.TALL_PLOTS).
HEATMAP_CELL_IN = (0.45, 0.1)


def safety_heatmap_rgba(cells: pd.DataFrame) -> np.ndarray:
    """The heatmap's pixels, one per cell: its worst verdict's colour (core.verdicts
    SAFETY_COLOURS), transparent where the cell holds no verdict (not run)."""
    from matplotlib.colors import to_rgba

    blank = (0.0, 0.0, 0.0, 0.0)
    colours = {v: to_rgba(c) for v, c in SAFETY_COLOURS.items()}
    return np.array(
        [[colours.get(v, blank) for v in row] for row in cells.itertuples(index=False)],
        dtype=float,
    ).reshape(len(cells), cells.shape[1], 4)


def plot_safety_heatmap(cells: pd.DataFrame, path: Path) -> str:
    """Kernel x edge class, each cell coloured by its worst verdict (`cells`: one row per
    kernel, one column per edge class, verdict names). The figure is sized to the grid (a
    fixed size per cell), so 35 kernels stay legible instead of shrinking into a strip."""
    from matplotlib.patches import Patch

    plt = pyplot()
    width = 1.9 + HEATMAP_CELL_IN[0] * cells.shape[1]
    height = 1.0 + HEATMAP_CELL_IN[1] * len(cells)
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    ax.imshow(safety_heatmap_rgba(cells), aspect="auto")
    ax.set_xticks(range(cells.shape[1]), list(cells.columns), fontsize=7.5, rotation=35, ha="right")
    ax.set_yticks(range(len(cells)), list(cells.index), fontsize=7.5)
    ax.legend(
        handles=[Patch(color=c, label=v) for v, c in SAFETY_COLOURS.items()],
        loc="lower left",
        bbox_to_anchor=(0, 1.0),
        ncol=len(SAFETY_COLOURS),
        fontsize=7.5,
        handlelength=1,
        columnspacing=0.8,
        frameon=False,
    )
    ax.set_title("worst verdict per kernel and edge class (emulator)", fontsize=8, pad=16)
    return save_figure(fig, path)


def plot_nothing(path: Path, reason: str) -> str:
    """A picture that says why a set has no such plot (a stage that did not run): what the
    Snakemake report shows in its place, so it never reads as an empty result."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 1.2), layout="constrained")
    ax.axis("off")
    ax.text(0.5, 0.5, reason, ha="center", va="center", fontsize=9, wrap=True)
    return save_figure(fig, path)
