"""Find, or provision, an LLVM toolchain that knows gfx950, and run its tools.

Search order (first usable wins): an explicit bin directory from the config; ROCm's LLVM
($ROCM_PATH/llvm/bin, /opt/rocm/llvm/bin); LLVM >= 20 on PATH or under /usr/lib/llvm-N/bin; a
copy f4pipe provisioned earlier. If none is usable, f4pipe provisions Debian 13's LLVM from
Debian's package registry into a cache outside the repository: the packages and the runtime
libraries they need (a newer glibc included) are unpacked with `dpkg -x` into a private root and
each tool gets a wrapper script that starts it with that root's loader and library path. That runs
on Debian 12 (glibc 2.36) and Debian 13 alike, and needs no root.

Every candidate must prove that it knows gfx950 (llvm-mc assembles an instruction for it) before
it is used; an older LLVM silently lacks the target, which would otherwise surface as baffling
"invalid instruction" errors much later.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from f4pipe.arch.gfx950 import ARCH
from f4pipe.core.cache import cache_root
from f4pipe.core.debian import ProvisionError, Remedy, has_apt, private_apt, unpack
from f4pipe.core.errors import InputError, ToolchainError
from f4pipe.core.fsio import atomic_path, read_json_file, write_json

TOOLS = ("llvm-objdump", "llvm-readelf", "llvm-objcopy", "llvm-mc", "ld.lld")
#: LLVM's compiler: not needed by the pipeline, only by the cross-check of f4pipe's timing
#: rules against LLVM's (f4research.oracle); looked up beside the other tools when asked for.
LLC = "llc"
MIN_LLVM_MAJOR = 20
PROVISION_LLVM_MAJOR = 22
PROVISION_SUITE = "trixie"
# Packages unpacked into the private root: LLVM's tools and libLLVM, lld, and the runtime
# libraries (glibc included) they link against in Debian 13. Checked by running the tools.
PROVISION_PACKAGES = (
    f"llvm-{PROVISION_LLVM_MAJOR}",
    f"lld-{PROVISION_LLVM_MAJOR}",
    f"libllvm{PROVISION_LLVM_MAJOR}",
    "libc6",
    "libstdc++6",
    "libgcc-s1",
    "libz3-4",
    "libzstd1",
    "libxml2",
    "liblzma5",
    "libedit2",
    "libbsd0",
    "libmd0",
    "libtinfo6",
    "libffi8",
    "zlib1g",
    "libgomp1",
)
TOOL_TIMEOUT_S = 600


@dataclass(frozen=True)
class Toolchain:
    """A set of LLVM tools in one directory, proven to know gfx950."""

    bin_dir: Path
    version: str  # e.g. "22.1.8"
    vendor: str  # the version banner's first words, e.g. "Debian LLVM", "AMD"
    found_by: str  # config | rocm | path | system | provisioned

    @property
    def toolchain_id(self) -> str:
        """Artifact-set key: which LLVM produced the rebuilt objects."""
        tag = "rocm-" if self.found_by == "rocm" else ""
        return f"{tag}llvm-{self.version}"

    def tool(self, name: str) -> Path:
        if name not in TOOLS:
            raise ToolchainError(f"unknown tool {name!r}; f4pipe uses {', '.join(TOOLS)}")
        return self.bin_dir / name

    def run(
        self,
        name: str,
        args: Sequence[str | os.PathLike[str]],
        *,
        input: bytes | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run one tool; a failure becomes a ToolchainError carrying the tool's stderr, unless
        check=False (the caller reads the exit code and stderr itself)."""
        return run_tool(self.tool(name), args, input=input, check=check)

    def as_json(self) -> dict[str, str]:
        d = {k: str(v) for k, v in asdict(self).items()}
        d["toolchain_id"] = self.toolchain_id
        d.update({name: str(self.tool(name)) for name in TOOLS})
        return d


def llc_path(toolchain: Toolchain) -> Path:
    """The `llc` beside `toolchain`'s tools. A toolchain f4pipe provisioned before it wrote an
    llc wrapper gets one now (the package it unpacked ships llc)."""
    path = toolchain.bin_dir / LLC
    if path.exists():
        return path
    if toolchain.found_by == "provisioned":
        root = provisioned_dir() / "root"
        target = root / "usr" / "lib" / f"llvm-{PROVISION_LLVM_MAJOR}" / "bin" / LLC
        if target.exists():
            _write_wrapper(root, toolchain.bin_dir, LLC, target)
            return path
    raise ToolchainError(
        f"no {LLC} in {toolchain.bin_dir}: the LLVM cross-check compiles its kernels with it; "
        "install LLVM's llc beside llvm-mc"
    )


