"""CPU seconds (user + sys, this process) of the emulator stages' own work, in one process:
the seed matrix's verify for one variant (51 checks), the splitk matrix, and the shape-edge
safety sweep of all 35 kernels. Process start-up (one per job in the pipeline) is not in here.

The main job's own figure (target: at most 100 CPU-s) is benchmarks/main_job.py's; this
script splits out the stages so a change to one can be measured, before and after, in one
session. `--dump FILE` writes every row minus its timing column, so two commits' verdicts can
be compared with `cmp`. docs/performance.md has the figures.
Run: `nox -s bench` (or `python benchmarks/stage_cpu.py [--stage verify] [--kernels N]`).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from f4pipe.aiter.manifest import Manifest, read_manifest
from f4pipe.core.cache import cache_root
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.emu import EmulatorDevice
from f4pipe.fetch import PypiSource, fetch_aiter
from f4pipe.host.matrices import get_matrix
from f4pipe.pipeline.edgesweep import sweep
from f4pipe.pipeline.stages import StageSettings, splitk_stage, verify_stage

KEYS = ArtifactKeys("bench-aiter", "bench-toolchain", "emulator")
STAGES = ("verify", "splitk", "safety")


def f4gemm_dir() -> Path:
    """The pinned wheel's f4gemm directory, in the tests' resource cache (fetched once)."""
    return fetch_aiter(PypiSource(), cache_root() / "test-resources").f4gemm_dir


#: Row columns that measure the run rather than judge it (dropped from --dump).
TIMING_COLUMNS = frozenset({"seconds"})
DUMPED: dict[str, list[dict]] = {}


def dumped(stage: str, rows: list[dict]) -> list[dict]:
    """Keep `rows` minus their timing columns for --dump (the verdicts a speed-up must keep)."""
    DUMPED[stage] = [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]
    return rows


def run_verify(manifest: Manifest, kernels: list[str]) -> str:
    settings = StageSettings(keys=KEYS)
    rows = dumped("verify", verify_stage(EmulatorDevice(), manifest, get_matrix("seed"), settings))
    slow = sorted(rows, key=lambda r: -(r["seconds"] or 0))[:3]
    worst = ", ".join(f"{r['m']}x{r['n']}x{r['k']} {r['seconds']:.1f}s" for r in slow)
    passed = sum(bool(r["passed"]) for r in rows)
    return f"{len(rows)} runs, {passed} passed; slowest (wall): {worst}"


def run_splitk(manifest: Manifest, kernels: list[str]) -> str:
    settings = StageSettings(keys=KEYS)
    matrix = get_matrix("splitk")
    rows = dumped("splitk", splitk_stage(EmulatorDevice(), manifest, matrix, settings))
    return f"{len(rows)} runs, {sum(bool(r['passed']) for r in rows)} passed"


def run_safety(manifest: Manifest, kernels: list[str]) -> str:
    rows = dumped("safety", sweep(manifest, KEYS, kernels=kernels or None))
    verdicts: dict[str, int] = {}
    for row in rows:
        verdicts[row["verdict"]] = verdicts.get(row["verdict"], 0) + 1
    counts = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))
    return f"{len(rows)} rows ({counts})"


RUNNERS: dict[str, Callable[[Manifest, list[str]], str]] = {
    "verify": run_verify,
    "splitk": run_splitk,
    "safety": run_safety,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", action="append", choices=STAGES, help="default: all three")
    parser.add_argument("--kernels", type=int, default=0, help="safety: only the first N kernels")
    parser.add_argument(
        "--dump", type=Path, help="write every row (timing columns dropped) here as JSON"
    )
    args = parser.parse_args()
    manifest = read_manifest(f4gemm_dir())
    kernels = [e.name for e in manifest][: args.kernels] if args.kernels else []
    total = 0.0
    for stage in args.stage or STAGES:
        t0 = time.process_time()
        summary = RUNNERS[stage](manifest, kernels if stage == "safety" else [])
        cpu = time.process_time() - t0
        total += cpu
        print(f"{stage:7s} {cpu:7.1f} CPU s  {summary}", flush=True)
    print(f"{'total':7s} {total:7.1f} CPU s")
    if args.dump:
        args.dump.write_text(json.dumps(DUMPED, indent=1, sort_keys=True, default=str) + "\n")


if __name__ == "__main__":
    main()
