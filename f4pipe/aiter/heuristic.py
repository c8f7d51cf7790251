"""Tile selection: which manifest kernel (and split) aiter would pick for a shape.

A port of the logic of aiter HEAD's get_heuristic_kernel (docs/reference/aiter.md, "Tile
heuristic"), not of the 0.1.7 wheel's older C++ (which always preshuffles and has no efficiency
update). For each candidate kernel and split it counts workgroups
tg = ceil(M/tM) * ceil(N/tN) * split and rounds = ceil(tg / num_cu); a candidate replaces the
current choice when it needs fewer rounds, or the same rounds with fewer idle CUs or a better
compute-to-memory ratio tM*tN/(tM+tN) (an integer division in aiter: kept, because it decides
ties). aiter walks an unordered_map; we walk the
manifest in file order, so the choice is stable.

Unlike aiter, kernels that f4pipe.aiter.shaperules marks unsafe at the shape (an N, M or K edge
their
epilogue does not handle) are never candidates unless the caller allows them (allow_unsafe,
e.g. when it pads the buffers or asks for an unsafe run on purpose).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from f4pipe.aiter.manifest import KernelEntry
from f4pipe.aiter.shaperules import check_shape, k_tail, short_name, violations
from f4pipe.arch.gfx950 import NUM_CU
from f4pipe.core.errors import ShapeError

#: Split counts tried for splitK kernels when the caller asks the heuristic (log2 = -1).
AUTO_SPLITS = (2, 4, 8, 16)


@dataclass(frozen=True)
class Choice:
    """The heuristic's pick: a kernel and the log2 of its K split (0 = no split)."""

    entry: KernelEntry
    log2_k_split: int
    rounds: int
    idle_cu: int


def _splits(entry: KernelEntry, log2_k_split: int, k: int | None) -> tuple[int, ...]:
    """The split counts to weigh; a K with a tail (K % 256 != 0) is not split automatically
    (f4pipe.aiter.shaperules.check_shape: such splits are not examined)."""
    if not entry.splitk:
        return (1,)
    if log2_k_split >= 0:
        return (1 << log2_k_split,)
    return (1,) if k is not None and k_tail(k) else AUTO_SPLITS


def _efficiency(entry: KernelEntry) -> int:
    return entry.tile_m * entry.tile_n // (entry.tile_m + entry.tile_n)


def select_kernel(
    entries: Iterable[KernelEntry],
    m: int,
    n: int,
    *,
    k: int | None = None,
    bpreshuffle: bool = True,
    log2_k_split: int = 0,
    num_cu: int = NUM_CU,
    allow_unsafe: bool = False,
) -> Choice:
    """Pick a kernel for an M x N output (x K: the safety rules of one kernel depend on it;
    None checks them as for the smallest K).

    log2_k_split >= 0 asks for that split (> 0 admits only splitK kernels); -1 lets splitK
    kernels try 2/4/8/16 (non-splitK kernels stay candidates with split 1). Kernels unsafe at
    the shape are skipped unless allow_unsafe. Raises ShapeError for a shape no kernel
    accepts (f4pipe.aiter.shaperules.check_shape, the words every entry point uses) and when
    no kernel qualifies, naming the rules that excluded the others.
    """
    check_shape(m, n, k, log2_k_split, auto_split=True)
    if num_cu < 1:
        raise ShapeError(f"select_kernel needs num_cu >= 1, got num_cu={num_cu}")
    need_splitk = log2_k_split > 0
    best: Choice | None = None
    best_efficiency = 1
    unsafe: list[str] = []
    for entry in entries:
        if entry.bpreshuffle != bpreshuffle or (need_splitk and not entry.splitk):
            continue
        if (entry.tile_m, entry.tile_n) == (128, 512) and n % 512:
            continue  # aiter: this tile may not support N % 512 != 0
        # The K tail (K % 256 != 0) reads the same padding whichever tile runs: it is judged
        # at launch with the operands' real padding, so tiles are weighed without it.
        found = [] if allow_unsafe else violations(entry, m, n, k, scale_pad="zeros")
        if found:
            unsafe.append(f"{short_name(entry.name)} ({'; '.join(v.message for v in found)})")
            continue
        efficiency = _efficiency(entry)
        tiles = -(-m // entry.tile_m) * -(-n // entry.tile_n)
        for split in _splits(entry, log2_k_split, k):
            tg = tiles * split
            rounds = -(-tg // num_cu)
            idle = rounds * num_cu - tg
            better = best is None or rounds < best.rounds
            same_round = best is not None and rounds == best.rounds
            if better or (same_round and (idle < best.idle_cu or efficiency > best_efficiency)):
                best = Choice(entry, split.bit_length() - 1, rounds, idle)
                best_efficiency = efficiency
    if best is None:
        kind = "BpreShuffle" if bpreshuffle else "noBpreShuffle"
        split = " splitK-capable" if need_splitk else ""
        why = ""
        if unsafe:
            why = (
                "; unsafe at this shape by f4pipe.aiter.shaperules's edge rules (the shape-edge "
                f"safety table): {', '.join(unsafe)}; pad the output (f4pipe gemm --pad-output) "
                "or override (--unsafe)"
            )
        raise ShapeError(
            f"no{split} {kind} kernel in the manifest for M={m} N={n} "
            f"(log2_k_split={log2_k_split}){why}"
        )
    return best
