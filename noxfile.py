"""nox sessions: `nox -s verify` is the test suite CI runs; `nox -l` lists the rest."""

from __future__ import annotations

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["verify", "lint"]

PYTEST_FLAGS = ("--strict-markers", "--strict-config", "--durations=10")


def install(session: nox.Session, *extras: str) -> None:
    """The project itself (editable) with the optional dependency groups from pyproject.toml."""
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)


@nox.session
def verify(session: nox.Session) -> None:
    """The full test suite: spine, host side, emulator, pipeline (provisions LLVM and the
    aiter wheel into ~/.cache/f4pipe on first use)."""
    install(session, "test")
    session.run("pytest", *PYTEST_FLAGS, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (check + format), snakefmt and snakemake --lint."""
    install(session, "lint")
    paths = ("f4pipe", "tests", "benchmarks", "scripts", "noxfile.py")
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)
    session.run("snakefmt", "--check", "Snakefile", "workflow/rules")
    session.run("snakemake", "--lint", "--cores", "1", external=False)


@nox.session(default=False)
def fuzz(session: nox.Session) -> None:
    """Fuzz the readers of untrusted input (code objects, co2asm, CSVs, archives, the
    emulator's loader) with Hypothesis for a time budget: `nox -s fuzz -- --minutes 10`.
    `nox -s verify` runs the same targets briefly."""
    install(session, "test")
    session.run("python", "scripts/fuzz.py", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks: pytest-benchmark files in benchmarks/ plus the round-trip floor comparison."""
    install(session, "test")
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


@nox.session(default=False)
def report_screenshot(session: nox.Session) -> None:
    """Render a result set's report in headless Chromium (apt package `chromium`) to a PNG:
    `nox -s report_screenshot -- results/<aiter-id>/report/index.html -o shot.png`."""
    install(session)
    session.run("python", "scripts/screenshot_report.py", *session.posargs)


@nox.session(default=False)
def pipeline(session: nox.Session) -> None:
    """The main job, `snakemake --cores 1 all`, inside the nox environment."""
    install(session)
    session.run("snakemake", "--cores", "1", "all", *session.posargs)


@nox.session(default=False)
def hardware(session: nox.Session) -> None:
    """Tests that need a gfx950 GPU (MI355X); skipped with a reason where none answers."""
    install(session, "test")
    session.run("pytest", *PYTEST_FLAGS, "-m", "hardware", *session.posargs)
