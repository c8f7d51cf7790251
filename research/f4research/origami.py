"""AMD's analytical GEMM model Origami, scored on the same real MI355X timings as f4pipe's cycle
model (`f4research origami [--json]`).

What it measures. The rows are `f4pipe.perf.fit.measured_rows`: aiter's tuned table in the
pinned wheel (796 rows: M, N, K, aiter's chosen f4gemm kernel, its measured MI355X time) and the
seed driver's 4 shapes. For every row Origami predicts the time of that GEMM with that row's tile;
the report gives the median, p90 and mean absolute error |predicted / measured - 1| (the metric
of `f4pipe.perf.fit.by_range`) over the 796 aiter rows, overall and per M range (M<=64, 65-512,
>512), the same over all 800 rows, and each seed row on its own. Then, at each (M, N, K) of
aiter's table, the 35 kernels of the manifest are ranked by Origami's predicted time: how often
aiter's recorded kernel (the fastest aiter measured there) is Origami's first choice and in its
top 3. The two 256x256 kernels (BpreShuffle and noBpreShuffle) are the same tile to Origami, so
there are 34 distinct predictions; a kernel's rank is 1 + the number of tiles predicted strictly
faster. Beside that ranking by raw predicted time the report gives where aiter's tile falls in
Origami's own `rank_configs` order (the same times, but configs within 1 % of the best reordered
by Origami's tie-breaks: higher arithmetic intensity, then larger tiles), which is what
`select_config` would pick. Output: a table, or with --json one JSON object on one line (the
last line of stdout; research/f4research/accuracy.py reads it). Progress goes to stderr.

Where Origami comes from. The PyPI package `rocm-origami` (AMD, MIT; the model of arXiv
2512.04226), from its sdist: the newest version on PyPI that builds here (0.0.3 when this was
written; older ones are tried in turn when a newer one fails).

How it is built, once, in a cache directory (`$F4PIPE_CACHE/origami`, else
`~/.cache/f4pipe/origami`; --build-dir overrides it), leaving the project's environment alone:

1. HIP headers from Debian's package registry: `libamdhip64-dev` (HIP 5.2 on bookworm) and
   `rocm-cmake`. Already installed: used as they are. Else, as root, `apt-get install -y
   --no-install-recommends libamdhip64-dev rocm-cmake` (after `apt-get update` if the first try
   fails). Else (or with F4PIPE_ORIGAMI_HIP=debs) `apt-get download` of those, of the HIP
   runtime library package and of whatever of its dependencies is not installed (not the code
   object manager libamd-comgr, which the runtime only loads to compile device code, and which
   would bring LLVM), each unpacked with `dpkg-deb -x` under the cache; its library directories
   go on the worker's LD_LIBRARY_PATH.
2. A private venv (`python -m venv <cache>/venv`) with the build tools pinned: scikit-build-core,
   nanobind 2.0.0 (the tag Origami's CMake names), cmake 3.31.10 (the sdist needs >= 3.25.2 and
   bookworm's cmake is 3.25.1; the last 3.x, as the sdist's CMake was written for 3.x), ninja.
3. `pip download --no-binary :all: --no-deps --no-build-isolation rocm-origami==V` into
   <cache>/sdist (--no-build-isolation: pip prepares the sdist's metadata with the venv's
   scikit-build-core; isolated, --no-binary :all: would make it compile cmake and ninja from
   source first), then `pip install --no-build-isolation --no-deps --no-cache-dir <sdist>` with
   CMAKE_ARGS pointing CMake at small config files this script writes under <cache>/cmake-shims:
   - hip: the sdist calls `find_package(hip)` only for `hip::host` (it includes
     <hip/hip_runtime.h> for hipDeviceProp_t and calls hipGetDeviceProperties). Debian's own
     hip-config.cmake insists on hipcc, hipconfig, the AMD device libraries and clang's runtime
     builtins (a whole HIP compiler), so the shim defines `hip::host` as the Debian headers plus
     libamdhip64 and __HIP_PLATFORM_AMD__=1, which is what the host-only code needs.
   - ROCmCMakeBuildTools: Debian's rocm-cmake 5.4 ships the same modules under the older package
     name ROCM; the shim puts its directory on CMAKE_MODULE_PATH (the sdist would otherwise try
     to clone rocm-cmake from GitHub).
   - nanobind: the sdist FetchContent-clones nanobind v2.0.0 from GitHub; with
     FETCHCONTENT_TRY_FIND_PACKAGE_MODE=ALWAYS and nanobind_DIR it uses the pip package instead,
     and FETCHCONTENT_FULLY_DISCONNECTED=ON keeps CMake off the network.
   <cache>/build.json records the version, the sdist's sha256, the tool versions, the commands and
   the build's wall and CPU time; later runs reuse the build (--rebuild forces a new one). When
   no version builds (no C++ compiler, no git, no HIP headers, PyPI out of reach, ...) the
   script prints one line `skipped: <reason>` (--json: {"skipped": reason}) and exits 0.

Origami's inputs, and why (the MI355X as f4pipe knows it: gfx950, 256 CUs, MXFP4 x MXFP4 -> bf16,
D[M,N] = A[M,K] x B[N,K]^T, 256 threads = 4 waves per workgroup, one workgroup per CU,
v_mfma_scale_f32_16x16x128_f8f6f4, 256 of K per main-loop iteration):

- hardware: `get_hardware_for_arch(gfx950, N_CU=256, lds_capacity=160 KiB, L2_capacity=4 MiB,
  compute_clock_khz=2_400_000)`, the call Origami documents for modelling without a GPU; its
  bandwidths and MI latencies come from Origami's own gfx950 constants. 160 KiB is gfx950's LDS
  per CU; 4 MiB is the L2 per XCD that HIP reports as l2CacheSize (the answer does not move
  between 4 and 32 MiB); 2.4 GHz is the MI355X's peak engine clock. Origami works in cycles;
  predicted us = cycles / (compute_clock_ghz * 1e3).
- problem: size (M, N, K), batch 1; a_transpose=T, b_transpose=N (Origami's "TN": A is M x K and
  B is N x K, both K-contiguous, as in f4gemm); a/b/mi dtype Float4 (Origami has FP4 for gfx950:
  16x16x128 at 16 cycles, and adds one byte of scale per a/b_mx_block_size elements) with
  a/b_mx_block_size=32 (e8m0 scales per 32 elements); c/d dtype BFloat16.
- config: mt = (tile M, tile N from the kernel name, 256), mi = 16x16x128, occupancy 1 (one
  workgroup per CU), grid_selection=data_parallel (aiter's rows are the non-split-K kernels:
  one workgroup per output tile; Origami's default, k_split_aware, would model a stream-K split
  these kernels do not do: with it the M<=64 median falls to about 51 % but aiter's tile is
  Origami's first choice at only about 58 % of the shapes), hand_optimized_main_loop off
  (Origami has no FP4 entries for it), workgroup mapping left to Origami (compute_total_latency
  uses its own default).
- cache hints: Origami accepts a config only if its non-temporal hint agrees with Origami's rule
  for skinny problems (B non-temporal when M <= 2 MT_M and N > 5 M, A likewise), and the hint does
  not enter the predicted time. Each tile is offered with hints (0, 0), (4, 0) and (0, 4) and the
  one Origami accepts is used.
- Origami's environment switches (ANALYTICAL_GEMM_*) are removed, so its defaults apply.

Reading the numbers: Origami charges a tile's padding as work (its time is divided by the used
fraction of the tile's M x N x K volume), so at M=1 a 160-row tile is predicted over 100 times
too slow for the memory-bound kernels aiter measured; that, not the hardware description, is
what the M<=64 errors show.
"""

