"""Building AMD's Origami once, in a private venv under f4pipe's cache, for `f4research origami`:
HIP headers from Debian (installed, apt-get install, or unpacked .debs), pinned build tools, the
newest `rocm-origami` sdist that builds here. research/f4research/origami.py's docstring gives
the steps and why each is needed."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PACKAGE = "rocm-origami"
#: Build tools in the private venv (pinned so a rebuild is the same build).
BUILD_TOOLS = ("scikit-build-core==1.1.2", "nanobind==2.0.0", "cmake==3.31.10", "ninja==1.13.2")
HIP_DEV_PACKAGE = "libamdhip64-dev"
ROCM_CMAKE_PACKAGE = "rocm-cmake"
#: Not unpacked in the .deb fallback: loaded by the HIP runtime only to compile device code.
SKIPPED_DEB_PREFIXES = ("libamd-comgr",)
MAX_DEBS = 40


class Unavailable(Exception):
    """Origami cannot be built or run here; the message names what is missing."""


def log(msg: str) -> None:
    print(f"[origami] {msg}", file=sys.stderr, flush=True)


def cpu_seconds() -> float:
    """This process's CPU plus that of every child waited for (the builds' compilers too)."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def run(
    cmd: list[str],
    logfile: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 1800,
) -> subprocess.CompletedProcess[str]:
    """Run cmd, appending its command line and output to logfile."""
    with logfile.open("a") as fh:
        fh.write(f"\n$ {shlex.join(cmd)}\n")
        fh.flush()
        try:
            proc = subprocess.run(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                cwd=cwd,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError as exc:
            fh.write(f"not found: {exc}\n")
            return subprocess.CompletedProcess(cmd, 127, f"{cmd[0]}: not found", None)
        except subprocess.TimeoutExpired:
            fh.write(f"timed out after {timeout:.0f} s\n")
            return subprocess.CompletedProcess(cmd, 124, f"timed out after {timeout:.0f} s", None)
        fh.write(proc.stdout)
        fh.write(f"[exit {proc.returncode}]\n")
    return proc


def why(output: str) -> str:
    """The most telling line of a failed tool's output."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for pattern in (r"CMake Error", r"error:", r"ERROR:", r"E: ", r"[Ee]rror"):
        hits = [ln for ln in lines if re.search(pattern, ln)]
        if hits:
            return hits[0][:200]
    return lines[-1][:200] if lines else "no output"


def default_build_dir() -> Path:
    from f4pipe.core.cache import cache_root

    return cache_root() / "origami"


class Hip:
    """Where the HIP headers, libamdhip64 and the ROCm CMake modules are."""

    def __init__(
        self, include: Path, library: Path, rocm_cmake: Path, how: str, libdirs: list[Path]
    ) -> None:
        self.include = include
        self.library = library
        self.rocm_cmake = rocm_cmake
        self.how = how
        self.libdirs = libdirs


def find_hip(root: Path) -> Hip | None:
    """HIP headers, libamdhip64.so and rocm-cmake's modules under root ('/' or an unpacked tree)."""
    include = root / "usr" / "include"
    libs = sorted(glob.glob(str(root / "usr" / "lib" / "*" / "libamdhip64.so")))
    libs += sorted(glob.glob(str(root / "usr" / "lib" / "libamdhip64.so")))
    cmake_dirs = [
        Path(p).parent
        for pattern in (
            "usr/share/rocmcmakebuildtools/cmake/ROCMSetupVersion.cmake",
            "usr/share/rocm*/cmake/ROCMSetupVersion.cmake",
            "usr/lib/*/cmake/*/ROCMSetupVersion.cmake",
        )
        for p in sorted(glob.glob(str(root / pattern)))
    ]
    if not (include / "hip" / "hip_runtime.h").is_file() or not libs or not cmake_dirs:
        return None
    library = Path(libs[0])
    if not library.resolve().is_file():
        return None
    return Hip(include, library, cmake_dirs[0], "", [])


def dpkg_version(package: str) -> str:
    """The installed version of a Debian package, or ''."""
    try:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}|${Version}", package],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return ""
    status, _, version = proc.stdout.partition("|")
    return version if proc.returncode == 0 and status.endswith(" installed") else ""


