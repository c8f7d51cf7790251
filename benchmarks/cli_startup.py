"""What the command line costs before it works: CPU seconds (user + sys of the child process)
of `f4pipe --help` and of `f4pipe CMD --help` for every command, best of a few runs. Every
pipeline job pays this once.

Target: at most 0.2 s CPU each. tests/test_cli_startup.py guards the
cause (no numpy, pandas, pyarrow or matplotlib at argument parsing); this measures the effect.
Run: `nox -s bench` (or `python benchmarks/cli_startup.py [--runs N]`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from f4pipe.cli import COMMANDS

TARGET_CPU_S = 0.2


def cpu_seconds(argv: list[str]) -> float:
    """user + sys CPU of one `python -m f4pipe ARGV` child."""
    pid = os.fork()
    if pid == 0:  # the child: quiet, then the command line
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(sys.executable, [sys.executable, "-m", "f4pipe", *argv])
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"f4pipe {' '.join(argv)} failed")
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per command (best counts)")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "f4pipe", "--help"], capture_output=True, check=True)
    rows = [("(top level)", ["--help"])] + [(name, [name, "--help"]) for name in COMMANDS]
    worst = 0.0
    for label, argv in rows:
        best = min(cpu_seconds(argv) for _ in range(args.runs))
        worst = max(worst, best)
        print(f"{label:<14} {best:.3f} s CPU")
    verdict = "within" if worst <= TARGET_CPU_S else "OVER"
    print(f"worst {worst:.3f} s CPU: {verdict} the {TARGET_CPU_S} s target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
