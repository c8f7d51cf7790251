"""Session fixtures: the real aiter code objects and a real LLVM toolchain that knows gfx950.

Both come from the same places the pipeline uses (PyPI's amd-aiter wheel, a found or
provisioned LLVM) and are cached under f4pipe's cache (~/.cache/f4pipe, or $F4PIPE_CACHE), so
only the first test run of a machine downloads anything.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from f4pipe.codeobj.toolchain import Toolchain, find_toolchain
from f4pipe.core.cache import cache_root
from f4pipe.fetch import PypiSource, extract_wheel_tree, fetch_aiter

DEFAULT_SOURCE = PypiSource()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under pytest-xdist (`nox -s verify` runs `-n auto`), provision the shared caches once in
    the controller, before any worker starts: two workers filling ~/.cache/f4pipe at once would
    each replace the other's half-used toolchain or wheel tree."""
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    find_toolchain()
    fetch_aiter(DEFAULT_SOURCE, cache_root() / "test-resources")
    extract_wheel_tree(DEFAULT_SOURCE, cache_root() / "test-resources" / "hsa-tree")


def pytest_terminal_summary(terminalreporter) -> None:
    """Name the browser the layout test laid the report out in (tests/test_browser.py records
    it as a property, which reaches the controller from an xdist worker too)."""
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == "browser" and getattr(report, "when", "") == "call":
                    terminalreporter.write_line(f"{report.nodeid}: browser {value}")


@pytest.fixture(scope="session")
def toolchain() -> Toolchain:
    return find_toolchain()


@pytest.fixture(scope="session")
def f4gemm_dir() -> Path:
    """The 35 f4gemm code objects and their manifest, from the pinned amd-aiter wheel."""
    return fetch_aiter(DEFAULT_SOURCE, cache_root() / "test-resources").f4gemm_dir


@pytest.fixture(scope="session")
def manifest(f4gemm_dir: Path):
    """The wheel's f4gemm manifest (every .co checked present)."""
    from f4pipe.aiter.manifest import read_manifest

    return read_manifest(f4gemm_dir)


@pytest.fixture(scope="session")
def base_asm(toolchain, f4gemm_dir) -> str:
    """co2asm of the kernel the editing tests change (tests/asm_edits.py)."""
    from asm_edits import EDITED_KERNEL

    from f4pipe.codeobj.co2asm import co2asm

    return co2asm(f4gemm_dir / f"{EDITED_KERNEL}.co", toolchain)


@pytest.fixture
def result_sets(f4gemm_dir, toolchain, tmp_path_factory):
    """Result sets built once per session from real runs (tests/resultsets.py)."""
    from resultsets import get_result_sets

    return get_result_sets(f4gemm_dir, toolchain, tmp_path_factory)


@pytest.fixture(scope="session")
def aiter_hsa_dir() -> Path:
    """aiter's whole hsa/ tree from the same wheel: ~2,500 gfx942/gfx950 code objects."""
    return extract_wheel_tree(DEFAULT_SOURCE, cache_root() / "test-resources" / "hsa-tree")


#: tests/on_shim runs only inside the process tests/test_hipshim.py starts with f4pipe's HIP shim
#: on the loader path (F4PIPE_ON_SHIM=1): loading a HIP runtime here would turn every later
#: `device: auto` in this process into the shim.
collect_ignore = [] if os.environ.get("F4PIPE_ON_SHIM") == "1" else ["on_shim"]
