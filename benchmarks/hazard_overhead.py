"""What hazard checking costs: the 35 f4gemm kernels at M=300 N=2048 K=1024 on the emulator,
each run with timing checks on and off in the same process (alternating which goes first, so
load from other work hits both alike), plus `f4pipe try` on an unedited 32x128.

Target (issue "The emulator must see what hardware sees"): on/off <= 1.3, try < 2 s.
Run: `nox -s bench` (or `python benchmarks/hazard_overhead.py [--kernels N]`).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from f4pipe.aiter.manifest import read_manifest
from f4pipe.core.cache import cache_root
from f4pipe.emu import EmulatorDevice
from f4pipe.fetch import PypiSource, fetch_aiter
from f4pipe.host.gemm import GemmRequest, run_gemm


def f4gemm_dir() -> Path:
    """The pinned wheel's f4gemm directory, in the tests' resource cache (fetched once)."""
    return fetch_aiter(PypiSource(), cache_root() / "test-resources").f4gemm_dir


def timed_run(check: bool, entry, co_path: Path) -> tuple[float, int | None]:
    device = EmulatorDevice(check_hazards=check)
    t0 = time.process_time()
    r = run_gemm(device, entry, co_path, GemmRequest(300, 2048, 1024, edge_policy="pad"))
    return time.process_time() - t0, r.hazards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=0, help="only the first N kernels")
    args = parser.parse_args()
    d = f4gemm_dir()
    manifest = read_manifest(d)
    entries = list(manifest)[: args.kernels or None]
    on = off = 0.0
    found = 0
    for i, entry in enumerate(entries):
        order = (True, False) if i % 2 == 0 else (False, True)
        for check in order:
            cpu, hazards = timed_run(check, entry, manifest.co_path(entry))
            if check:
                on += cpu
                found += hazards or 0
            else:
                off += cpu
    print(f"{len(entries)} kernels at 300x2048x1024, CPU seconds (fresh device per run):")
    print(f"  hazard checks on  {on:7.1f} s   ({found} hazards)")
    print(f"  hazard checks off {off:7.1f} s")
    print(f"  ratio on/off      {on / off:7.2f}   (target <= 1.30)")
    edit = Path(tempfile.mkdtemp()) / "k.s"
    co = manifest.co_path(manifest.get("f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"))
    subprocess.run(["f4pipe", "co2asm", str(co), "-o", str(edit)], check=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        ["f4pipe", "try", str(edit), "--co-dir", str(d)], check=True, stdout=subprocess.DEVNULL
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"  f4pipe try 32x128 {wall:7.2f} s wall, {cpu:.2f} s CPU (target < 2 s)")


if __name__ == "__main__":
    main()
