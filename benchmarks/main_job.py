"""The main job's two figures, measured in a fresh clone:

1. cold: `snakemake --cores N all` on the default configuration with empty results (the aiter
   wheel and LLVM come from the user's cache: run the main job once before);
2. update: the same job for a second aiter id whose code objects are byte-identical (a
   `kind: local` copy of the fetched `resources/aiter/<id>/` whose manifest gained a blank line,
   so its content id differs), which should take every round trip, verify, splitk and safety row
   and every audit emulation from the result store.

CPU is user + sys of the Snakemake process and all its children (getrusage), wall is the
monotonic clock. Targets: cold at most 100 CPU-s, update at most 30 s wall, both with
`--cores 1` on the 2-core reference machine. The README quotes both from one run of
benchmarks/newcomer.py, which runs this script in its fresh clone (`--clone`). Machines
differ (the same job has taken twice as long on one 2-core
machine as on another), so the script first times a fixed workload of the kind f4pipe's jobs
are made of (a pure-Python loop, as the emulator's interpreter; single-threaded numpy array
arithmetic) and prints its CPU seconds beside the figures: two machines' figures compare as
their reference figures do.

Run: `nox -s bench` (last, about 4 minutes), or `python benchmarks/main_job.py [--cores N]`
with `snakemake` and `f4pipe` on PATH.
"""

from __future__ import annotations

import argparse
import difflib
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parent.parent
STORE_KEYED = ("roundtrip", "verify", "splitk", "safety")


def machine_reference() -> tuple[float, float]:
    """CPU seconds of (a pure-Python loop, numpy array arithmetic on one thread): a fixed
    workload, the same on every machine, to put beside the main job's figures."""
    start = time.process_time()
    total = 0
    for i in range(4_000_000):
        total += (i * i) % 7
    python_s = time.process_time() - start
    values = np.random.default_rng(0).standard_normal(1_000_000)
    start = time.process_time()
    for _ in range(30):
        values = np.sort(np.sqrt(np.abs(values)) * 1.5 - 0.25)  # elementwise + sort: no BLAS
    return python_s, time.process_time() - start


def run_main_job(clone: Path, cores: int) -> tuple[float, float, str]:
    """(wall s, CPU s, jobs) of one `snakemake --cores N all` in `clone`; exits if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(
        ["snakemake", "--cores", str(cores), "all"], cwd=clone, capture_output=True, text=True
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"snakemake failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    steps = re.findall(r"(\d+) of \d+ steps \(100%\) done", proc.stderr)
    return wall, cpu, steps[-1] if steps else "?"


def use_local_copy(clone: Path, fetched: Path) -> Path:
    """A byte-identical copy of the fetched aiter whose manifest gained a blank line, as the
    clone's source."""
    copy = clone / "aiter-copy"
    shutil.copytree(fetched, copy)
    (manifest,) = (copy / "f4gemm").glob("*.csv")
    manifest.write_text(manifest.read_text() + "\n")
    config_path = clone / "config" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["aiter"] = {"kind": "local", "path": str(copy / "f4gemm")}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return copy


def reuse_counts(result_set: Path) -> str:
    parts = []
    for table in STORE_KEYED:
        rows = pd.read_parquet(result_set / f"{table}.parquet")
        parts.append(f"{table} {int(rows.reused_from.notna().sum())}/{len(rows)}")
    return ", ".join(parts)


def report_differences(old: Path, new: Path) -> list[str]:
    """Lines of summary.md before its provenance section (which names each set's source,
    date and file digests) that differ, with each set's own id written as <id>."""

    def lines(result_set: Path) -> list[str]:
        text = (result_set / "report" / "summary.md").read_text().split("## Provenance")[0]
        return re.sub(re.escape(result_set.name), "<id>", text).splitlines()

    return [
        line
        for line in difflib.unified_diff(lines(old), lines(new), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def measure(clone: Path, cores: int) -> None:
    """The cold run and the byte-identical update in `clone`, each printed as a line."""
    wall, cpu, jobs = run_main_job(clone, cores)
    (cold,) = (p for p in (clone / "results").iterdir() if p.name.startswith("pypi-"))
    print(
        f"cold main job (--cores {cores}): {cpu:.1f} CPU-s ({cpu / 60:.2f} CPU-min), "
        f"{wall:.1f} s wall, {jobs} jobs [target <= 100 CPU-s]",
        flush=True,
    )
    use_local_copy(clone, clone / "resources" / "aiter" / cold.name)
    wall, cpu, jobs = run_main_job(clone, cores)
    (update,) = (p for p in (clone / "results").iterdir() if p.name.startswith("local-"))
    print(
        f"byte-identical update (--cores {cores}): {wall:.1f} s wall, {cpu:.1f} CPU-s, "
        f"{jobs} jobs [target <= 30 s wall]; reused: "
        f"{reuse_counts(update)}"
    )
    differences = report_differences(cold, update)
    print(
        f"report lines that differ beyond the aiter id and provenance: {len(differences)} "
        "(expected: the reuse summary, which says where each row came from)"
    )
    for line in differences:
        print(f"  {line[:160]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=1, help="snakemake --cores (default 1)")
    parser.add_argument(
        "--clone",
        type=Path,
        help="run in this fresh clone (its config is restored after the update run) instead "
        "of a temporary one (benchmarks/newcomer.py)",
    )
    args = parser.parse_args()
    python_s, numpy_s = machine_reference()
    print(
        f"machine reference (fixed workload): {python_s:.2f} CPU-s pure Python + "
        f"{numpy_s:.2f} CPU-s numpy = {python_s + numpy_s:.2f} CPU-s"
    )
    if args.clone:
        config = args.clone / "config" / "config.yaml"
        text = config.read_text()
        try:
            measure(args.clone, args.cores)
        finally:
            config.write_text(text)
        return
    with tempfile.TemporaryDirectory(prefix="f4pipe-main-job-") as tmp:
        clone = Path(tmp) / "f4pipe"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        measure(clone, args.cores)


if __name__ == "__main__":
    main()
