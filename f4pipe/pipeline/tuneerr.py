"""errRatio of a tuned pick, measured the way aiter's tuner measures it, on the emulator: one
run per edge class of the pick (a reduced shape that exercises the same edges), reused by
content from the result store. f4pipe.pipeline.tune drops a pick whose run faults or misses
aiter's limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from f4pipe.aiter.manifest import KernelEntry, Manifest
from f4pipe.aiter.shaperules import K_BLOCK
from f4pipe.core.cache import f4pipe_identity
from f4pipe.core.layout import EMULATOR_DEVICE_ID, SEED_A, SEED_B
from f4pipe.core.numerics import round_up
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.pipeline.progress import track
from f4pipe.pipeline.resultstore import ResultStore, kernel_identity, reuse_or_run

#: aiter's tuner's tolerances for errRatio (mp_tuner: checkAllclose with rtol 1e-2, atol 1e-2
#: against torch's result cast to bf16).
ERR_RTOL = 1e-2
ERR_ATOL = 1e-2


def _edge_rep(size: int, tile: int, partial: int) -> int:
    """The run's size in M or N for a dimension of `size` over tiles of `tile`: one full tile,
    a single partial one of `partial`, or a full tile and a partial one."""
    if size % tile == 0:
        return tile
    return partial if size < tile else tile + partial


def reduced_shape(entry: KernelEntry, m: int, n: int, k: int, split: int) -> tuple[int, int, int]:
    """One shape per edge class, so that a run serves every row of the class: in M and N one
    full tile, a single partial tile, or a full and a partial one (_edge_rep: 16 rows, D's
    rows being padded to 32 whatever M is; 32 columns, the store chunk, or 16 where N % 32 ==
    16), M = 1 where K has a tail (its single-row class); K two 256-blocks per split part (one
    where the part has one: a single K step is a class of its own) plus K's tail."""
    m_r = 1 if m == 1 and k % K_BLOCK else _edge_rep(m, entry.tile_m, 16)
    n_r = _edge_rep(n, entry.tile_n, 16 if n % 32 else 32)
    parts = 1 << split
    blocks = 1 if round_up(-(-k // parts), K_BLOCK) == K_BLOCK else 2
    k_r = min(k, parts * blocks * K_BLOCK + (k % K_BLOCK if not split else 0))
    return m_r, n_r, k_r


def err_ratio(
    entry: KernelEntry, co_path: Path, m: int, n: int, k: int, split: int
) -> dict[str, Any]:
    """aiter's tuner's errRatio of one emulated run: the share of D[:M,:N] not close to the
    reference cast to bf16 (torch.isclose, rtol and atol 1e-2); or the fault that ended it
    (an access outside the buffers: the candidate is not safe there)."""
    from f4pipe.core.numerics import bf16_bits_to_float, float_to_bf16_bits
    from f4pipe.emu import EmulatorDevice, LaunchFault
    from f4pipe.host.gemm import GemmRequest, run_gemm
    from f4pipe.host.operands import generate_operand
    from f4pipe.host.reference import reference_of_values

    ref = reference_of_values(
        generate_operand(m, k, SEED_A).dequantize(), generate_operand(n, k, SEED_B).dequantize()
    )
    ref_bf16 = bf16_bits_to_float(float_to_bf16_bits(ref))
    device = EmulatorDevice()
    try:
        result = run_gemm(device, entry, co_path, GemmRequest(m, n, k, split, verify=False))
    except LaunchFault as fault:
        return {"err_ratio": None, "fault": str(fault)}
    finally:
        device.close()
    close = np.abs(result.d - ref_bf16) <= ERR_ATOL + ERR_RTOL * np.abs(ref_bf16)
    return {"err_ratio": round(float(1.0 - close.mean()), 4), "fault": ""}


def err_ratios(
    picks: pd.DataFrame,
    manifest: Manifest,
    keys: ArtifactKeys,
    store: ResultStore | None,
    runs: dict[tuple, dict[str, Any]],
) -> pd.DataFrame:
    """errRatio (or the fault) and the shape it was emulated at, per pick: one run per
    distinct reduced shape (the same kernel, split and edge classes), kept in `runs` and
    reused from `store` by content."""
    by_name = {e.name: e for e in manifest}
    out = []
    for r in track(picks.itertuples(), "tune errRatio", total=len(picks)):
        entry = by_name[r.kernel]
        shape = reduced_shape(entry, r.m, r.n, r.k, r.log2_k_split)
        key = (r.kernel, r.log2_k_split, *shape)
        if key not in runs:
            runs[key] = _stored_err_ratio(store, keys, manifest, entry, shape, r.log2_k_split)
        out.append({"index": r.Index, **runs[key], "err_shape": "x".join(map(str, shape))})
    return pd.DataFrame(out).set_index("index") if out else pd.DataFrame()


def _stored_err_ratio(
    store: ResultStore | None,
    keys: ArtifactKeys,
    manifest: Manifest,
    entry: KernelEntry,
    shape: tuple[int, int, int],
    split: int,
) -> dict[str, Any]:
    co_path = manifest.co_path(entry)
    inputs: dict[str, Any] = {}
    if store is not None:
        inputs = {
            "kernel": kernel_identity(entry, co_path, EMULATOR_DEVICE_ID, store),
            "shape": list(shape),
            "log2_k_split": split,
            "tolerance": [ERR_RTOL, ERR_ATOL],
            "device_id": EMULATOR_DEVICE_ID,
            "f4pipe": f4pipe_identity(),
        }
    (row,) = reuse_or_run(
        store,
        "tune",
        inputs,
        {"aiter_id": keys.aiter_id},
        lambda: [{"aiter_id": keys.aiter_id, **err_ratio(entry, co_path, *shape, split)}],
    )
    return {"err_ratio": row["err_ratio"], "fault": row["fault"]}
