"""The splitK spread (research/f4research/splitkspread.py): its replay of the kernel's
arithmetic is the emulator's, its committed measurement is what the docs and the plot show."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from f4research import splitkspread

from f4pipe.report.plots import SPLITK_SPREAD, _plot_splitk_spread, pyplot

GFX950_DOC = Path(__file__).resolve().parents[1] / "docs" / "reference" / "gfx950.md"


def test_the_replay_is_the_emulators_arithmetic_to_the_last_bit(f4gemm_dir) -> None:
    """One splitK run of the 256x256 kernel on the emulator (4 workgroups' atomics into each
    word) has exactly the error the replay computes for the same draw and launch order."""
    assert splitkspread.emulator_check((2,)) == {"2": 0.5615}


def test_a_different_order_or_rounding_changes_the_replay() -> None:
    """The replay's knobs do something: toward zero loses more than to nearest even, and a
    random per-element order gives a different D than launch order."""
    chunks = splitkspread.chunk_partials(1, 2)[:, :64, :64]
    ref = chunks.sum(axis=0)
    parts = splitkspread.bf16_partials(chunks, 3)
    launch = splitkspread.order_of("launch", 8, ref.shape, np.random.default_rng(0))
    shuffled = splitkspread.order_of("element", 8, ref.shape, np.random.default_rng(0))
    rne = splitkspread.accumulate(parts, launch, "rne")
    assert not np.array_equal(rne, splitkspread.accumulate(parts, shuffled, "rne"))
    rtz = splitkspread.accumulate(parts, launch, "rtz")
    assert np.abs(rtz - ref).max() > np.abs(rne - ref).max()


def test_the_docs_quote_the_committed_measurement() -> None:
    record = json.loads(SPLITK_SPREAD.read_text())
    doc = GFX950_DOC.read_text()
    section = doc[doc.index("## The bf16 atomic's rounding") :]
    for rounding in ("rne", "rtz"):
        for split, cell in record["spread"][rounding]["element"].items():
            row = re.search(rf"\| {rounding} \| {1 << int(split)} \|([^\n]*)", section)
            assert row, (rounding, split)
            assert f"{cell['min']:.2f}-{cell['max']:.2f}" in row.group(1), (rounding, split)


def test_the_splitk_plot_draws_the_spread_and_the_emulator() -> None:
    plt = pyplot()
    fig, ax = plt.subplots()
    _plot_splitk_spread(ax)
    labels = ax.get_legend_handles_labels()[1]
    plt.close(fig)
    assert any(label.startswith("atomic rne") for label in labels)
    assert any(label.startswith("atomic rtz") for label in labels)
    assert "emulator, f4pipe's draw, launch order" in labels
