"""The command line loads only what a command runs: `f4pipe --help` lists every command
without importing numpy, pandas or pyarrow (issue 14: start-up cost on every pipeline job),
and the command table that makes this possible agrees with what the modules register."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from f4pipe.cli import COMMANDS, build_parser

HEAVY = ("numpy", "pandas", "pyarrow", "matplotlib")


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


def test_the_full_parser_does_import_them() -> None:
    """The probe can fail: building every command's parser loads the heavy modules."""
    assert "pyarrow" in imported_by("from f4pipe.cli import build_parser\nbuild_parser()")


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
