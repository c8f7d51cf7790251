"""Unpack packages from Debian's registry into f4pipe's cache, without root.

What f4pipe needs and a machine may lack (an LLVM that knows gfx950, a headless browser for the
report's layout test) is taken from Debian's package registry, the one registry besides PyPI a
user's machine can be assumed to reach. apt runs on a private state directory (its own
sources.list, package lists and download cache, no lock), so no root and no change to the
machine's apt; `dpkg -x` unpacks the packages into a private root, and the finished directory is
moved into place whole with a provenance.json naming the suite, the packages and the mirror.
This is the only apt code in f4pipe; each provisioned tool (f4pipe.codeobj.toolchain,
f4pipe.report.browser) says which packages, how many of their dependencies, and how to start
the result.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from f4pipe.core.errors import F4PipeError
from f4pipe.core.fsio import atomic_dir, write_json

APT_TIMEOUT_S = 600
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
OS_RELEASE = Path("/etc/os-release")


class ProvisionError(F4PipeError):
    """Debian's packages could not be found, downloaded or unpacked; the message says what to
    install instead. Callers re-raise it as their own error type."""


@dataclass(frozen=True)
class Remedy:
    """What is being provisioned, and what the user can do instead, for the error messages."""

    what: str  # "LLVM", "chromium"
    no_mirror: str  # the end of the message when /etc/apt names no Debian archive
    failed: str  # the end of the message when apt or dpkg fails


def has_apt() -> bool:
    """Whether this machine can provision at all (apt-get and dpkg on PATH)."""
    return shutil.which("apt-get") is not None and shutil.which("dpkg") is not None


def debian_mirror(remedy: Remedy) -> str:
    """The Debian archive URI this machine's apt already uses (deb822 or one-line format).

    Reusing the configured mirror keeps provisioning on whatever mirror or proxy the machine
    is set up for.
    """
    if os.environ.get("F4PIPE_DEBIAN_MIRROR"):
        return os.environ["F4PIPE_DEBIAN_MIRROR"]
    files = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for f in files:
        for stanza in f.read_text(errors="replace").split("\n\n"):
            fields = dict(
                line.split(":", 1)
                for line in stanza.splitlines()
                if ":" in line and not line.startswith("#")
            )
            uris = fields.get("URIs", "").split()
            suites = fields.get("Suites", "")
            if uris and "security" not in suites and "main" in fields.get("Components", ""):
                return uris[0]
    legacy = [
        Path("/etc/apt/sources.list"),
        *sorted(Path("/etc/apt/sources.list.d").glob("*.list")),
    ]
    for f in legacy:
        if not f.is_file():
            continue
        for line in f.read_text(errors="replace").splitlines():
            parts = line.split()
            if parts[:1] == ["deb"] and "security" not in line:
                uri = next((p for p in parts[1:] if "://" in p), None)
                if uri:
                    return uri
    raise ProvisionError(
        f"cannot find a Debian archive in /etc/apt to provision {remedy.what} from; set "
        f"F4PIPE_DEBIAN_MIRROR or {remedy.no_mirror}"
    )


def machine_suite() -> str | None:
    """This machine's Debian suite (VERSION_CODENAME in /etc/os-release, e.g. "bookworm"), or
    None where the machine is not Debian: what runs against the machine's own glibc must come
    from the suite the machine runs."""
    try:
        text = OS_RELEASE.read_text(errors="replace")
    except OSError:
        return None
    fields = dict(
        (key, value.strip().strip('"'))
        for key, _, value in (line.partition("=") for line in text.splitlines())
    )
    if fields.get("ID") != "debian":
        return None
    return fields.get("VERSION_CODENAME") or None


def _apt_options(state: Path) -> list[str]:
    return [
        f"-o=Dir::Etc::SourceList={state / 'sources.list'}",
        "-o=Dir::Etc::SourceParts=/dev/null",
        f"-o=Dir::State::Lists={state / 'lists'}",
        f"-o=Dir::Cache={state / 'cache'}",
        "-o=Debug::NoLocking=1",
        # As root, apt drops privileges to _apt, which cannot write our private cache.
        *(["-o=APT::Sandbox::User=root"] if os.geteuid() == 0 else []),
        "-qq",
    ]


@dataclass(frozen=True)
class PrivateApt:
    """apt on a private state directory with one suite's package lists, already updated."""

    state: Path
    mirror: str
    suite: str
    remedy: Remedy

    def run(self, args: Sequence[str], cwd: Path | None = None) -> str:
        return _run([args[0], *_apt_options(self.state), *args[1:]], cwd or self.state, self.remedy)

    def to_install(self, packages: Iterable[str]) -> list[str]:
        """`name=version` of every package a `--no-install-recommends` install of `packages`
        would bring onto this machine: apt's own resolver, reading the machine's dpkg status,
        so what is installed already is left out (its libraries are the machine's)."""
        sim = self.run(["apt-get", "--simulate", "--no-install-recommends", "install", *packages])
        return simulated_installs(sim)

    def download(self, packages: Iterable[str]) -> list[Path]:
        """Download `packages` (names, or name=version) as .deb files; return them sorted."""
        debs = self.state / "debs"
        debs.mkdir(exist_ok=True)
        self.run(["apt-get", "download", *packages], debs)
        return sorted(debs.glob("*.deb"))


