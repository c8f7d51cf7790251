"""Which f4gemm kernels aiter's tuner could choose from when it timed each row of the pinned
wheel's tuned table, read from aiter's git history; writes f4pipe/perf/tuning_history.json.

Why: the tuned table keeps a row as it was first recorded. Rows timed before a kernel existed
were never raced against it, so "aiter's recorded kernel is the fastest" holds only among the
kernels present then. Ranking such a row against all 35 kernels would score the cycle model
on a race that never ran. The history is a fact about aiter's repository, so it is recorded
once, here, with the command that regenerates it:

    python scripts/aiter_tuning_history.py --aiter-git PATH/TO/aiter [--f4gemm-dir DIR]

For every asm row (cu_num 256) of the wheel's table, the first commit of aiter's
`aiter/configs/a4w4_blockscale_tuned_gemm.csv` that holds the identical row (M, N, K, kernel
and us), and per such commit the f4gemm kernels the tuner raced (kernels_at).
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from f4pipe.aiter.manifest import MANIFEST_NAME, Manifest, read_manifest
from f4pipe.aiter.tuned import read_tuned
from f4pipe.core.fsio import write_text
from f4pipe.fetch import GIT_F4GEMM_PATH
from f4pipe.perf.fit import MAIN_TABLE, default_f4gemm_dir, main_table
from f4pipe.perf.history import HISTORY_PATH, row_key

TABLE_IN_GIT = f"aiter/configs/{MAIN_TABLE}"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def table_commits(repo: Path, paths: tuple[str, ...] = (TABLE_IN_GIT,)) -> list[tuple[str, str]]:
    """(commit, date) of every change to the tuned table (or to any of `paths`), oldest
    first."""
    out = git(repo, "log", "--reverse", "--date=short", "--format=%H %ad", "--", *paths)
    return [tuple(line.split()) for line in out.splitlines() if line]


def kernels_at(repo: Path, commit: str) -> list[str]:
    """The f4gemm kernels aiter's tuner raced at `commit`: those its manifest lists with
    bpreshuffle 1 and whose code object is there. The tuner
    (csrc/ck_gemm_a4w4_blockscale/gemm_a4w4_blockscale_tune.py, get_asm_kernels) keeps only
    the manifest's bpreshuffle == 1 rows, one kernel per (tile_M, tile_N, splitK), since
    2025-07-24 (28c1973512), a week before the table's oldest asm row: gemm_a4w4 takes B
    pre-shuffled, so the noBpreShuffle kernel was never in a race. The manifest spells the
    tile columns tile_m / tile_n until 2025-11-22 (9b01b0d818) and tile_M / tile_N since."""
    names = git(repo, "ls-tree", "--name-only", commit, f"{GIT_F4GEMM_PATH}/").split()
    present = {Path(n).stem for n in names if n.endswith(".co")}
    text = git(repo, "show", f"{commit}:{GIT_F4GEMM_PATH}/{MANIFEST_NAME}")
    listed = pd.read_csv(io.StringIO(text))
    listed.columns = [c.lower() if c in ("tile_M", "tile_N") else c for c in listed.columns]
    shuffled = listed[listed["bpreshuffle"] == 1]
    raced = {
        Path(c).stem for c in shuffled.groupby(["tile_m", "tile_n", "splitK"])["co_name"].first()
    }
    return sorted(raced & present)


def first_commits(repo: Path, symbols: dict[str, str]) -> dict[str, str]:
    """Row key -> the first commit whose table holds that exact row."""
    first: dict[str, str] = {}
    for commit, _date in table_commits(repo):
        text = git(repo, "show", f"{commit}:{TABLE_IN_GIT}")
        t = pd.read_csv(io.StringIO(text), dtype=str)
        if "kernelName" not in t:
            continue
        for r in t[t["kernelName"].isin(symbols)].itertuples():
            key = row_key(int(r.M), int(r.N), int(r.K), symbols[r.kernelName], r.us)
            first.setdefault(key, commit)
    return first


def parse_history_args(
    doc: str, argv: list[str] | None
) -> tuple[argparse.Namespace, Path, Manifest, dict[str, str]]:
    """The arguments both history scripts take (an aiter clone, the wheel's f4gemm directory),
    and the wheel's manifest with its kernel symbol -> .co name."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--aiter-git", type=Path, required=True, help="a clone of ROCm/aiter")
    parser.add_argument("--f4gemm-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    f4gemm = args.f4gemm_dir or default_f4gemm_dir()
    manifest = read_manifest(f4gemm)
    return args, f4gemm, manifest, {e.symbol: e.name for e in manifest}


def main(argv: list[str] | None = None) -> int:
    args, f4gemm, _manifest, symbols = parse_history_args(__doc__, argv)
    wheel = read_tuned(main_table(f4gemm))
    wheel = wheel[wheel["kernelName"].isin(symbols) & (wheel["cu_num"] == 256)]
    first = first_commits(args.aiter_git, symbols)
    rows, commits = {}, {}
    for r in wheel.itertuples():
        key = row_key(int(r.M), int(r.N), int(r.K), symbols[r.kernelName], r.us)
        if key not in first:
            print(f"error: wheel row {key} is in no commit of {args.aiter_git}", file=sys.stderr)
            return 2
        rows[key] = first[key][:10]
        commits.setdefault(first[key][:10], first[key])
    dates = dict(table_commits(args.aiter_git))
    out = {
        "source": f"git history of ROCm/aiter ({TABLE_IN_GIT}, {GIT_F4GEMM_PATH}/*.co)",
        "command": "python scripts/aiter_tuning_history.py --aiter-git PATH",
        "table": str(f4gemm.parent.name),
        "commits": {
            short: {"date": dates[full], "kernels": kernels_at(args.aiter_git, full)}
            for short, full in sorted(commits.items(), key=lambda kv: dates[kv[1]])
        },
        "rows": rows,
    }
    write_text(HISTORY_PATH, json.dumps(out, indent=1) + "\n")
    print(f"{len(rows)} rows, {len(commits)} commits -> {HISTORY_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