from __future__ import annotations

import argparse
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

# The MI355X and the f4gemm kernels, as Origami is told about them (see the docstring).
ARCH = "gfx950"
N_CU = 256
LDS_BYTES = 160 * 1024
L2_BYTES = 4 * 1024 * 1024
CLOCK_KHZ = 2_400_000
TILE_K = 256
MI = (16, 16, 128)
MX_BLOCK = 32
OCCUPANCY = 1
CACHE_HINTS = ((0, 0), (4, 0), (0, 4))
INVALID = 1e300  # Origami returns DBL_MAX for a config it rejects
M_LABELS = ("M<=64", "65-512", ">512")


class Unavailable(Exception):
    """Origami cannot be built or run here; the message names what is missing."""


# --------------------------------------------------------------------------------------------
# worker: runs in the private venv's Python (stdlib and origami only)
# --------------------------------------------------------------------------------------------


def _problem(o: Any, m: int, n: int, k: int) -> Any:
    p = o.problem_t()
    p.size = o.dim3_t(m, n, k)
    p.batch = 1
    p.a_transpose = o.transpose_t.T
    p.b_transpose = o.transpose_t.N
    p.a_dtype = o.data_type_t.Float4
    p.b_dtype = o.data_type_t.Float4
    p.mi_dtype = o.data_type_t.Float4
    p.c_dtype = o.data_type_t.BFloat16
    p.d_dtype = o.data_type_t.BFloat16
    p.a_mx_block_size = MX_BLOCK
    p.b_mx_block_size = MX_BLOCK
    return p


