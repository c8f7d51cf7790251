"""The default GEMM test matrices, as data, selectable by name.

A Case names a shape and split and which kernel(s) run it: None = the tile heuristic's choice,
"*" = every manifest kernel, "splitk" = every splitK-capable kernel, else one kernel name.
"seed" is the seed driver's run_tests.sh (51 checks; 50 distinct runs on a 256-CU part, as its
heuristic pick at M=300 N=2048 K=1024 is also among every kernel's there, and a stage runs each
once: f4pipe.pipeline.stages.plan_runs), the verify default of `snakemake --cores
1 all`; "throughput" the seed README's hardware table; "pipeline" the seed's every-kernel check
plus the seed's heuristic shapes that stay small (M edges 1, 17 and 300 among them), without
the two largest shapes and splitK; "smoke" small shapes for tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from f4pipe.aiter.manifest import KernelEntry, Manifest
from f4pipe.core.errors import ConfigError, ShapeError
from f4pipe.core.layout import SEED_SPLITK_SHAPE

ALL_KERNELS = "*"
SPLITK_KERNELS = "splitk"


@dataclass(frozen=True)
class Case:
    m: int
    n: int
    k: int
    log2_k_split: int = 0
    kernel: str | None = None  # None: heuristic; "*": all; "splitk": splitK-capable; or a name

    def label(self) -> str:
        return f"M={self.m} N={self.n} K={self.k} log2_k_split={self.log2_k_split}"


SEED_HEURISTIC = tuple(
    Case(m, n, k)
    for m, n, k in [
        (128, 1024, 1024),
        (256, 2048, 2048),
        (300, 2048, 1024),
        (1, 4096, 2048),
        (17, 512, 256),
        (512, 1024, 2048),
        (2048, 8192, 1024),
        (4096, 4096, 512),
    ]
)
SEED_ALL_KERNELS = (Case(300, 2048, 1024, kernel=ALL_KERNELS),)
SEED_SPLITK = tuple(Case(*SEED_SPLITK_SHAPE, log2, SPLITK_KERNELS) for log2 in (1, 2, 3, 4))

MATRICES: dict[str, tuple[Case, ...]] = {
    "seed": SEED_HEURISTIC + SEED_ALL_KERNELS + SEED_SPLITK,
    "heuristic": SEED_HEURISTIC,
    "all-kernels": SEED_ALL_KERNELS,
    "splitk": tuple(Case(*SEED_SPLITK_SHAPE, log2, SPLITK_KERNELS) for log2 in range(5)),
    "throughput": tuple(
        Case(m, n, k)
        for m, n, k in [
            (8192, 8192, 8192),
            (2048, 8192, 8192),
            (4096, 4096, 4096),
            (128, 16384, 16384),
        ]
    ),
    "pipeline": SEED_ALL_KERNELS
    + tuple(c for c in SEED_HEURISTIC if c.m * c.n * c.k <= 2048 * 2048 * 1024),
    "smoke": (Case(32, 256, 512, kernel=ALL_KERNELS),),
    "smoke-splitk": tuple(Case(32, 256, 1024, log2, SPLITK_KERNELS) for log2 in range(3)),
}


#: Each GEMM stage's matrix when none is named: `f4pipe <stage>`'s default, and config.yaml's
#: (tests/test_layout.py holds the two equal).
STAGE_DEFAULT_MATRIX: dict[str, str] = {"verify": "seed", "splitk": "splitk", "bench": "throughput"}


def get_matrix(name: str) -> tuple[Case, ...]:
    try:
        return MATRICES[name]
    except KeyError:
        raise ConfigError(f"unknown matrix {name!r}; choose one of {', '.join(MATRICES)}") from None


def kernels_that_may_run(cases: tuple[Case, ...], manifest: Manifest) -> list[str]:
    """Names of the kernels a stage over `cases` may run, so the workflow spawns no job that
    has nothing to do (the splitk matrix runs only the splitK kernels). A heuristic case may
    pick any kernel, and its pick depends on the device's CU count, unknown when the DAG is
    built: with one, every kernel."""
    if any(c.kernel is None for c in cases):
        return [e.name for e in manifest]
    named = {c.kernel for c in cases}
    return [
        e.name
        for e in manifest
        if ALL_KERNELS in named
        or (SPLITK_KERNELS in named and e.splitk)
        or any(e.matches(str(n)) for n in named)
    ]


def parse_case(text: str) -> Case:
    """'M,N,K' or 'M,N,K,L' (L = log2_k_split) -> a heuristic-kernel Case."""
    try:
        parts = [int(p) for p in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) not in (3, 4):
        raise ConfigError(f"shape {text!r} is not M,N,K or M,N,K,LOG2_K_SPLIT")
    return Case(*parts)


def expand_case(case: Case, manifest: Manifest, resolve_heuristic) -> list[tuple[KernelEntry, int]]:
    """The (kernel, log2_k_split) runs of a case; `resolve_heuristic(case)` picks for None."""
    if case.kernel is None:
        return [resolve_heuristic(case)]
    if case.kernel == ALL_KERNELS:
        return [
            (e, case.log2_k_split if e.splitk else 0)
            for e in manifest
            if e.splitk or case.log2_k_split == 0
        ]
    if case.kernel == SPLITK_KERNELS:
        return [(e, case.log2_k_split) for e in manifest if e.splitk]
    entry = manifest.get(case.kernel)
    if case.log2_k_split > 0 and not entry.splitk:
        raise ShapeError(f"{entry.name} cannot split K ({case.label()})")
    return [(entry, case.log2_k_split)]
