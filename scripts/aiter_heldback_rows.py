"""Real MI355X timings of the pinned f4gemm code objects that the cycle model was not fitted
on, read from aiter's git history; writes f4pipe/perf/heldback_rows.csv.

Why: the calibration uses only the pinned wheel's tuned table (and the seed's 4 shapes), so
every other measurement of the same code objects is a test the model has not seen. aiter kept
tuning after the wheel: later revisions of its a4w4 tuned GEMM tables (the main table and the
model tables under `model_configs/`) add shapes and re-time old ones, with code objects
byte-identical to the wheel's (each row is kept only if, at its commit, the recorded kernel's
`.co` has the wheel's git blob hash). research/f4research/accuracy.py scores the model on them.

    python scripts/aiter_heldback_rows.py --aiter-git PATH/TO/aiter [--f4gemm-dir DIR]

One row per distinct (M, N, K, kernel, splitK, us) asm row with cu_num 256 that is not a row of
the wheel's main table, at its first commit: columns m, n, k, kernel (.co name), splitK, us,
table (path below aiter/configs), commit, date, shape_in_calibration (the wheel's main table
has a row at that M, N, K: a re-timing, not a new shape) and every_kernel_raced (the tuner had
all the wheel's pre-shuffled kernels at that commit, as aiter_tuning_history.kernels_at
reads it).
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pandas as pd

from f4pipe.core.fsio import write_text
from f4pipe.fetch import GIT_F4GEMM_PATH
from f4pipe.perf.fit import HELDBACK_PATH, measured_rows
from f4pipe.perf.history import row_key

sys.path.insert(0, str(Path(__file__).parent))
from aiter_tuning_history import git, kernels_at, parse_history_args, table_commits

TABLES = (
    "aiter/configs/*a4w4*tuned*gemm*.csv",
    "aiter/configs/model_configs/*a4w4*tuned*gemm*.csv",
)


def blob_hash(path: Path) -> str:
    return subprocess.run(
        ["git", "hash-object", str(path)], check=True, capture_output=True, text=True
    ).stdout.strip()


def tables_at(repo: Path, commit: str) -> list[str]:
    names = git(repo, "ls-tree", "-r", "--name-only", commit, "aiter/configs/").split()
    return [n for n in names if "a4w4" in Path(n).name and "tuned_gemm" in n and "untuned" not in n]


def code_objects_at(repo: Path, commit: str) -> dict[str, str]:
    """.co name -> git blob hash at `commit`."""
    out = git(repo, "ls-tree", commit, f"{GIT_F4GEMM_PATH}/")
    blobs = {}
    for line in out.splitlines():
        meta, name = line.split("\t")
        if name.endswith(".co"):
            blobs[Path(name).stem] = meta.split()[2]
    return blobs


def raced_at(repo: Path, commit: str) -> list[str]:
    """The kernels the tuner raced at `commit` (none before the f4gemm manifest existed)."""
    try:
        return kernels_at(repo, commit)
    except (subprocess.CalledProcessError, KeyError):  # no manifest yet, or an older layout
        return []


def main(argv: list[str] | None = None) -> int:
    args, f4gemm, manifest, symbols = parse_history_args(__doc__, argv)
    wheel_blobs = {e.name: blob_hash(manifest.co_path(e)) for e in manifest}
    wheel = measured_rows(f4gemm, manifest)
    wheel = wheel[wheel["source"] == "aiter"]
    calibrated = {row_key(r.m, r.n, r.k, r.kernel, r.us) for r in wheel.itertuples()}
    shapes = {(r.m, r.n, r.k) for r in wheel.itertuples()}
    seen: set[tuple] = set()
    out = []
    preshuffled = {e.name for e in manifest if e.bpreshuffle == 1}
    for commit, date in table_commits(args.aiter_git, TABLES):
        blobs = code_objects_at(args.aiter_git, commit)
        every_kernel_raced = bool(blobs) and preshuffled <= set(raced_at(args.aiter_git, commit))
        for table in tables_at(args.aiter_git, commit):
            t = pd.read_csv(
                io.StringIO(git(args.aiter_git, "show", f"{commit}:{table}")), dtype=str
            )
            t.columns = [c.strip() for c in t.columns]
            if not {"kernelName", "cu_num", "M", "N", "K", "us"} <= set(t.columns):
                continue
            t = t[t["kernelName"].isin(symbols) & (t["cu_num"].astype(int) == 256)]
            for r in t.itertuples():
                kernel = symbols[r.kernelName]
                if blobs.get(kernel) != wheel_blobs[kernel]:
                    continue  # another build of the kernel: not the code the model reads
                m, n, k = int(r.M), int(r.N), int(r.K)
                split = int(getattr(r, "splitK", 0) or 0)
                if split == 0 and row_key(m, n, k, kernel, r.us) in calibrated:
                    continue
                key = (m, n, k, kernel, split, float(r.us))
                if key in seen:
                    continue
                seen.add(key)
                out.append(
                    {
                        "m": m,
                        "n": n,
                        "k": k,
                        "kernel": kernel,
                        "splitK": split,
                        "us": float(r.us),
                        "table": table.removeprefix("aiter/configs/"),
                        "commit": commit[:10],
                        "date": date,
                        "shape_in_calibration": (m, n, k) in shapes,
                        "every_kernel_raced": every_kernel_raced,
                    }
                )
    rows = pd.DataFrame(out).sort_values(["table", "m", "n", "k", "date"], kind="stable")
    write_text(HELDBACK_PATH, rows.to_csv(index=False))
    new = int((~rows["shape_in_calibration"]).sum())
    print(f"{len(rows)} rows ({new} at shapes the calibration has not seen) -> {HELDBACK_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
