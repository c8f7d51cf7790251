"""Run the fuzz targets of tests/test_fuzz.py for a time budget (`nox -s fuzz`).

Each round is one pytest run with the "fuzz" Hypothesis profile (F4PIPE_FUZZ_EXAMPLES examples
per target, fresh random seeds every round); rounds repeat until the budget is spent. The first
failing round stops the loop: Hypothesis prints the shrunk input and keeps it in its example
database (.hypothesis/), so the next run replays it first. Add it to the regression cases.

    python scripts/fuzz.py --minutes 10 [-- extra pytest args]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="time budget (default 10)")
    ap.add_argument("--examples", type=int, default=300, help="examples per target per round")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (e.g. -k codeobject)")
    ns = ap.parse_args()
    env = {
        **os.environ,
        "F4PIPE_HYPOTHESIS_PROFILE": "fuzz",
        "F4PIPE_FUZZ_EXAMPLES": str(ns.examples),
    }
    cmd = [sys.executable, "-m", "pytest", "tests/test_fuzz.py", "-x", "-q", *ns.pytest_args]
    start = time.monotonic()
    deadline = start + 60 * ns.minutes
    rounds = 0
    while time.monotonic() < deadline:
        rounds += 1
        proc = subprocess.run(cmd, env=env, check=False)
        elapsed = (time.monotonic() - start) / 60
        if proc.returncode != 0:
            print(f"fuzz: round {rounds} FAILED after {elapsed:.1f} min (see above)")
            return 1
        print(f"fuzz: round {rounds} passed, {elapsed:.1f} of {ns.minutes} min", flush=True)
    print(f"fuzz: {rounds} rounds, {(time.monotonic() - start) / 60:.1f} min, no crash")
    return 0


if __name__ == "__main__":
    sys.exit(main())