def _config(o: Any, tile: tuple[int, int], hints: tuple[int, int]) -> Any:
    c = o.config_t()
    c.mt = o.dim3_t(tile[0], tile[1], TILE_K)
    c.mi = o.dim3_t(*MI)
    c.occupancy = OCCUPANCY
    c.grid_selection = o.grid_selection_t.data_parallel
    c.hand_optimized_main_loop = False
    c.cache_hints_a, c.cache_hints_b = hints
    return c


def worker() -> int:
    """stdin: {"shapes": [[m, n, k], ...], "tiles": [[tile_m, tile_n], ...]}; stdout: Origami's
    predicted us per shape and tile, and per shape the tiles in rank_configs order."""
    import origami as o

    request = json.load(sys.stdin)
    hw = o.get_hardware_for_arch(
        arch=getattr(o.architecture_t, ARCH),
        N_CU=N_CU,
        lds_capacity=LDS_BYTES,
        L2_capacity=L2_BYTES,
        compute_clock_khz=CLOCK_KHZ,
    )
    cycles_per_us = hw.compute_clock_ghz * 1e3
    tiles = [(int(a), int(b)) for a, b in request["tiles"]]
    index = {t: i for i, t in enumerate(tiles)}
    variants = {t: [_config(o, t, h) for h in CACHE_HINTS] for t in tiles}
    every = [c for t in tiles for c in variants[t]]
    times: list[list[float | None]] = []
    orders: list[list[int]] = []
    for m, n, k in request["shapes"]:
        p = _problem(o, int(m), int(n), int(k))
        row: list[float | None] = []
        for t in tiles:
            cycles = min(o.compute_total_latency(p, hw, c, N_CU) for c in variants[t])
            row.append(cycles / cycles_per_us if cycles < INVALID else None)
        times.append(row)
        try:
            ranked = o.rank_configs(p, hw, every)
        except RuntimeError:  # "No valid configs found."
            ranked = []
        orders.append(list(dict.fromkeys(index[(r.config.mt.m, r.config.mt.n)] for r in ranked)))
    mi = hw.get_recommended_matrix_instruction(o.data_type_t.Float4)
    hardware = {
        "arch": ARCH,
        "N_CU": hw.N_CU,
        "lds_capacity": hw.lds_capacity,
        "L2_capacity": hw.L2_capacity,
        "compute_clock_ghz": hw.compute_clock_ghz,
        "NUM_XCD": hw.NUM_XCD,
        "CU_per_L2": hw.CU_per_L2,
        "parallel_mi_cu": hw.parallel_mi_cu,
        "mem_bytes_per_cycle_l2_mall_hbm": [
            round(hw.mem1_perf_ratio, 1),
            round(hw.mem2_perf_ratio, 1),
            round(hw.mem3_perf_ratio, 1),
        ],
        "recommended_fp4_mi": [mi.m, mi.n, mi.k],
    }
    json.dump(
        {"version": o.__version__, "hardware": hardware, "us": times, "order": orders},
        sys.stdout,
    )
    return 0


