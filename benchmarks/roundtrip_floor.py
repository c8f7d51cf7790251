"""Round-trip + equivalence of all 35 f4gemm objects vs. the floor: the same LLVM invocations
in a plain shell loop. Prints seconds, the ratio, and the speed-up on 2 processes.

Run with `nox -s bench` (or directly: python benchmarks/roundtrip_floor.py).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from f4pipe.aiter.manifest import read_manifest
from f4pipe.codeobj.toolchain import Toolchain, find_toolchain
from f4pipe.core.cache import cache_root
from f4pipe.fetch import PypiSource, fetch_aiter
from f4pipe.pipeline.roundtrip import roundtrip


def shell_floor(objects: list[Path], tc: Toolchain, work: Path) -> float:
    """The five tool runs f4pipe makes per object, one after another in one shell script."""
    lines = ["set -e"]
    for co in objects:
        arch = "gfx950"
        o, r = work / f"{co.stem}.o", work / f"{co.stem}.co"
        objdump, readelf = tc.tool("llvm-objdump"), tc.tool("llvm-readelf")
        lines += [
            f"{objdump} -d --mcpu={arch} -j .text -j .rodata {co} > /dev/null",
            f"{readelf} --notes {co} > /dev/null",
            # assemble the f4pipe-made .s (the shell cannot make one) and link
            f"{tc.tool('llvm-mc')} -triple=amdgcn-amd-amdhsa -mcpu={arch} -filetype=obj "
            f"{work / 'f4' / (co.stem + '.s')} -o {o}",
            f"{tc.tool('ld.lld')} -shared --no-undefined {o} -o {r}",
            f"{objdump} -d --mcpu={arch} -j .text {r} > /dev/null",
        ]
    t = time.perf_counter()
    subprocess.run(["sh", "-c", "\n".join(lines)], check=True)
    return time.perf_counter() - t


def _one(args: tuple[Path, Path, Toolchain]) -> bool:
    co, out, tc = args
    return roundtrip(co, out, tc).equivalence.equivalent


def main() -> int:
    tc = find_toolchain()
    f4gemm = fetch_aiter(PypiSource(), cache_root() / "test-resources").f4gemm_dir
    manifest = read_manifest(f4gemm)
    objects = [manifest.co_path(e) for e in manifest]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t = time.perf_counter()
        ok = [_one((co, work / "f4", tc)) for co in objects]
        serial = time.perf_counter() - t
        assert all(ok), "a round trip was not equivalent"
        floor = shell_floor(objects, tc, work)
        t = time.perf_counter()
        with ProcessPoolExecutor(2) as pool:
            ok2 = list(pool.map(_one, [(co, work / "f4p", tc) for co in objects]))
        parallel = time.perf_counter() - t
        assert all(ok2)
    print(f"round trip + checks, 35 objects, f4pipe serial:     {serial:7.2f} s")
    print(f"same LLVM invocations, plain shell loop (floor):    {floor:7.2f} s")
    print(f"ratio f4pipe / floor:                               {serial / floor:7.2f}x")
    print(
        f"f4pipe on 2 processes:                              {parallel:7.2f} s "
        f"(speed-up {serial / parallel:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