def apt_install(logfile: Path) -> bool:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [
        "apt-get",
        "install",
        "-y",
        "--no-install-recommends",
        HIP_DEV_PACKAGE,
        ROCM_CMAKE_PACKAGE,
    ]
    log(f"{shlex.join(cmd)} (log: {logfile})")
    if run(cmd, logfile, env=env, timeout=900).returncode == 0:
        return True
    run(["apt-get", "update"], logfile, env=env, timeout=600)
    return run(cmd, logfile, env=env, timeout=900).returncode == 0


def apt_depends(package: str) -> list[str]:
    """The packages `package` depends on (first alternative of each), per apt-cache."""
    try:
        proc = subprocess.run(
            ["apt-cache", "depends", "--no-recommends", "--no-suggests", package],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        return []
    out = []
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*\|?(?:Pre)?Depends:\s*(\S+)", line)
        if m and not m.group(1).startswith("<"):
            out.append(m.group(1).split(":")[0])
    return out


def hip_from_debs(cache: Path, logfile: Path) -> Hip:
    """apt-get download + dpkg-deb -x of the HIP headers, libamdhip64 (and what it needs that is
    not installed) and rocm-cmake, under cache/hip-root."""
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        raise Unavailable(
            f"no HIP headers: {HIP_DEV_PACKAGE} is not installed and this machine has no "
            "apt-get/dpkg-deb to fetch it"
        )
    runtime = [p for p in apt_depends(HIP_DEV_PACKAGE) if re.fullmatch(r"libamdhip64-\d+", p)]
    if not runtime:
        raise Unavailable(f"no HIP headers: apt-cache knows no {HIP_DEV_PACKAGE} (apt-get update?)")
    wanted = [HIP_DEV_PACKAGE, runtime[0], ROCM_CMAKE_PACKAGE]
    queue = list(apt_depends(runtime[0]))
    while queue and len(wanted) < MAX_DEBS:
        pkg = queue.pop(0)
        if pkg in wanted or pkg.startswith(SKIPPED_DEB_PREFIXES) or dpkg_version(pkg):
            continue
        wanted.append(pkg)
        queue.extend(apt_depends(pkg))
    debs = cache / "debs"
    shutil.rmtree(debs, ignore_errors=True)
    debs.mkdir(parents=True)
    log(f"apt-get download {' '.join(wanted)} (log: {logfile})")
    proc = run(["apt-get", "download", *wanted], logfile, cwd=debs, timeout=900)
    if proc.returncode != 0:
        raise Unavailable(
            f"no HIP headers: apt-get download {HIP_DEV_PACKAGE} failed: {why(proc.stdout)}"
        )
    root = cache / "hip-root"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    for deb in sorted(debs.glob("*.deb")):
        if run(["dpkg-deb", "-x", str(deb), str(root)], logfile).returncode != 0:
            raise Unavailable(f"no HIP headers: dpkg-deb -x {deb.name} failed")
    hip = find_hip(root)
    if hip is None:
        raise Unavailable(f"no HIP headers: the unpacked {HIP_DEV_PACKAGE} lacks hip_runtime.h")
    hip.libdirs = [
        sub for top in (root / "usr" / "lib", root / "lib") for sub in sorted(top.glob("*-linux-*"))
    ]
    hip.libdirs = [d for d in hip.libdirs if d.is_dir()]
    version = re.sub(r"^.*?_(.*?)_.*$", r"\1", next(debs.glob(f"{HIP_DEV_PACKAGE}_*.deb")).name)
    hip.how = f"apt-get download + dpkg-deb -x: {HIP_DEV_PACKAGE} {version} under {root}"
    return hip


def provide_hip(cache: Path, logfile: Path) -> Hip:
    mode = os.environ.get("F4PIPE_ORIGAMI_HIP", "auto")
    if mode != "debs":
        hip = find_hip(Path("/"))
        how = "installed"
        if hip is None and os.geteuid() == 0 and shutil.which("apt-get") and apt_install(logfile):
            hip = find_hip(Path("/"))
            how = "installed now by apt-get install"
        if hip is not None:
            version = dpkg_version(HIP_DEV_PACKAGE) or "?"
            hip.how = f"Debian {HIP_DEV_PACKAGE} {version} {how}"
            return hip
    return hip_from_debs(cache, logfile)


def write_shims(cache: Path, hip: Hip) -> tuple[Path, Path]:
    """Config files for find_package(hip) and find_package(ROCmCMakeBuildTools)."""
    hip_dir = cache / "cmake-shims" / "hip"
    rocm_dir = cache / "cmake-shims" / "rocm"
    hip_dir.mkdir(parents=True, exist_ok=True)
    rocm_dir.mkdir(parents=True, exist_ok=True)
    link_opts = ";".join(f"-Wl,-rpath-link,{d}" for d in hip.libdirs)
    (hip_dir / "hip-config.cmake").write_text(
        "# Written by f4pipe's research/f4research/origami.py: hip::host from Debian's\n"
        "# libamdhip64-dev (host-side HIP API only; no HIP compiler needed).\n"
        "if(NOT TARGET hip::host)\n"
        "  add_library(hip::host INTERFACE IMPORTED)\n"
        "  set_target_properties(hip::host PROPERTIES\n"
        f'    INTERFACE_INCLUDE_DIRECTORIES "{hip.include}"\n'
        '    INTERFACE_COMPILE_DEFINITIONS "__HIP_PLATFORM_AMD__=1"\n'
        f'    INTERFACE_LINK_LIBRARIES "{hip.library}"\n'
        f'    INTERFACE_LINK_OPTIONS "{link_opts}")\n'
        "endif()\n"
        "set(hip_FOUND TRUE)\n"
    )
    (rocm_dir / "ROCmCMakeBuildToolsConfig.cmake").write_text(
        "# Written by f4pipe's research/f4research/origami.py: Debian's rocm-cmake modules.\n"
        f'list(APPEND CMAKE_MODULE_PATH "{hip.rocm_cmake}")\n'
        "set(ROCmCMakeBuildTools_FOUND TRUE)\n"
    )
    return hip_dir, rocm_dir


def pypi_versions(pip: list[str], logfile: Path) -> list[str]:
    """rocm-origami's versions on the index, newest first."""
    proc = run([*pip, "index", "versions", PACKAGE], logfile, timeout=300)
    m = re.search(r"Available versions:\s*(.+)", proc.stdout)
    if m:
        return [v.strip() for v in m.group(1).split(",") if v.strip()]
    proc = run([*pip, "download", "--no-deps", "-d", os.devnull, f"{PACKAGE}==0.0.0.dev0"], logfile)
    m = re.search(r"from versions:\s*([^)]*)\)", proc.stdout)
    versions = [v.strip() for v in m.group(1).split(",") if v.strip()] if m else []
    if not versions or versions == ["none"]:
        raise Unavailable(f"PyPI: no {PACKAGE} versions found ({why(proc.stdout)})")
    return versions[::-1]


def worker_env(libdirs: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANALYTICAL_GEMM_")}
    env.pop("PYTHONPATH", None)
    if libdirs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [*libdirs, *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
        )
    return env


def import_check(python: Path, libdirs: list[str]) -> str:
    """Origami's version as the venv imports it, or '' when it does not import."""
    if not python.is_file():
        return ""
    proc = subprocess.run(
        [str(python), "-c", "import origami; print(origami.__version__)"],
        capture_output=True,
        text=True,
        env=worker_env(libdirs),
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


def build(cache: Path) -> dict[str, Any]:
    """Build rocm-origami from its sdist into cache/venv; return what build.json records."""
    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    cache.mkdir(parents=True, exist_ok=True)
    logfile = cache / "build.log"
    logfile.write_text("")
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        raise Unavailable("no C++ compiler (Debian: apt-get install g++)")
    if not shutil.which("git"):
        raise Unavailable("no git: the sdist's CMake requires it (Debian: apt-get install git)")
    hip = provide_hip(cache, logfile)
    log(f"HIP: {hip.how}")
    venv = cache / "venv"
    python = venv / "bin" / "python"
    commands: list[str] = []
    if not python.is_file():
        cmd = [sys.executable, "-m", "venv", str(venv)]
        commands.append(shlex.join(cmd))
        proc = run(cmd, logfile, timeout=600)
        if proc.returncode != 0:
            raise Unavailable(f"python -m venv failed: {why(proc.stdout)}")
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    cmd = [*pip, "install", *BUILD_TOOLS]
    commands.append(shlex.join(cmd))
    log(f"build tools: {' '.join(BUILD_TOOLS)}")
    proc = run(cmd, logfile, timeout=900)
    if proc.returncode != 0:
        raise Unavailable(f"pip could not install the build tools: {why(proc.stdout)}")
    nb = subprocess.run(
        [str(python), "-m", "nanobind", "--cmake_dir"], capture_output=True, text=True, check=False
    )
    hip_dir, rocm_dir = write_shims(cache, hip)
    cmake_args = [
        f"-Dhip_DIR={hip_dir}",
        f"-DROCmCMakeBuildTools_DIR={rocm_dir}",
        f"-Dnanobind_DIR={nb.stdout.strip()}",
        "-DFETCHCONTENT_TRY_FIND_PACKAGE_MODE=ALWAYS",
        "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
    ]
    env = {
        **os.environ,
        "CMAKE_ARGS": shlex.join(cmake_args),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    sdists = cache / "sdist"
    sdists.mkdir(exist_ok=True)
    failures = []
    for version in pypi_versions(pip, logfile):
        cmd = [*pip, "download", "--no-binary", ":all:", "--no-deps", "--no-build-isolation"]
        cmd += ["-d", str(sdists), f"{PACKAGE}=={version}"]
        found = sorted(sdists.glob(f"rocm_origami-{version}.tar.gz"))
        if not found:
            log(f"pip download {PACKAGE}=={version} (sdist)")
            proc = run(cmd, logfile, env=env, timeout=600)
            found = sorted(sdists.glob(f"rocm_origami-{version}.tar.gz"))
            if not found:
                failures.append(f"{version}: download failed ({why(proc.stdout)})")
                continue
        commands.append(shlex.join(cmd))
        sdist = found[0]
        install = [*pip, "install", "-v", "--no-build-isolation", "--no-deps", "--no-cache-dir"]
        install += ["--force-reinstall", str(sdist)]
        log(f"building {sdist.name} (log: {logfile})")
        proc = run(install, logfile, env=env, timeout=3600)
        got = import_check(python, [str(d) for d in hip.libdirs]) if proc.returncode == 0 else ""
        if proc.returncode == 0 and got:
            commands.append(
                f"CMAKE_ARGS={shlex.quote(shlex.join(cmake_args))} {shlex.join(install)}"
            )
            break
        failures.append(f"{version}: {why(proc.stdout) if proc.returncode else 'does not import'}")
        log(f"{PACKAGE} {version} did not build: {failures[-1]}")
    else:
        raise Unavailable(f"no {PACKAGE} sdist builds here: {'; '.join(failures)}")
    freeze = subprocess.run([*pip, "freeze"], capture_output=True, text=True, check=False)
    info = {
        "package": PACKAGE,
        "version": version,
        "sdist": sdist.name,
        "sdist_sha256": hashlib.sha256(sdist.read_bytes()).hexdigest(),
        "failed_newer_versions": failures,
        "python": str(python),
        "hip": hip.how,
        "ld_library_path": [str(d) for d in hip.libdirs],
        "cxx": cxx,
        "tools": [ln for ln in freeze.stdout.split() if "==" in ln],
        "commands": commands,
        "build_wall_s": round(time.perf_counter() - wall0, 1),
        "build_cpu_s": round(cpu_seconds() - cpu0, 1),
        "built_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (cache / "build.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def ensure_origami(cache: Path, rebuild: bool) -> dict[str, Any]:
    stamp = cache / "build.json"
    if not rebuild and stamp.is_file():
        info = json.loads(stamp.read_text())
        if import_check(Path(info["python"]), info["ld_library_path"]) == info["version"]:
            info["cached"] = True
            return info
        log("the cached build does not import; building again")
    info = build(cache)
    info["cached"] = False
    return info
