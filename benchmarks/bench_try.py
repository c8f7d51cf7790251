"""`f4pipe try` on one tile (`nox -s bench`): the whole edit loop for the smallest kernel,
an s_nop inserted, on the emulator. Target: <= 5 s per try on a 2-core machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from f4pipe.codeobj.co2asm import co2asm
from f4pipe.codeobj.toolchain import Toolchain, find_toolchain
from f4pipe.core.cache import cache_root
from f4pipe.edits.trykernel import try_edit
from f4pipe.fetch import PypiSource, fetch_aiter

KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
TARGET_SECONDS = 5.0


@pytest.fixture(scope="module")
def toolchain() -> Toolchain:
    return find_toolchain()


@pytest.fixture(scope="module")
def f4gemm_dir() -> Path:
    """The pinned wheel's f4gemm directory, from the cache the tests fill."""
    return fetch_aiter(PypiSource(), cache_root() / "test-resources").f4gemm_dir


@pytest.fixture(scope="module")
def nop_edit(tmp_path_factory, toolchain, f4gemm_dir) -> Path:
    asm = co2asm(f4gemm_dir / f"{KERNEL}.co", toolchain)
    path = tmp_path_factory.mktemp("try") / "nop.s"
    path.write_text(asm.replace("label_0064:\n", "label_0064:\n\ts_nop 0\n", 1))
    return path


def test_try_one_tile(benchmark, nop_edit, toolchain, f4gemm_dir):
    result = benchmark.pedantic(
        try_edit,
        args=(nop_edit, f4gemm_dir, toolchain),
        kwargs={"device": "emulator"},
        rounds=5,
        iterations=1,
    )
    assert result.passed, result.verdict_line()
    assert benchmark.stats.stats.max <= TARGET_SECONDS