# --------------------------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------------------------


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
    from f4pipe.codeobj.toolchain import cache_root

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


# --------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------


def score(info: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.perf.fit import by_range, default_f4gemm_dir, measured_rows

    d = default_f4gemm_dir()
    entries = read_manifest(d)
    manifest = list(entries)
    rows = measured_rows(d, entries)
    tiles = list(dict.fromkeys((e.tile_m, e.tile_n) for e in manifest))
    tile_of = {e.name: tiles.index((e.tile_m, e.tile_n)) for e in manifest}
    for name in rows["kernel"]:
        m = re.search(r"_(\d+)x(\d+)$", name)
        if name not in tile_of or not m or tiles[tile_of[name]] != (int(m[1]), int(m[2])):
            raise SystemExit(f"kernel {name}: not in the manifest or its tile is not its name's")
    shapes = list(dict.fromkeys(zip(rows["m"], rows["n"], rows["k"], strict=True)))
    request = {"shapes": [[int(x) for x in s] for s in shapes], "tiles": tiles}
    proc = subprocess.run(
        [info["python"], str(Path(__file__).resolve()), "--worker"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=worker_env(info["ld_library_path"]),
        check=False,
    )
    if proc.returncode != 0:
        raise Unavailable(f"the Origami worker failed: {why(proc.stderr)}")
    answer = json.loads(proc.stdout)
    shape_index = {s: i for i, s in enumerate(shapes)}
    us = np.array(answer["us"], dtype=float)  # None -> nan: a config Origami rejected
    si = np.array([shape_index[s] for s in zip(rows["m"], rows["n"], rows["k"], strict=True)])
    ti = np.array([tile_of[k] for k in rows["kernel"]])
    pred = us[si, ti]
    aiter = (rows["source"] == "aiter").to_numpy()
    seed = ~aiter

    firsts = top3 = sel_first = sel_top3 = 0
    ranks = []
    for s, t in zip(si[aiter], ti[aiter], strict=True):
        times = np.where(np.isnan(us[s]), np.inf, us[s])
        rank = 1 + int(np.sum(times < times[t]))
        ranks.append(rank)
        firsts += rank == 1
        top3 += rank <= 3
        order = answer["order"][s]
        pos = order.index(t) + 1 if t in order else len(tiles) + 1
        sel_first += pos == 1
        sel_top3 += pos <= 3
    n = int(aiter.sum())
    return {
        "origami_version": answer["version"],
        "hardware": answer["hardware"],
        "invalid_predictions": int(np.isnan(pred).sum()),
        "aiter_rows": by_range(pred[aiter], rows[aiter]),
        "all_rows": by_range(pred, rows),
        "seed": [
            {
                "shape": f"{r.m}x{r.n}x{r.k}",
                "kernel": r.kernel,
                "measured_us": r.us,
                "predicted_us": round(float(p), 2),
                "error_pct": round(float((p / r.us - 1) * 100), 1),
            }
            for r, p in zip(rows[seed].itertuples(), pred[seed], strict=True)
        ],
        "ranking": {
            "shapes": n,
            "kernels": len(manifest),
            "distinct_tiles": len(tiles),
            "best_pct": round(100 * firsts / n, 1),
            "top3_pct": round(100 * top3 / n, 1),
            "median_rank": float(np.median(ranks)),
            "rank_configs_best_pct": round(100 * sel_first / n, 1),
            "rank_configs_top3_pct": round(100 * sel_top3 / n, 1),
        },
    }


def configuration() -> dict[str, Any]:
    return {
        "hardware_call": (
            f"get_hardware_for_arch({ARCH}, N_CU={N_CU}, lds_capacity={LDS_BYTES}, "
            f"L2_capacity={L2_BYTES}, compute_clock_khz={CLOCK_KHZ})"
        ),
        "problem": (
            f"TN (a_transpose=T, b_transpose=N), a/b/mi Float4 with mx_block_size {MX_BLOCK}, "
            "c/d BFloat16, batch 1"
        ),
        "config": (
            f"mt=(tile_m, tile_n, {TILE_K}), mi={MI[0]}x{MI[1]}x{MI[2]}, occupancy {OCCUPANCY}, "
            "grid_selection data_parallel, cache hints as Origami accepts"
        ),
        "predicted_us": "compute_total_latency cycles / (compute_clock_ghz * 1e3)",
    }


def print_report(r: dict[str, Any]) -> None:
    b = r["build"]
    print(
        f"Origami {b['package']} {r['origami_version']} (sdist {b['sdist']}, "
        f"{'cached build' if b['cached'] else 'built now'}; HIP: {b['hip']})"
    )
    for key, value in r["config"].items():
        print(f"  {key}: {value}")
    print(f"  Origami's hardware: {json.dumps(r['hardware'])}")
    print(f"{'|pred/measured - 1| in %':<28}{'rows':>6}{'median':>9}{'p90':>9}{'mean':>9}")
    for block, label in (("aiter_rows", "aiter"), ("all_rows", "aiter+seed")):
        for g in ("all", *M_LABELS):
            e = r[block][g]
            print(
                f"{label + ' ' + g:<28}{e['rows']:>6}{e['median_pct']:>9.1f}"
                f"{e['p90_pct']:>9.1f}{e['mean_pct']:>9.1f}"
            )
    for s in r["seed"]:
        tile = s["kernel"].rsplit("_", 1)[1]
        print(
            f"seed {s['shape']:>18} {tile:>8}: measured {s['measured_us']:7.1f} us, "
            f"Origami {s['predicted_us']:7.1f} us ({s['error_pct']:+.1f} %)"
        )
    k = r["ranking"]
    print(
        f"ranking, {k['kernels']} kernels ({k['distinct_tiles']} distinct tiles) at aiter's "
        f"{k['shapes']} shapes: aiter's kernel is Origami's fastest in {k['best_pct']:.1f} %, "
        f"in its top 3 in {k['top3_pct']:.1f} % (median rank {k['median_rank']:g}); in "
        f"Origami's rank_configs order (1 % tie-breaks) first in "
        f"{k['rank_configs_best_pct']:.1f} %, top 3 in {k['rank_configs_top3_pct']:.1f} %"
    )
    if r["invalid_predictions"]:
        print(f"rows Origami rejected (left out of the errors): {r['invalid_predictions']}")
    c = r["cost"]
    print(
        f"build: {b['build_wall_s']} s wall, {b['build_cpu_s']} s CPU (at {b['built_at']}); "
        f"scoring: {c['scoring_wall_s']} s wall, {c['scoring_cpu_s']} s CPU"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on one line")
    parser.add_argument("--rebuild", action="store_true", help="build Origami again")
    parser.add_argument("--build-dir", type=Path, help="default: $F4PIPE_CACHE/origami")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker()
    try:
        info = ensure_origami(args.build_dir or default_build_dir(), args.rebuild)
        wall0, cpu0 = time.perf_counter(), cpu_seconds()
        report = score(info)
    except Unavailable as exc:
        reason = str(exc)
        print(json.dumps({"skipped": reason}) if args.json else f"skipped: {reason}")
        return 0
    report["cost"] = {
        "scoring_wall_s": round(time.perf_counter() - wall0, 2),
        "scoring_cpu_s": round(cpu_seconds() - cpu0, 2),
    }
    report["config"] = configuration()
    report["build"] = {k: v for k, v in info.items() if k not in ("python", "ld_library_path")}
    if args.json:
        print(json.dumps(report, default=float))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
