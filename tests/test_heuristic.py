"""The tile heuristic on the real manifest: shapes whose choice follows from the rules by hand,
the seed's eight heuristic shapes, splitK = -1, and the filters."""

from __future__ import annotations

import math

import pytest

from f4pipe.aiter.heuristic import select_kernel
from f4pipe.aiter.manifest import read_manifest
from f4pipe.arch.gfx950 import NUM_CU
from f4pipe.core.errors import ShapeError
from f4pipe.host.matrices import SEED_HEURISTIC

# The seed's run_tests.sh heuristic shapes, from the one place they are defined.
SEED_HEURISTIC_SHAPES = [(c.m, c.n, c.k) for c in SEED_HEURISTIC]


@pytest.fixture(scope="module")
def manifest(f4gemm_dir):
    return read_manifest(f4gemm_dir, check_files=False)


def rounds_of(entry, m, n, split=1, num_cu=NUM_CU):
    return math.ceil(math.ceil(m / entry.tile_m) * math.ceil(n / entry.tile_n) * split / num_cu)


@pytest.mark.parametrize(
    ("m", "n", "name"),
    [
        # The seed README's hardware table (num_cu 256, no split).
        (8192, 8192, "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"),
        (2048, 8192, "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"),
        (4096, 4096, "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"),
        (128, 16384, "f4gemm_bf16_per1x32Fp4_BpreShuffle_96x640"),
    ],
)
def test_seed_readme_choices(manifest, m, n, name):
    assert select_kernel(manifest, m, n).entry.name == name


@pytest.mark.parametrize(("m", "n", "k"), SEED_HEURISTIC_SHAPES)
def test_seed_heuristic_shapes(manifest, m, n, k):
    choice = select_kernel(manifest, m, n)
    assert choice.entry.bpreshuffle and choice.log2_k_split == 0
    # Nothing qualifying needs fewer rounds.
    qualifying = [
        e
        for e in manifest
        if e.bpreshuffle and not ((e.tile_m, e.tile_n) == (128, 512) and n % 512)
    ]
    assert choice.rounds == min(rounds_of(e, m, n) for e in qualifying)
    assert choice.rounds == rounds_of(choice.entry, m, n)
    if n % 512:
        assert (choice.entry.tile_m, choice.entry.tile_n) != (128, 512)


def test_full_wave_with_best_ratio_cannot_be_displaced(manifest):
    # 2048 x 8192 with 256x256: 256 workgroups = one full round, no idle CU, and the best
    # tM*tN/(tM+tN) of all tiles: every later candidate must lose.
    choice = select_kernel(manifest, 2048, 8192)
    assert (choice.entry.tile_m, choice.entry.tile_n, choice.idle_cu) == (256, 256, 0)


def test_splitk_auto_prefers_the_split_filling_most_cus(manifest):
    # M=128 N=1024: 256x256 x split 16 = 64 workgroups (idle 192); no unsplit tile reaches
    # more than 32 workgroups, and no tile has a better ratio than 256x256.
    choice = select_kernel(manifest, 128, 1024, log2_k_split=-1)
    assert choice.entry.name.endswith("BpreShuffle_256x256")
    assert (choice.log2_k_split, choice.rounds, choice.idle_cu) == (4, 1, 192)


@pytest.mark.parametrize(("m", "n", "k"), SEED_HEURISTIC_SHAPES)
def test_splitk_auto_never_runs_a_splitk_kernel_unsplit(manifest, m, n, k):
    choice = select_kernel(manifest, m, n, log2_k_split=-1)
    if choice.entry.splitk:
        assert 1 <= choice.log2_k_split <= 4
    else:
        assert choice.log2_k_split == 0


def test_explicit_split_admits_only_splitk_kernels(manifest):
    for log2 in (1, 2, 3, 4):
        choice = select_kernel(manifest, 256, 1024, log2_k_split=log2)
        assert choice.entry.splitk and choice.log2_k_split == log2


def test_nobpreshuffle_and_128x512_rule(manifest):
    assert select_kernel(manifest, 512, 1024, k=512, bpreshuffle=False).entry.name.endswith(
        "noBpreShuffle_256x256"
    )
    only_128x512 = [e for e in manifest if (e.tile_m, e.tile_n) == (128, 512)]
    assert select_kernel(only_128x512, 128, 1024).entry.tile_n == 512
    with pytest.raises(ShapeError, match="no BpreShuffle kernel"):
        select_kernel(only_128x512, 128, 1040)
    with pytest.raises(ShapeError, match="splitK-capable noBpreShuffle"):
        select_kernel(manifest, 128, 1024, bpreshuffle=False, log2_k_split=1)


def test_num_cu_changes_the_rounds(manifest):
    assert select_kernel(manifest, 4096, 4096, num_cu=128).rounds == 2
