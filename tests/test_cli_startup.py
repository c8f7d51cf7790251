"""The command line loads only what a command runs: `f4pipe --help` and every command's
argument parsing (`f4pipe CMD --help`) import no numpy, pandas, pyarrow or matplotlib (a
start-up cost on every pipeline job; the CPU figures are in benchmarks/cli_startup.py), and the
command table that makes this possible agrees with what the modules register."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from f4pipe.cli import COMMANDS, build_parser

HEAVY = ("numpy", "pandas", "pyarrow", "matplotlib")
REPO = Path(__file__).resolve().parents[1]


def imported_by(code: str) -> set[str]:
    probe = (
        f"import sys\n{code}\nprint('loaded:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1]
    return {m for m in line.removeprefix("loaded:").split(",") if m}


def test_top_level_help_imports_no_heavy_module() -> None:
    code = (
        "import contextlib, io\nfrom f4pipe.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])"
    )
    assert imported_by(code) == set()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_command_s_help_imports_no_heavy_module(command: str) -> None:
    """Parsing a command's arguments (what every pipeline job pays before it works) stays
    light; the command's own function imports what it runs."""
    code = (
        "import contextlib, io\nfrom f4pipe.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    main([{command!r}, '--help'])"
    )
    assert imported_by(code) == set()


def test_running_a_command_does_import_them(tmp_path) -> None:
    """The probe can fail: a command that reads a table loads pyarrow when it runs."""
    code = (
        "import contextlib, io\nfrom f4pipe.cli import main\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        f"    main(['gather', 'kernels', '-o', {str(tmp_path / 'k.parquet')!r}])"
    )
    assert "pyarrow" in imported_by(code)


def test_the_full_parser_imports_none_either() -> None:
    """Every command's module keeps its heavy imports inside the functions that run."""
    assert imported_by("from f4pipe.cli import build_parser\nbuild_parser()") == set()


def test_command_table_matches_what_each_module_registers() -> None:
    for module in dict.fromkeys(m for m, _ in COMMANDS.values()):
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(f"f4pipe.cli.{module}").register(sub)
        assert set(sub.choices) == {n for n, (m, _) in COMMANDS.items() if m == module}


def test_a_run_builds_its_own_command_fully_and_lists_the_rest() -> None:
    parser = build_parser(only="co2asm")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "--output" in sub.choices["co2asm"].format_help()
    assert set(sub.choices) == set(COMMANDS)


def test_the_workflow_s_imports_load_no_emulator() -> None:
    """Every Snakemake parse (and every job on a cluster) imports what common.smk imports: the
    emulator's engine and its MFMA tables (and ml_dtypes, which only fp4 encoding needs) stay
    out; `f4pipe.emu`'s names load on first use."""
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    modules = re.findall(r"^from (f4pipe[\w.]*) import", common, flags=re.M)
    assert "f4pipe.edits.spec" in modules  # a package that also holds the emulator's users
    probe = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print(','.join(m for m in ('ml_dtypes', 'f4pipe.emu.engine') if m in sys.modules))\n"
        + "from f4pipe.emu import EmulatorDevice\n"
        + "print('f4pipe.emu.engine' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    parse_time, on_use = out.stdout.splitlines()
    assert parse_time == ""
    assert on_use == "True"  # the probe can fail: the device's names do load what they need


def test_the_lazy_emulator_answers_its_identity_without_loading_the_engine() -> None:
    """A bench job on the emulator only predicts: it reads the device's identity and `info`
    (none), and must not pay for the engine (a stage answered from the store neither)."""
    probe = (
        "import sys\nfrom f4pipe.devices.opendevice import open_device\n"
        "d = open_device('emulator', lazy=True)\n"
        "print(d.device_id, d.can_time, getattr(d, 'info', 'missing'), d.num_cu)\n"
        "print('f4pipe.emu.engine' in sys.modules)\n"
        "d.launch\nprint('f4pipe.emu.engine' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    identity, before, after = out.stdout.splitlines()
    assert identity.split()[1:3] == ["False", "None"]
    assert (before, after) == ("False", "True")  # a launch-side call does build it


def test_the_command_line_runs_blas_on_one_thread_unless_told_otherwise() -> None:
    """Loading the command line sets OPENBLAS_NUM_THREADS before numpy loads (spinning BLAS
    threads cost CPU on two cores), and never overrides a value the user set."""
    probe = "import os, f4pipe.cli, sys\nprint(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    probe += "print('numpy' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["1", "False"], out.stderr
    env["OPENBLAS_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["2", "False"], out.stderr
