"""What a failed pipeline run says on the console: each failed job's own one-line error.

Every rule runs one f4pipe command whose output goes to its log, and a command that meets bad
input or environment says so in one line (`f4pipe fetch: error: ...`, exit 2). Snakemake reports
a failed job by its shell line and the log's path; the Snakefile's `onerror` hands Snakemake's
run log to `failed_job_errors`, which finds each failed job's log and its f4pipe error lines,
so that the console ends with what went wrong and what to do, and the run exits 2 (bad input or
environment) as the command did, or 1 when a job failed without saying why (its log says more).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: Snakemake's run log names each failed job's rule and log file.
FAILED_RULE = re.compile(r"^Error in rule (\S+):$")
LOG_LINE = re.compile(r"^\s+log: (.+?)(?: \(check log file\(s\) for error details\))?$")
F4PIPE_ERROR = re.compile(r"^f4pipe [\w-]+: (error|internal error): .*")
EXIT_BAD_INPUT, EXIT_JOB_FAILED = 2, 1


def failed_job_errors(run_log: Path) -> list[tuple[str, str]]:
    """(rule, f4pipe's error line) for each failed job whose log has one, in run order."""
    found: list[tuple[str, str]] = []
    rule = None
    for line in run_log.read_text(errors="replace").splitlines():
        if m := FAILED_RULE.match(line):
            rule = m[1]
        elif rule and (m := LOG_LINE.match(line)):
            for log in m[1].split(", "):
                found += [(rule, e) for e in error_lines(Path(log))]
            rule = None
    return found


def error_lines(log: Path) -> list[str]:
    if not log.is_file():
        return []
    lines = log.read_text(errors="replace").splitlines()
    return [line for line in lines if F4PIPE_ERROR.match(line)]


def report(run_logs: str | list[str] | None) -> int:
    """Print the failed jobs' errors; the exit code the run should end with. `run_logs`:
    what Snakemake hands `onerror` (its run log, one path or a list)."""
    logs = [run_logs] if isinstance(run_logs, str) else list(run_logs or [])
    errors = [e for log in logs if Path(log).is_file() for e in failed_job_errors(Path(log))]
    for rule, line in errors:
        print(f"f4pipe: job {rule} failed: {line}", file=sys.stderr)
    bad_input = any(": error: " in line for _, line in errors)
    return EXIT_BAD_INPUT if bad_input else EXIT_JOB_FAILED
