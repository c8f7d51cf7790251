"""Subprocesses of a fetch (pip, git): the one place their failures become f4pipe errors."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from f4pipe.core.errors import FetchError

SUBPROCESS_TIMEOUT_S = 900  # a 40 MB wheel over a slow link; git fetch of one commit


# ---------------------------------------------------------------------------------------------
# Subprocesses: the one place their failures become f4pipe errors


def run_fetch_tool(
    cmd: list[str],
    *,
    action: str,
    hints: Mapping[str, str] | None = None,
    default_hint: str,
    cwd: Path | None = None,
    log: Path | None = None,
) -> str:
    """Run `cmd`; on failure raise FetchError naming `action`, with the first matching hint.

    `hints` maps a substring of the tool's output (stderr, or `log` when given: pip writes its
    connection errors only to its debug log) to what the user should do.
    """
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S
        )
    except FileNotFoundError as exc:
        raise FetchError(f"{action}: {cmd[0]} is not installed; install it and retry") from exc
    except subprocess.TimeoutExpired as exc:
        raise FetchError(
            f"{action}: timed out after {SUBPROCESS_TIMEOUT_S}s; check the network and retry"
        ) from exc
    if proc.returncode == 0:
        return proc.stdout
    output = proc.stderr + proc.stdout
    if log is not None and log.is_file():
        output += log.read_text(errors="replace")
    hint = next((h for key, h in (hints or {}).items() if key in output), default_hint)
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith(("error", "fatal"))] or lines
    detail = " | ".join(errors[-3:]) or f"exit {proc.returncode}"
    raise FetchError(f"{action} failed: {hint} ({detail})") from subprocess.CalledProcessError(
        proc.returncode, cmd, proc.stdout, proc.stderr
    )
