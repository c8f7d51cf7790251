"""Cross-check f4pipe's timing rules against LLVM on generated kernels (`nox -s fuzz`,
`nox -s oracle`): f4research.oracle compiles each seed's kernel with llc for gfx950 and checks
that f4pipe adds nothing to LLVM's output and catches every s_nop and s_waitcnt LLVM needed.

    f4research oracle --kernels 400 [--first 1000]

Prints the counts of agreements and of explained and unexplained disagreements, each
unexplained one in full; exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from f4pipe.codeobj.toolchain import find_toolchain
from f4research.oracle import run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=400, help="kernels to generate (default 400)")
    ap.add_argument("--first", type=int, default=1000, help="first seed (default 1000)")
    ns = ap.parse_args()
    toolchain = find_toolchain()
    start = time.process_time(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="f4pipe-oracle-") as tmp:
        tally = run(range(ns.first, ns.first + ns.kernels), toolchain, Path(tmp))
    cpu, wall = time.process_time() - start[0], time.monotonic() - start[1]
    print(tally.summary())
    print(f"oracle: {wall:.1f} s wall, {cpu:.1f} CPU-s in this process (plus llc and llvm-mc)")
    return 1 if tally.unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