_INST_RE = re.compile(r"^Inst (?P<name>\S+) (?:\[[^]]*\] )?\((?P<version>\S+)", re.M)


def simulated_installs(text: str) -> list[str]:
    """`name=version` of each `Inst` line of `apt-get --simulate install` (new packages and
    upgrades, whose line names the installed version in brackets first)."""
    return [f"{m['name']}={m['version']}" for m in _INST_RE.finditer(text)]


@contextmanager
def private_apt(suite: str, remedy: Remedy) -> Iterator[PrivateApt]:
    """A PrivateApt for `suite`'s main component on the machine's own mirror, for one block."""
    mirror = debian_mirror(remedy)
    with tempfile.TemporaryDirectory(prefix="f4pipe-apt-") as tmp:
        state = Path(tmp)
        (state / "lists" / "partial").mkdir(parents=True)
        (state / "cache" / "archives" / "partial").mkdir(parents=True)
        signed = f"[signed-by={KEYRING}] " if Path(KEYRING).is_file() else ""
        (state / "sources.list").write_text(f"deb {signed}{mirror} {suite} main\n")
        apt = PrivateApt(state=state, mirror=mirror, suite=suite, remedy=remedy)
        apt.run(["apt-get", "update"])
        yield apt


def unpack(
    apt: PrivateApt,
    debs: Sequence[Path],
    dest: Path,
    finish: Callable[[Path, Path], None],
) -> None:
    """Unpack `debs` into `dest`/root and record their provenance, atomically: `finish(out,
    final_root)` adds what starts the tools (it writes into `out`, the directory being built,
    paths that name `final_root`, where the root will be once the directory is in place)."""
    with atomic_dir(dest) as out:
        root = out / "root"
        root.mkdir()
        for deb in debs:
            _run(["dpkg", "-x", str(deb), str(root)], apt.state, apt.remedy)
        finish(out, dest / "root")
        write_json(
            out / "provenance.json",
            {"suite": apt.suite, "packages": [p.name for p in debs], "mirror": apt.mirror},
        )


def _run(cmd: list[str], cwd: Path, remedy: Remedy) -> str:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=APT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProvisionError(f"provisioning {remedy.what} failed running {cmd[0]}: {exc}") from exc
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()[-2000:]
        raise ProvisionError(
            f"provisioning {remedy.what} failed: `{' '.join(cmd[:2])} ...` exited "
            f"{proc.returncode}: {err}; {remedy.failed}"
        )
    return proc.stdout.decode(errors="replace")
