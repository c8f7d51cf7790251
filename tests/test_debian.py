"""Provisioning from Debian's registry without root: what is read from the machine and from apt.

The provisioning itself runs for real in tests/test_toolchain.py (LLVM, into a fresh cache) and
tests/test_browser.py (Chromium, where none is on PATH).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from f4pipe.core import debian
from f4pipe.core.debian import machine_suite, simulated_installs
from f4pipe.report import browser
from f4pipe.report.browser import BrowserError, find_browser

#: `apt-get --simulate install` as apt 2.6 prints it: new packages, an upgrade (the installed
#: version in brackets first), a package with a broken-by note, and the Conf lines that follow.
SIMULATED = """\
NOTE: This is only a simulation!
Inst libdouble-conversion3 (3.2.1-1 Debian:12.15/oldstable [amd64])
Inst libgcc-s1 [12.2.0-14] (12.2.0-14+deb12u1 Debian:12.15/oldstable [amd64])
Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64]) []
Inst chromium (150.0.7871.100-1~deb12u1 Debian:12.15/oldstable [amd64])
Conf libdouble-conversion3 (3.2.1-1 Debian:12.15/oldstable [amd64])
Conf chromium (150.0.7871.100-1~deb12u1 Debian:12.15/oldstable [amd64])
"""


def test_simulated_installs_are_exact_versions() -> None:
    assert simulated_installs(SIMULATED) == [
        "libdouble-conversion3=3.2.1-1",
        "libgcc-s1=12.2.0-14+deb12u1",
        "libc6=2.36-9+deb12u14",
        "chromium=150.0.7871.100-1~deb12u1",
    ]


@pytest.mark.parametrize(
    ("text", "suite"),
    [
        (
            'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_CODENAME=bookworm\n',
            "bookworm",
        ),
        ('ID=debian\nVERSION_CODENAME="trixie"\n', "trixie"),
        ("ID=debian\n", None),  # sid names no codename: nothing to match the machine's glibc
        ("ID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=noble\n", None),
    ],
)
def test_machine_suite_is_debians_own(tmp_path: Path, monkeypatch, text: str, suite) -> None:
    (tmp_path / "os-release").write_text(text)
    monkeypatch.setattr(debian, "OS_RELEASE", tmp_path / "os-release")
    assert machine_suite() == suite


def test_no_browser_and_no_apt_says_what_to_install(tmp_path: Path, monkeypatch) -> None:
    """A machine with neither a chromium nor apt-get/dpkg on PATH: one message naming the
    package, never a skip."""
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory
    monkeypatch.setenv("F4PIPE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(BrowserError, match=r"apt-get install --no-install-recommends chromium"):
        find_browser()


def test_a_provisioned_browser_is_found_again_without_apt(tmp_path: Path, monkeypatch) -> None:
    """What was provisioned once is used from the cache: a second run needs no apt, no network."""
    monkeypatch.setattr(browser, "machine_suite", lambda: "trixie")
    monkeypatch.setenv("F4PIPE_CACHE", str(tmp_path / "cache"))
    wrapper = browser.provisioned_dir("trixie") / "bin" / "chromium"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text("#!/bin/sh\necho 'Chromium 1.2.3 built on Debian'\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    found = find_browser(provision=False)
    assert (found.path, found.version, found.found_by) == (
        wrapper,
        "Chromium 1.2.3 built on Debian",
        "provisioned",
    )


def test_library_dirs_put_multiarch_first(tmp_path: Path) -> None:
    """Libraries a package reaches by an absolute RUNPATH (libpulse's pulseaudio/) are on the
    wrapper's library path too, after the multiarch directories."""
    for lib in (
        "usr/lib/x86_64-linux-gnu/pulseaudio/libpulsecommon-16.1.so",
        "usr/lib/x86_64-linux-gnu/libpulse.so.0",
        "usr/lib/chromium/libEGL.so",
        "usr/lib/chromium/chromium",
        "usr/share/doc/libfoo.so.txt",
    ):
        (tmp_path / lib).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / lib).write_text("")
    assert browser._library_dirs(tmp_path) == [
        "usr/lib/x86_64-linux-gnu",
        "usr/lib/chromium",
        "usr/lib/x86_64-linux-gnu/pulseaudio",
    ]
