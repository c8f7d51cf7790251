"""The verdict words of f4pipe, each defined once: the shape-edge safety verdicts (their order,
colours and meanings) and the statuses of a GEMM run.

The safety sweep, the tuned-table audit, the report, its heatmap and compare all rank, colour
and explain verdicts; before this module each kept its own list, and the report's lacked
"hazard", which the sweep writes. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable

# --- shape-edge safety (f4pipe.pipeline.edgesweep, safety.parquet `verdict`) -----------------

#: Every safety verdict, best first: a cell's worst verdict is the latest of its rows'.
SAFETY_VERDICTS: tuple[str, ...] = ("safe", "race", "hazard", "wrong", "fault")
SAFE, RACE, HAZARD, WRONG, FAULT = SAFETY_VERDICTS
#: A verdict's place in SAFETY_VERDICTS (0 = safe), to rank rows by.
SAFETY_RANK: dict[str, int] = {v: i for i, v in enumerate(SAFETY_VERDICTS)}
#: The heatmap's colour of each verdict (a cell not run is left blank).
SAFETY_COLOURS: dict[str, str] = {
    "safe": "#4caf50",
    "race": "#ffb300",
    "hazard": "#fb8c00",
    "wrong": "#e53935",
    "fault": "#6a1b9a",
}
#: What each verdict means, as the report's note says it.
SAFETY_MEANINGS: dict[str, str] = {
    "safe": "D[:M,:N] right and no canary outside it moved in every workgroup order, no races",
    "race": "right here, but two workgroups store to one address (hardware order decides)",
    "hazard": "right here only because the emulator's schedule hid a timing fault hardware can "
    "expose (named in the row's detail)",
    "wrong": "first bad element (expected, got) in some order",
    "fault": "the kernel left its buffers (the emulator refuses; hardware writes or reads "
    "whatever is there)",
}


def worst_verdict(verdicts: Iterable[str]) -> str:
    """The worst of some safety verdicts ("" of none)."""
    return max(verdicts, key=SAFETY_RANK.__getitem__, default="")


# --- GEMM runs (verify, splitk, bench tables' `status`) --------------------------------------

#: Every status of a verify or splitK row.
RUN_STATUSES: tuple[str, ...] = ("passed", "failed", "hazard", "error", "skipped")
#: Every status of a bench row.
BENCH_STATUSES: tuple[str, ...] = ("measured", "error", "skipped")
#: Statuses that are verdicts of a run, hence worth storing (not "skipped" or "error").
RUN_VERDICTS: tuple[str, ...] = ("passed", "failed", "hazard")
#: Statuses of runs that completed with values checked against the reference.
RUN_COMPLETED: tuple[str, ...] = ("passed", "failed")
#: Statuses the verify card counts against a set (and lists one line each).
RUN_PROBLEMS: tuple[str, ...] = ("failed", "hazard", "error")
#: A status as a headline says it of runs ("2 of 6 runs errored").
RAN_AS: dict[str, str] = {"error": "errored", "hazard": "with hazards"}
