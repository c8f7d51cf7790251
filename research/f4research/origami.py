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
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from f4research.origamibuild import (
    Unavailable,
    cpu_seconds,
    default_build_dir,
    ensure_origami,
    why,
    worker_env,
)
from f4research.origamiworker import (
    ARCH,
    CLOCK_KHZ,
    L2_BYTES,
    LDS_BYTES,
    MI,
    MX_BLOCK,
    N_CU,
    OCCUPANCY,
    TILE_K,
)

M_LABELS = ("M<=64", "65-512", ">512")


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
        [
            info["python"],
            "-I",  # not the script's directory on sys.path: its origami.py is this module
            str(Path(__file__).with_name("origamiworker.py")),
        ],
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
    args = parser.parse_args()
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
