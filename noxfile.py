"""nox sessions: `nox -s verify` is the test suite CI runs; `nox -l` lists the rest."""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["verify", "lint"]

PYTEST_FLAGS = ("--strict-markers", "--strict-config", "--durations=10")
#: The hip-python releases f4pipe supports, one per ROCm series (pyproject's [tool.f4pipe]).
HIP_PYTHON_RELEASES = nox.project.load_toml("pyproject.toml")["tool"]["f4pipe"][
    "hip-python-releases"
]
#: The tests that drive the hip-python launcher (on f4pipe's HIP shim where there is no GPU).
HIP_TESTS = ("tests/test_hipshim.py", "tests/test_hipdevice.py")
HERE = Path(__file__).resolve().parent


def runs_in_project_venv() -> bool:
    """Whether nox runs from a venv holding this checkout's f4pipe as the README installs it
    (`python -m pip install -e .`, which brings nox). `verify` then tests in that venv, adding
    the test and lint extras to it, instead of building .nox/verify: a second copy of the same
    0.8 GB of dependencies. Where nox was installed alone (CI's `.ci/run`), it builds its own."""
    if sys.prefix == sys.base_prefix:
        return False
    site = [sysconfig.get_paths()["purelib"]]  # not the working directory's f4pipe.egg-info
    found = list(metadata.distributions(name="f4pipe", path=site))
    if not found:
        return False
    direct = json.loads(found[0].read_text("direct_url.json") or "{}")
    editable = direct.get("dir_info", {}).get("editable", False)
    return editable and direct.get("url") == HERE.as_uri()


IN_PROJECT_VENV = runs_in_project_venv()


def install(
    session: nox.Session, *extras: str, also: tuple[str, ...] = (), research: bool = False
) -> None:
    """The project itself (editable) with the optional dependency groups from pyproject.toml,
    plus `also` (requirements resolved in the same pip run) and, with `research`, the research
    tools (research/: LLVM's check on the timing rules, the cycle model's evaluation)."""
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec, *(("-e", "./research") if research else ()), *also)


@nox.session(venv_backend="none" if IN_PROJECT_VENV else None)
def verify(session: nox.Session) -> None:
    """The full test suite: code objects, host side, emulator, pipeline, and lint
    (tests/test_lint.py), on every core (pytest-xdist); provisions LLVM and the aiter wheel
    into ~/.cache/f4pipe on first use. Run from the project's venv, it tests there."""
    if IN_PROJECT_VENV:
        session.log(f"testing in the project's venv {sys.prefix} (test and lint extras added)")
        session.run_install(
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-e",
            ".[test,lint]",
            "-e",
            "./research",
        )
        bin_dir = str(Path(sys.executable).parent)
        session.env["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
        session.run(sys.executable, "-m", "pytest", *PYTEST_FLAGS, "-n", "auto", *session.posargs)
        return
    install(session, "test", "lint", research=True)
    session.run("pytest", *PYTEST_FLAGS, "-n", "auto", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (check + format), snakefmt and snakemake --lint: tests/test_lint.py alone (the
    suite `nox -s verify` runs it too, so CI lints)."""
    install(session, "test", "lint", research=True)
    session.run("pytest", *PYTEST_FLAGS, "tests/test_lint.py", *session.posargs)


@nox.session(default=False)
def fuzz(session: nox.Session) -> None:
    """Cross-check f4pipe's timing rules against LLVM on 400 generated kernels
    (`f4research oracle`; `nox -s verify` runs a fixed 30), then fuzz the readers of untrusted
    input (code objects, co2asm, CSVs, archives, the emulator's loader) with Hypothesis for a
    time budget: `nox -s fuzz -- --minutes 10`. `nox -s verify` runs the same targets
    briefly."""
    install(session, "test", research=True)
    session.run("f4research", "oracle")
    session.run("python", "scripts/fuzz.py", *session.posargs)


@nox.session(default=False)
def oracle(session: nox.Session) -> None:
    """The LLVM cross-check alone: `nox -s oracle -- --kernels 1000 --first 5000`."""
    install(session, "test", research=True)
    session.run("f4research", "oracle", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks: pytest-benchmark files in benchmarks/, the round-trip floor comparison,
    the cost of the emulator's hazard checks, the CPU seconds of the verify, splitk and safety
    stages' own work, the command line's start-up CPU, the cycle model's accuracy on aiter's
    recorded MI355X timings beside Origami's (research/f4research/accuracy.py) and on the later
    timings it was not fitted on (research/f4research/heldback.py), `f4pipe waits
    --verify` over the 35 kernels (benchmarks/waits_shipped.py), prediction at tuned-table
    scale (benchmarks/predict_scale.py: 10,000 shapes x 35 kernels), and the main
    job's CPU from cold and its wall time after a byte-identical aiter update
    (benchmarks/main_job.py, about 4 minutes)."""
    install(session, "test", research=True)
    session.run(
        "pytest",
        "benchmarks",
        "-o",
        "python_files=bench_*.py",
        "--benchmark-only",
        "--benchmark-columns=min,mean,max,rounds",
        "-p",
        "no:cacheprovider",
        *session.posargs,
    )
    session.run("python", "benchmarks/roundtrip_floor.py")
    session.run("python", "benchmarks/hazard_overhead.py")
    session.run("python", "benchmarks/stage_cpu.py")
    session.run("python", "benchmarks/profile_emu.py")
    session.run("python", "benchmarks/cli_startup.py")
    session.run("f4research", "accuracy")
    session.run("f4research", "heldback")
    session.run("python", "benchmarks/waits_shipped.py")
    session.run("python", "benchmarks/predict_scale.py")
    session.run("python", "benchmarks/main_job.py")


@nox.session(venv_backend="none", default=False)
def newcomer(session: nox.Session) -> None:
    """Every figure the README states, from a fresh clone with an empty HOME: install, the main
    job and an update, `f4pipe try`, `nox -s verify`, disk, and with `-- --ci` CI's `.ci/run`
    (benchmarks/newcomer.py; about 20 minutes on two cores, 30 with --ci)."""
    session.run(sys.executable, "benchmarks/newcomer.py", *session.posargs)


@nox.session(default=False)
def report_screenshot(session: nox.Session) -> None:
    """Render a result set's report in headless Chromium (on PATH, else provisioned) to a PNG:
    `nox -s report_screenshot -- results/<aiter-id>/report/index.html -o shot.png`."""
    install(session)
    session.run("python", "scripts/screenshot_report.py", *session.posargs)


@nox.session(default=False)
def pipeline(session: nox.Session) -> None:
    """The main job, `snakemake --cores 1 all`, inside the nox environment."""
    install(session)
    session.run("snakemake", "--cores", "1", "all", *session.posargs)


@nox.session(default=False)
@nox.parametrize("hip_python", [nox.param(r, id=r) for r in HIP_PYTHON_RELEASES])
def hip(session: nox.Session, hip_python: str) -> None:
    """The hip-python launcher on f4pipe's HIP shim (no GPU needed), once per supported
    hip-python release; one of them: `nox -s "hip(7.0.2.555.40)"`."""
    install(session, "test", also=(f"hip-python=={hip_python}",))
    session.run("pytest", *PYTEST_FLAGS, *HIP_TESTS, *session.posargs)


@nox.session(default=False)
def hardware(session: nox.Session) -> None:
    """Tests that need a gfx950 GPU (MI355X); skipped with a reason where none answers."""
    install(session, "test")
    session.run("pytest", *PYTEST_FLAGS, "-m", "hardware", *session.posargs)
