"""A headless browser to lay the report out in: the machine's Chromium, or Debian's provisioned.

The report is read in browsers, and what overflows or fails to load only shows when one draws
the page (tests/test_browser.py, scripts/screenshot_report.py). A `chromium` on PATH is used as
it is. Where there is none, Debian's `chromium` is provisioned into f4pipe's cache without root
(f4pipe.core.debian): from the machine's own Debian suite, so that the machine's glibc and
loader serve it (Chromium re-executes itself for its zygote and renderers, which the private
loader LLVM's wrappers use would not follow), with exactly the packages a
`--no-install-recommends` install would add to this machine. A wrapper script starts it with
the private root's libraries first on the library path and a fontconfig file that adds the
private root's fonts to the machine's.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from f4pipe.core.cache import cache_root
from f4pipe.core.debian import ProvisionError, Remedy, has_apt, machine_suite, private_apt, unpack
from f4pipe.core.errors import F4PipeError
from f4pipe.core.fsio import atomic_path

#: Names a Chromium goes by on PATH, in the order they are looked for.
ON_PATH = ("chromium", "chromium-browser")
PACKAGE = "chromium"
#: Never unpacked: the C library must be the machine's own, matching its loader.
MACHINE_ONLY = ("libc6", "libc-bin")
INSTALL_HINT = (
    "install a Chromium (Debian/Ubuntu: apt-get install --no-install-recommends chromium) so "
    "that `chromium` is on PATH"
)
BROWSER_REMEDY = Remedy(what="chromium", no_mirror=INSTALL_HINT, failed=INSTALL_HINT)


class BrowserError(F4PipeError):
    """No headless browser was found and none could be provisioned."""


@dataclass(frozen=True)
class Browser:
    """A Chromium that starts, and how it was found (path | provisioned)."""

    path: Path
    version: str  # its --version line, e.g. "Chromium 150.0.7871.100 built on Debian 12.15"
    found_by: str

    def describe(self) -> str:
        return f"{self.version} ({self.found_by}: {self.path})"


def provisioned_dir(suite: str) -> Path:
    return cache_root() / "browser" / f"debian-{suite}-{PACKAGE}"


def find_browser(*, provision: bool = True) -> Browser:
    """The Chromium on PATH, else the one provisioned earlier, else a newly provisioned one."""
    for name in ON_PATH:
        found = shutil.which(name)
        if found:
            return _probe(Path(found), "path")
    suite = machine_suite()
    if suite is not None:
        wrapper = provisioned_dir(suite) / "bin" / PACKAGE
        if wrapper.is_file():
            return _probe(wrapper, "provisioned")
    if not provision:
        raise BrowserError(f"no chromium on PATH; {INSTALL_HINT}")
    return _probe(provision_debian_chromium(), "provisioned")


def _probe(path: Path, found_by: str) -> Browser:
    """A Browser if `path --version` answers, else a BrowserError with what it printed."""
    try:
        proc = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrowserError(f"{path} does not start ({exc}); {INSTALL_HINT}") from exc
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BrowserError(
            f"{path} --version failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}"
        )
    return Browser(path=path, version=proc.stdout.strip(), found_by=found_by)


def provision_debian_chromium() -> Path:
    """Unpack Debian's chromium for this machine's suite into the cache; return its wrapper."""
    suite = machine_suite()
    if suite is None or not has_apt():
        raise BrowserError(
            "no chromium on PATH, and this machine is not a Debian with apt-get and dpkg to "
            f"provision one from; {INSTALL_HINT}"
        )
    dest = provisioned_dir(suite)
    print(f"f4pipe: provisioning chromium from Debian {suite} into {dest}", flush=True)
    try:
        with private_apt(suite, BROWSER_REMEDY) as apt:
            wanted = [p for p in apt.to_install([PACKAGE]) if p.split("=")[0] not in MACHINE_ONLY]
            unpack(apt, apt.download(wanted), dest, _write_launcher)
    except ProvisionError as exc:
        raise BrowserError(str(exc)) from None
    return dest / "bin" / PACKAGE


def _write_launcher(out: Path, final_root: Path) -> None:
    """bin/chromium and fonts.conf in `out`, naming `final_root`, where the root lands."""
    exe = out / "root" / "usr" / "lib" / PACKAGE / PACKAGE
    if not exe.is_file():
        raise BrowserError(f"the provisioned packages lack {exe.relative_to(out)}")
    final = final_root.parent
    libs = ":".join(str(final_root / d) for d in _library_dirs(out / "root"))
    fonts = (
        '<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>\n'
        '  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>\n'
        "  <dir>/usr/share/fonts</dir>\n"
        f"  <dir>{final_root / 'usr' / 'share' / 'fonts'}</dir>\n"
        f"  <cachedir>{final / 'fontconfig-cache'}</cachedir>\n"
        "</fontconfig>\n"
    )
    with atomic_path(out / "fonts.conf") as tmp:
        tmp.write_text(fonts)
    script = (
        "#!/bin/sh\n"
        "# f4pipe: Debian's chromium unpacked without root; the machine's glibc, private libs\n"
        f'LD_LIBRARY_PATH="{libs}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"\n'
        f'FONTCONFIG_FILE="{final / "fonts.conf"}"\n'
        "export LD_LIBRARY_PATH FONTCONFIG_FILE\n"
        f'exec "{final_root / "usr" / "lib" / PACKAGE / PACKAGE}" "$@"\n'
    )
    (out / "bin").mkdir()
    with atomic_path(out / "bin" / PACKAGE) as tmp:
        tmp.write_text(script)
        tmp.chmod(0o755)


def _library_dirs(root: Path) -> list[str]:
    """Every directory under `root` that holds a shared library, relative to `root`: the
    multiarch directories first, then the private ones packages reach by an absolute RUNPATH
    (libpulse's pulseaudio/), which the unpacked root cannot honour."""
    first = ["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"]
    found = {
        lib.parent.relative_to(root).as_posix()
        for top in ("usr/lib", "lib")
        for lib in (root / top).rglob("lib*.so*")
        if lib.is_file()
    }
    return [d for d in first if d in found] + sorted(found - set(first))
