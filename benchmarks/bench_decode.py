"""The table-driven decoder's speed (`nox -s bench`): every instruction of the 35 f4gemm kernels.

Program caches decoded instructions per code object, so this cost is paid once per kernel (and
by every listing, hazard analysis and the llvm-objdump cross-check). Reference: 0.50 s CPU
for the 67,732 instructions on a 2-core machine (the if-chain decoder it replaced: 0.53 s).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from f4pipe.aiter.manifest import read_manifest
from f4pipe.arch.decode import decode_all
from f4pipe.codeobj.codeobject import CodeObject
from f4pipe.core.cache import cache_root
from f4pipe.fetch import PypiSource, fetch_aiter


@pytest.fixture(scope="module")
def texts() -> list[tuple[bytes, int]]:
    f4gemm_dir: Path = fetch_aiter(PypiSource(), cache_root() / "test-resources").f4gemm_dir
    out = []
    for entry in read_manifest(f4gemm_dir):
        co = CodeObject.read(f4gemm_dir / entry.co_name)
        out.append((co.section_bytes(".text"), co.sections[".text"].addr))
    return out


def test_decode_all_35_kernels(benchmark, texts: list[tuple[bytes, int]]) -> None:
    def run() -> int:
        return sum(len(decode_all(text, addr)) for text, addr in texts)

    count = benchmark.pedantic(run, rounds=5, iterations=1)
    benchmark.extra_info.update(instructions=count)
    assert count == 67_732  # docs/reference/aiter.md
