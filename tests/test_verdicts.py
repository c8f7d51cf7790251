"""The verdict words have one home (f4pipe.core.verdicts): every verdict the sweep writes renders
in the report's table, its heatmap and compare (a "hazard" row once ended in a KeyError and a
blank heatmap cell)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.colors import to_rgba

from f4pipe.aiter.shaperules import EDGE_CLASSES
from f4pipe.compare.changes import safety_changes
from f4pipe.core.schemas import KEY_FIELDS, SAFETY, read_table, write_rows
from f4pipe.core.verdicts import (
    BENCH_STATUSES,
    RUN_STATUSES,
    SAFETY_COLOURS,
    SAFETY_MEANINGS,
    SAFETY_RANK,
    SAFETY_VERDICTS,
)
from f4pipe.pipeline.audit import emulated_verdict
from f4pipe.pipeline.edgesweep import OrderOutcome, verdict_of
from f4pipe.report.plots import safety_heatmap_rgba
from f4pipe.report.safety import safety_section

PNG = b"\x89PNG"
KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"


def _row(edge: str, verdict: str, k: int) -> dict:
    """A whole safety.parquet row (the schema's every column) for one edge cell."""
    return {
        **{f.name: "test" for f in KEY_FIELDS},
        "kernel": KERNEL, "tile_m": 256, "tile_n": 256, "bpreshuffle": True,
        "store_class": "guarded", "edge_class": edge, "m": 33, "n": 256, "k": k,
        "policy": "unsafe", "scale_pad": "driver", "k_pad": "none", "orders": "in-order",
        "verdict": verdict, "order_dependent": False, "bad": 0, "canary_damaged": 0,
        "races": 0, "race_detail": "",
        "detail": "s_waitcnt vmcnt too loose" if verdict == "hazard" else "",
        "static_d_bound": "", "static_n_guards": "", "static_n_bounded": True,
        "static_k_loop": "", "static_load_bound": "", "reproducer": "f4pipe gemm ...",
        "rule_safe": True, "agrees": verdict == "safe",
        **dict.fromkeys(("first_bad_row", "first_bad_col", "expected", "got")),
        **dict.fromkeys(("reused_from", "reuse_key")),
        "variant": "original",
    }  # fmt: skip


class _Set:
    """A result set of one table, read back from real Parquet."""

    def __init__(self, path: Path) -> None:
        self.safety = read_table(path, SAFETY).to_pandas()

    def table(self, name: str) -> pd.DataFrame | None:
        return self.safety if name == "safety" else None


def _safety_set(tmp_path: Path, name: str, verdicts: dict[str, str]) -> _Set:
    path = tmp_path / f"{name}.parquet"
    write_rows(path, [_row(edge, v, 512) for edge, v in verdicts.items()], SAFETY)
    return _Set(path)


def test_every_verdict_has_a_rank_a_colour_and_a_meaning():
    assert list(SAFETY_RANK) == list(SAFETY_COLOURS) == list(SAFETY_MEANINGS)
    assert list(SAFETY_VERDICTS) == list(SAFETY_RANK)
    assert len(set(SAFETY_COLOURS.values())) == len(SAFETY_VERDICTS)


def test_the_schema_comments_list_the_verdicts_and_statuses_in_their_order():
    """core/schemas.py documents the tables' verdict and status columns; it must name the
    home's words, in the home's order."""
    lines = (Path(__file__).parents[1] / "f4pipe/core/schemas.py").read_text().splitlines()
    text = " ".join(line.removeprefix("# ") for line in lines if line.startswith("# "))
    assert f"verdict: {' | '.join(SAFETY_VERDICTS)} (" in text
    runs, bench = (" | ".join(f'"{s}"' for s in words) for words in (RUN_STATUSES, BENCH_STATUSES))
    assert f"status: {runs} (verify, splitk); {bench} (bench)." in text


@pytest.mark.parametrize("caption", ["safety.rst", "safety_heatmap.rst"])
def test_the_report_captions_name_every_verdict(caption):
    text = (Path(__file__).parents[1] / "workflow/report" / caption).read_text()
    assert [v for v in SAFETY_VERDICTS if not re.search(rf"\b{v}\b", text)] == []


def test_a_hazard_row_renders_in_the_report_heatmap_and_compare(tmp_path):
    edges = list(EDGE_CLASSES)
    before = _safety_set(tmp_path, "A", dict.fromkeys(edges, "safe"))
    after = _safety_set(tmp_path, "B", {**dict.fromkeys(edges, "safe"), edges[0]: "hazard"})

    sec = safety_section(after, tmp_path)  # type: ignore[arg-type]
    table = sec.table.set_index("kernel")
    assert table.loc["BpreShuffle_256x256", edges[0]] == "hazard"
    assert table.loc["BpreShuffle_256x256", edges[1]] == "safe"
    assert "1 hazard" in sec.verdict
    assert any("hazard: " in note for note in sec.notes)
    assert sec.code and "# BpreShuffle_256x256 " + edges[0] + ": hazard" in next(
        iter(sec.code.values())
    )
    assert (tmp_path / sec.plot).read_bytes().startswith(PNG)

    cells = pd.DataFrame({edges[0]: ["hazard"], edges[1]: ["safe"], edges[2]: [""]})
    rgba = safety_heatmap_rgba(cells)
    assert tuple(rgba[0, 0]) == to_rgba(SAFETY_COLOURS["hazard"])
    assert tuple(rgba[0, 1]) == to_rgba(SAFETY_COLOURS["safe"])
    assert rgba[0, 2, 3] == 0  # not run: blank

    changed = safety_changes(before, after)  # type: ignore[arg-type]
    assert changed[["edge", "verdict"]].values.tolist() == [[edges[0], "safe -> hazard"]]


@pytest.mark.parametrize("verdict", SAFETY_VERDICTS)
def test_every_verdict_is_a_cell_of_its_own_colour(verdict, tmp_path):
    cells = pd.DataFrame({EDGE_CLASSES[0]: [verdict]})
    assert tuple(safety_heatmap_rgba(cells)[0, 0]) == to_rgba(SAFETY_COLOURS[verdict])
    sec = safety_section(_safety_set(tmp_path, "A", {EDGE_CLASSES[0]: verdict}), None)  # type: ignore[arg-type]
    assert sec.table.iloc[0][EDGE_CLASSES[0]].startswith(verdict)


def _outcome(order: str, **seen) -> OrderOutcome:
    return OrderOutcome(order, **seen)


WRONG_ORDER = dict(bad=3, first_bad=(1, 2), expected=1.0, got=2.0)


@pytest.mark.parametrize(
    ("seen", "want"),
    [
        ([{}, {}], "safe"),
        ([{"races": 1}, {}], "race"),
        ([{"races": 1}, {"hazards": 1}], "hazard"),
        ([{"hazards": 1}, WRONG_ORDER], "wrong"),
        ([{"canary_damaged": 1}, {"races": 1}], "wrong"),
        ([WRONG_ORDER, {"fault": "outside every allocation"}], "fault"),
    ],
)
def test_the_sweep_s_verdict_is_the_worst_any_order_shows(seen, want):
    """A later, worse order outranks an earlier, milder one, in core.verdicts' order."""
    outcomes = [_outcome(o, **s) for o, s in zip(("in-order", "reverse"), seen, strict=True)]
    assert verdict_of(outcomes) == want


def test_the_audit_names_the_worst_verdict_and_the_first_order_that_shows_it():
    """The audit's view: aiter's padding rows damaged is a race (outside D[:M,:N]); the
    reproducer order is the first that shows the worst verdict, not the first run."""
    orders = ("in-order", "reverse", "interleaved")
    race_then_wrong = [
        _outcome("in-order", canary_damaged=2, race_summary="2 stores raced"),
        _outcome("reverse", **WRONG_ORDER),
        _outcome("interleaved", **WRONG_ORDER),
    ]
    verdict, detail, order = emulated_verdict(race_then_wrong, orders)
    assert (verdict, order) == ("wrong", "reverse") and "first D[1,2]" in detail
    assert emulated_verdict([_outcome("in-order", canary_damaged=2)], orders)[0] == "race"
    assert emulated_verdict([_outcome(o) for o in orders], orders) == ("safe", "", "in-order")
    faulted = [_outcome("in-order", **WRONG_ORDER), _outcome("reverse", fault="left A")]
    assert emulated_verdict(faulted, orders) == ("fault", "left A", "reverse")