def run_tool(
    exe: Path,
    args: Sequence[str | os.PathLike[str]],
    *,
    input: bytes | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """The one place where LLVM tool failures are translated into f4pipe errors."""
    cmd = [str(exe), *map(str, args)]
    try:
        proc = subprocess.run(cmd, input=input, capture_output=True, timeout=TOOL_TIMEOUT_S)
    except FileNotFoundError as exc:
        raise ToolchainError(f"{exe} not found; re-run `f4pipe toolchain` to find one") from exc
    except subprocess.TimeoutExpired as exc:
        raise ToolchainError(
            f"{exe.name} timed out after {TOOL_TIMEOUT_S}s: {' '.join(cmd)}"
        ) from exc
    if proc.returncode != 0 and check:
        err = proc.stderr.decode(errors="replace").strip()
        lines = err.splitlines()
        shown = "\n".join(lines[:20]) + (
            f"\n... ({len(lines) - 20} more lines)" if len(lines) > 20 else ""
        )
        raise ToolchainError(f"{exe.name} failed (exit {proc.returncode}): {shown}")
    return proc


# ---------------------------------------------------------------------------------------------
# Probing a candidate directory


_VERSION_RE = re.compile(r"^(?P<vendor>.*?)\s*LLVM version (?P<version>\d+\.\d+\.\d+)", re.M)


def _llvm_version(bin_dir: Path) -> tuple[str, str]:
    proc = run_tool(bin_dir / "llvm-mc", ["--version"])
    text = proc.stdout.decode(errors="replace")
    m = _VERSION_RE.search(text)
    if not m:
        raise ToolchainError(f"cannot read the LLVM version from {bin_dir / 'llvm-mc'} --version")
    vendor = m.group("vendor").strip() or "LLVM"
    return vendor, m.group("version")


def knows_gfx950(bin_dir: Path) -> bool:
    """True if this llvm-mc assembles a gfx950-only instruction for gfx950 without complaint."""
    probe = b"v_permlane16_swap_b32 v0, v1\n"
    try:
        proc = subprocess.run(
            [
                str(bin_dir / "llvm-mc"),
                "-triple=amdgcn-amd-amdhsa",
                f"-mcpu={ARCH}",
                "-filetype=null",
            ],
            input=probe,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and b"not a recognized processor" not in proc.stderr


def probe_dir(bin_dir: Path, found_by: str) -> Toolchain | str:
    """A Toolchain if `bin_dir` holds every tool and knows gfx950, else why not (a string)."""
    missing = [t for t in TOOLS if not os.access(bin_dir / t, os.X_OK)]
    if missing:
        return f"{bin_dir}: missing {', '.join(missing)}"
    try:
        vendor, version = _llvm_version(bin_dir)
    except ToolchainError as exc:
        return f"{bin_dir}: {exc}"
    if int(version.split(".")[0]) < MIN_LLVM_MAJOR and found_by != "rocm":
        return f"{bin_dir}: LLVM {version} is older than {MIN_LLVM_MAJOR} (no gfx950)"
    if not knows_gfx950(bin_dir):
        return f"{bin_dir}: LLVM {version} does not know gfx950"
    return Toolchain(bin_dir=bin_dir, version=version, vendor=vendor, found_by=found_by)


#: How a path under f4pipe's cache or the user's home is written where it is recorded for
#: others to read (archives, report headers): the same inputs give the same bytes on any machine.
CACHE_TOKEN = "$F4PIPE_CACHE"


def portable_path(path: str) -> str:
    """`path` with the machine's cache root written $F4PIPE_CACHE and its home ~ (others kept):
    for records read on other machines, never for running the tools."""
    for root, token in ((cache_root(), CACHE_TOKEN), (Path.home(), "~")):
        root_text = str(root).rstrip("/")
        if root_text and (path == root_text or path.startswith(root_text + "/")):
            return token + path[len(root_text) :]
    return path


def portable(value):
    """JSON-like `value` with every string through portable_path."""
    if isinstance(value, str):
        return portable_path(value)
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    return value


def provisioned_dir() -> Path:
    return cache_root() / "toolchain" / f"debian-{PROVISION_SUITE}-llvm-{PROVISION_LLVM_MAJOR}"


def _candidates(config_bin: str | None) -> list[tuple[Path, str]]:
    cands: list[tuple[Path, str]] = []
    if config_bin:
        cands.append((Path(config_bin).expanduser(), "config"))
    for rocm in (os.environ.get("ROCM_PATH"), "/opt/rocm"):
        if rocm:
            cands.append((Path(rocm) / "llvm" / "bin", "rocm"))
    on_path = shutil.which("llvm-mc")
    if on_path:
        cands.append((Path(on_path).resolve().parent, "path"))
    system = sorted(
        Path("/usr/lib").glob("llvm-*/bin"),
        key=lambda p: int(re.sub(r"\D", "", p.parent.name) or 0),
        reverse=True,
    )
    cands.extend((p, "system") for p in system)
    cands.append((provisioned_dir() / "bin", "provisioned"))
    seen: set[Path] = set()
    unique = []
    for path, how in cands:
        if path not in seen:
            seen.add(path)
            unique.append((path, how))
    return unique


def find_toolchain(config_bin: str | None = None, *, provision: bool = True) -> Toolchain:
    """The first usable toolchain in the search order; provision one if none is found.

    An explicit `config_bin` that is unusable is an error (the user asked for it), not a reason
    to fall back silently.
    """
    reasons: list[str] = []
    for path, how in _candidates(config_bin):
        if not path.is_dir():
            if how == "config":
                raise ToolchainError(
                    f"toolchain bin directory {path} (from the config) does not exist"
                )
            continue
        result = probe_dir(path, how)
        if isinstance(result, Toolchain):
            return result
        if how == "config":
            raise ToolchainError(f"configured toolchain unusable: {result}")
        reasons.append(result)
    if not provision:
        raise ToolchainError(_nothing_found_message(reasons))
    provision_debian_llvm()
    result = probe_dir(provisioned_dir() / "bin", "provisioned")
    if isinstance(result, Toolchain):
        return result
    raise ToolchainError(f"provisioned toolchain does not work: {result}")


def _nothing_found_message(reasons: list[str]) -> str:
    tried = "; ".join(reasons) if reasons else "no LLVM found"
    return (
        f"no LLVM toolchain that knows gfx950 ({tried}). Install ROCm (/opt/rocm/llvm/bin) or "
        f"LLVM >= {MIN_LLVM_MAJOR} (llvm-mc, llvm-objdump, llvm-readelf, llvm-objcopy, ld.lld), "
        "or set toolchain.bin_dir in config/config.yaml"
    )


# ---------------------------------------------------------------------------------------------
# Provisioning from Debian's registry


LLVM_REMEDY = Remedy(
    what="LLVM",
    no_mirror=f"install LLVM >= {MIN_LLVM_MAJOR} yourself",
    failed=f"install ROCm or LLVM >= {MIN_LLVM_MAJOR} yourself and set toolchain.bin_dir",
)


def _write_wrapper(root: Path, bin_dir: Path, name: str, target: Path) -> None:
    """A wrapper that starts `target` with the private root's loader and libraries.

    --argv0 keeps the name the tool dispatches on (llvm-readelf and llvm-readobj are one
    binary, ld.lld and lld too).
    """
    loader = root / "usr" / "lib64" / "ld-linux-x86-64.so.2"
    libs = ":".join(str(root / p) for p in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"))
    script = (
        "#!/bin/sh\n"
        f"# f4pipe: Debian {PROVISION_SUITE} LLVM {PROVISION_LLVM_MAJOR}, private loader + libs\n"
        f'exec "{loader}" --library-path "{libs}" --argv0 "{name}" "{target}" "$@"\n'
    )
    with atomic_path(bin_dir / name) as tmp:
        tmp.write_text(script)
        tmp.chmod(0o755)


def _write_wrappers(out: Path, final_root: Path) -> None:
    """bin/ with a wrapper per tool; paths name `final_root`, where the root lands."""
    root = out / "root"
    llvm_bin = root / "usr" / "lib" / f"llvm-{PROVISION_LLVM_MAJOR}" / "bin"
    bin_dir = out / "bin"
    bin_dir.mkdir()
    for name in (*TOOLS, LLC):
        src = llvm_bin / name
        if not src.exists():
            raise ToolchainError(f"provisioned packages lack {name} ({src})")
        target = final_root / src.resolve().relative_to(root.resolve())
        _write_wrapper(final_root, bin_dir, name, target)


def provision_debian_llvm() -> Path:
    """Download Debian 13's LLVM into the cache (see the module docstring); return its bin dir."""
    dest = provisioned_dir()
    if not has_apt():
        raise ToolchainError(
            "no LLVM that knows gfx950 was found, and this machine has no apt-get/dpkg to "
            f"provision one; install ROCm or LLVM >= {MIN_LLVM_MAJOR} (llvm-mc, llvm-objdump, "
            "llvm-readelf, llvm-objcopy, ld.lld) and set toolchain.bin_dir"
        )
    print(
        f"f4pipe: provisioning LLVM {PROVISION_LLVM_MAJOR} from Debian {PROVISION_SUITE} "
        f"into {dest}",
        flush=True,
    )
    try:
        with private_apt(PROVISION_SUITE, LLVM_REMEDY) as apt:
            unpack(apt, apt.download(PROVISION_PACKAGES), dest, _write_wrappers)
    except ProvisionError as exc:
        raise ToolchainError(str(exc)) from None
    return dest / "bin"


def write_toolchain_json(toolchain: Toolchain, path: Path) -> None:
    write_json(path, toolchain.as_json())


def read_toolchain_json(path: str | os.PathLike[str]) -> dict[str, str]:
    """A toolchain.json written by write_toolchain_json; errors name the file."""
    if not Path(path).exists():
        raise ToolchainError(f"{path}: no such toolchain.json; run `f4pipe toolchain -o {path}`")
    try:
        data = read_json_file(path, "toolchain.json")
    except InputError as exc:
        raise ToolchainError(str(exc)) from None
    if not isinstance(data, dict) or "toolchain_id" not in data or "bin_dir" not in data:
        raise ToolchainError(
            f"{path}: lacks toolchain_id/bin_dir; re-run `f4pipe toolchain -o {path}`"
        )
    return data


def read_toolchain_id(path: str | os.PathLike[str]) -> str:
    return read_toolchain_json(path)["toolchain_id"]
