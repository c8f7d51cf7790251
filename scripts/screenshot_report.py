#!/usr/bin/env python3
"""Render an f4pipe report page in a real browser (headless Chromium) and save a PNG.

Why: the report is read by people in browsers; a table that overflows or a plot that does not
load only shows up when a browser draws the page. Chromium runs isolated (throwaway profile, no
network services, no sync) so the screenshot depends on the page alone.

    python scripts/screenshot_report.py results/<aiter_id>/report/index.html -o shot.png

Uses the `chromium` on PATH or, where there is none, Debian's provisioned into f4pipe's cache
without root (f4pipe.report.browser); --browser picks another binary.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from f4pipe.core.errors import F4PipeError
from f4pipe.report.browser import find_browser

TIMEOUT_S = 120


def pick_browser(explicit: str | None) -> str:
    """The binary --browser names (found on PATH), else the one f4pipe finds or provisions."""
    if explicit is None:
        try:
            return str(find_browser().path)
        except F4PipeError as exc:
            raise SystemExit(str(exc)) from None
    path = shutil.which(explicit)
    if path is None:
        raise SystemExit(f"no browser {explicit!r} on PATH")
    return path


def screenshot(page: Path, out: Path, browser: str, width: int, height: int) -> Path:
    """Run headless Chromium once on `page`; returns `out`, which must then exist."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="f4pipe-chromium-") as profile:
        cmd = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--screenshot={out}",
            f"--window-size={width},{height}",
            page.resolve().as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        raise SystemExit(
            f"{Path(browser).name} failed (exit {proc.returncode}), no screenshot at {out}:\n"
            f"{proc.stderr[-2000:]}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="report index.html (or any HTML file)")
    parser.add_argument("-o", "--output", type=Path, help="PNG to write (default: beside page)")
    parser.add_argument("--browser", help="browser binary (default: chromium, or provisioned)")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=3000)
    args = parser.parse_args(argv)
    if not args.page.is_file():
        raise SystemExit(f"{args.page}: no such page; build it with `f4pipe report RESULT_DIR`")
    out = args.output or args.page.with_name("screenshot.png")
    shot = screenshot(args.page, out, pick_browser(args.browser), args.width, args.height)
    print(f"wrote {shot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
