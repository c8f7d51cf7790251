"""The half of `f4research origami` that runs inside Origami's private venv: its Python has the
standard library and Origami, nothing of f4pipe, so this module imports nothing else and is run
by path (`python origamiworker.py`, JSON request on stdin, JSON answer on stdout). The MI355X and
the f4gemm kernels as Origami is told about them are set here; research/f4research/origami.py's
docstring says why each value is what it is."""

from __future__ import annotations

import json
import sys
from typing import Any

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


if __name__ == "__main__":
    sys.exit(worker())
