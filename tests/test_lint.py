"""Lint is part of the test suite, so CI's one command (`nox -s verify`, .ci/run) runs it:
ruff (check and format) on the Python, snakefmt and `snakemake --lint` on the workflow, the
package layers (`lint-imports`, pyproject's [tool.importlinter]) and unused code in the package
(`vulture`, pyproject's [tool.vulture]).
`nox -s lint` runs just this file. Each check is the tool itself; a finding fails with the
tool's own output."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON_PATHS = ("f4pipe", "research", "tests", "benchmarks", "scripts", "noxfile.py")
CHECKS = {
    "ruff check": ["ruff", "check", *PYTHON_PATHS],
    "ruff format": ["ruff", "format", "--check", *PYTHON_PATHS],
    "snakefmt": ["snakefmt", "--check", "Snakefile", "workflow/rules"],
    "snakemake --lint": [sys.executable, "-m", "snakemake", "--lint", "--cores", "1"],
    "lint-imports": ["lint-imports"],
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_lint(name: str) -> None:
    cmd = CHECKS[name]
    tool = shutil.which(cmd[0], path=str(Path(sys.executable).parent)) or shutil.which(cmd[0])
    assert tool is not None, f"{cmd[0]} is not installed: pip install -e '.[lint]'"
    out = subprocess.run([tool, *cmd[1:]], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(cmd)}:\n{out.stdout}\n{out.stderr}"


def test_no_unused_code_in_the_package() -> None:
    """vulture reads the tests, scripts and benchmarks too (a name they use is used), but
    reports only the package: pytest fixtures and benchmark scaffolding are not its business."""
    tool = shutil.which("vulture", path=str(Path(sys.executable).parent)) or shutil.which("vulture")
    assert tool is not None, "vulture is not installed: pip install -e '.[lint]'"
    out = subprocess.run([tool], cwd=ROOT, capture_output=True, text=True)
    unused = [line for line in out.stdout.splitlines() if line.startswith("f4pipe/")]
    assert out.returncode in (0, 3), out.stderr  # 3: vulture found something
    assert unused == [], "\n".join(unused)
