"""Which kernel aiter really runs for an a4w4 GEMM shape: its tuned-table lookup, modelled.

aiter does not look a shape up verbatim. Read from its source (two versions, `RULES`):

- **Tables** (aiter/jit/core.py `get_config_file` / `update_config_files`): the main
  `a4w4_blockscale_tuned_gemm.csv` is used alone unless `model_configs/` holds files whose
  name contains `a4w4_blockscale_tuned_gemm`; then all are concatenated (main first) and
  duplicate keys resolved. The 0.1.7 wheel keeps the fastest row (lowest `us`) per
  (M, N, K), across cu_num; the 2026 code keys on (M, N, K, cu_num, gfx) and, on any
  duplicate, rewrites the source files to the fastest rows and raises, so nothing runs until
  the user re-runs.
- **Key** (aiter/ops/gemm_op_a4w4.py `get_GEMM_config`): the table, with exact copies
  dropped, becomes a dict keyed on (cu_num, M, N, K), or (gfx, cu_num, M, N, K) when the
  table has a gfx column (2026). A key left duplicated makes pandas refuse the dict
  (`DataFrame index must be unique`): the first a4w4 GEMM raises.
- **Padding** (csrc/py_itfs_cu/gemm_common.cu `getPaddedM`): M is tried exactly, then
  rounded up to 16 / 32 / 64 / 128 (M <= 256 / 1024 / 4096 / above: gl=0), then to the next
  power of two (8192 when M > 8192 and N > 4096: gl=1); the first key found wins.
- **Hit**: a kernelName without `_ZN` is a CK kernel (not one of these code objects); an asm
  name runs that .co with the row's splitK.
- **Miss**: the asm path with no name (csrc/py_itfs_cu/asm_gemm_a4w4.cu
  `get_heuristic_kernel`): among B-preshuffle kernels, the fewest rounds of workgroups over
  the device's CUs; ties are broken in the iteration order of a C++ unordered_map. The 0.1.7
  wheel admits only non-splitK kernels whose tile_N divides N and never updates its
  efficiency, so the last min-round kernel in map order wins; the 2026 code (ported in
  f4pipe.aiter.heuristic, which walks the manifest's order) breaks ties on idle CUs and tile
  efficiency, still in map order. Either way f4pipe cannot know the map's order:
  `candidates` lists every kernel that order could pick, and a shape is safe only if all of
  them are. No candidate: aiter raises "cannot get heuristic kernel".
- **Arch**: gfx942 raises ("not supported on gfx942"); the code objects are gfx950's.

Which version applies is read from the tables: a gfx column means the 2026 code. The part
table (`PARTS`) says which (gfx, cu_num) keys a real device reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from f4pipe.aiter.manifest import KernelEntry, Manifest
from f4pipe.aiter.shaperules import is_safe
from f4pipe.arch.gfx950 import ARCH, NUM_CU

#: How a lookup hits, in the order aiter tries: M itself, then padded by getPaddedM gl=0, gl=1.
LEVELS = ("exact", "padded (gl=0)", "padded (gl=1)", "heuristic")
CK_MARK = "_ZN"  # asm kernel names are mangled symbols; CK names are not


@dataclass(frozen=True)
class Part:
    name: str
    gfx: str
    cu_num: int
    source: str


#: Devices a tuned row's (gfx, cu_num) can match. cu_num is what hipDeviceProp reports.
PARTS: tuple[Part, ...] = (
    Part("MI355X", ARCH, NUM_CU, "AMD CDNA4 whitepaper: 256 CUs"),
    Part("MI350X", ARCH, NUM_CU, "AMD CDNA4 whitepaper: 256 CUs"),
    Part("MI325X", "gfx942", 304, "AMD Instinct MI325X data sheet: 304 CUs"),
    Part("MI300X", "gfx942", 304, "AMD CDNA3 whitepaper: 304 CUs"),
    Part("MI300A", "gfx942", 228, "AMD CDNA3 whitepaper: 228 CUs"),
    Part("MI308X", "gfx942", 80, "aiter jit/utils/chip_info.py: cu_num 80 is gfx942"),
)


@dataclass(frozen=True)
class AiterRules:
    """One version of aiter's lookup."""

    name: str
    source: str  # files and revision the rules were read from
    keyed_on_gfx: bool
    merge_refuses_duplicates: bool  # 2026: raise; 0.1.7: keep the fastest per (M, N, K)
    heuristic: str  # "wheel" | "2026"


WHEEL_0_1_7 = AiterRules(
    name="aiter 0.1.7 (wheel)",
    source="amd-aiter 0.1.7.post2.dev18: aiter/ops/gemm_op_a4w4.py, aiter/jit/core.py, "
    "aiter_meta/csrc/py_itfs_cu/gemm_common.cu, asm_gemm_a4w4.cu",
    keyed_on_gfx=False,
    merge_refuses_duplicates=False,
    heuristic="wheel",
)
AITER_2026 = AiterRules(
    name="aiter 2026 (gfx-keyed)",
    source="ROCm/aiter e4048607 (2026-08-22): aiter/ops/gemm_op_a4w4.py, aiter/jit/core.py, "
    "csrc/py_itfs_cu/gemm_common.cu, asm_gemm_a4w4.cu",
    keyed_on_gfx=True,
    merge_refuses_duplicates=True,
    heuristic="2026",
)
RULES = (WHEEL_0_1_7, AITER_2026)


def rules_for(tables: Mapping[str, pd.DataFrame]) -> AiterRules:
    """The version whose code reads these tables: a gfx column is the 2026 schema."""
    main = next(iter(tables.values()), None)
    return AITER_2026 if main is not None and "gfx" in main.columns else WHEEL_0_1_7


def padded_m(m: int, n: int, gl: int) -> int:
    """aiter's getPaddedM (K is an argument there and unused)."""
    if gl == 0:
        for limit, step in ((256, 16), (1024, 32), (4096, 64)):
            if m <= limit:
                return -(-m // step) * step
        return -(-m // 128) * 128
    if gl == 1:
        if m > 8192 and n > 4096:
            return 8192
        return 1 if m <= 1 else 1 << (m - 1).bit_length()
    return m


@dataclass(frozen=True)
class TableRow:
    table: str
    line: int
    gfx: str
    cu_num: int
    m: int
    n: int
    k: int
    kernel_name: str
    split_k: int
    us: float | None

    def where(self) -> str:
        return f"{self.table}:{self.line}"


@dataclass(frozen=True)
class Duplicate:
    """Rows that share one lookup key, and which one aiter keeps (None: it refuses)."""

    key: tuple
    rows: tuple[TableRow, ...]
    kept: TableRow | None
    consequence: str


@dataclass
class TunedIndex:
    """The merged table as aiter's dict holds it."""

    rules: AiterRules
    rows: dict[tuple, TableRow]
    duplicates: list[Duplicate] = field(default_factory=list)
    dropped: list[TableRow] = field(default_factory=list)  # lost to the merge
    error: str = ""  # why aiter would raise before any lookup ("" = it loads)

    def key(self, gfx: str, cu_num: int, m: int, n: int, k: int) -> tuple:
        return (gfx, cu_num, m, n, k) if self.rules.keyed_on_gfx else (cu_num, m, n, k)


def _rows(name: str, df: pd.DataFrame) -> list[TableRow]:
    gfx = df["gfx"].astype(str).str.strip() if "gfx" in df.columns else None
    us = df["us"] if "us" in df.columns else None
    out = []
    for i, r in enumerate(df.itertuples(index=False)):
        d = r._asdict()
        out.append(
            TableRow(
                table=name,
                line=int(d.get("line", i + 2)),
                gfx=gfx.iloc[i] if gfx is not None else "",
                cu_num=int(d["cu_num"]),
                m=int(d["M"]),
                n=int(d["N"]),
                k=int(d["K"]),
                kernel_name=str(d["kernelName"]).strip(),
                split_k=int(d["splitK"]),
                us=float(us.iloc[i]) if us is not None and pd.notna(us.iloc[i]) else None,
            )
        )
    return out


def _fastest(rows: Sequence[TableRow]) -> TableRow:
    return min(rows, key=lambda r: r.us if r.us is not None else float("inf"))


def _merge_key(rules: AiterRules, r: TableRow) -> tuple:
    if rules.merge_refuses_duplicates:
        return (r.m, r.n, r.k, r.cu_num, r.gfx)
    return (r.m, r.n, r.k)


def _content(r: TableRow) -> tuple:
    return (r.gfx, r.cu_num, r.m, r.n, r.k, r.kernel_name, r.split_k, r.us)


def build_index(tables: Mapping[str, pd.DataFrame], rules: AiterRules | None = None) -> TunedIndex:
    """aiter's dict from its tables ({name: f4pipe.aiter.tuned.read_tuned frame}, the main table
    first, then model_configs/ ones), with every duplicate and what aiter does with it."""
    rules = rules or rules_for(tables)
    per_table = [_rows(name, df) for name, df in tables.items()]
    rows = [r for t in per_table for r in t]
    index = TunedIndex(rules=rules, rows={})
    if len(per_table) > 1:
        rows = _merged(rules, rows, index)
    # get_GEMM_config: drop exact copies, then a dict on the lookup key
    seen: dict[tuple, TableRow] = {}
    groups: dict[tuple, list[TableRow]] = {}
    for r in rows:
        if _content(r) in seen:
            continue
        seen[_content(r)] = r
        groups.setdefault(index.key(r.gfx, r.cu_num, r.m, r.n, r.k), []).append(r)
    clashes = [(key, group) for key, group in groups.items() if len(group) > 1]
    for key, group in groups.items():
        index.rows[key] = group[0]
    for key, group in clashes:
        index.duplicates.append(
            Duplicate(
                key,
                tuple(group),
                None,
                "pandas refuses the dict (index must be unique): the first a4w4 GEMM raises",
            )
        )
    if clashes and not index.error:
        index.error = (
            f"{sum(len(g) for _, g in clashes)} rows share a lookup key: get_GEMM_config "
            "raises ValueError (DataFrame index must be unique)"
        )
    return index


def _merged(rules: AiterRules, rows: list[TableRow], index: TunedIndex) -> list[TableRow]:
    """update_config_files: concatenation, then the version's rule for duplicate keys."""
    groups: dict[tuple, list[TableRow]] = {}
    for r in rows:
        groups.setdefault(_merge_key(rules, r), []).append(r)
    keep: set[int] = set()
    for key, group in groups.items():
        best = _fastest(group)
        keep.add(id(best))
        if len(group) == 1:
            continue
        if rules.merge_refuses_duplicates:
            consequence = (
                "update_config_files rewrites the source files to the fastest row and "
                "raises: no a4w4 GEMM runs until the process is restarted"
            )
        else:
            consequence = "the merge keeps the fastest row (lowest us), whatever its cu_num"
        index.duplicates.append(Duplicate(key, tuple(group), best, consequence))
        index.dropped += [r for r in group if r is not best]
    if rules.merge_refuses_duplicates and index.duplicates:
        index.error = (
            f"{len(index.duplicates)} key(s) duplicated across the merged tables: "
            "update_config_files raises RuntimeError"
        )
    return [r for r in rows if id(r) in keep]


@dataclass(frozen=True)
class Resolution:
    """What aiter does for one (M, N, K) on one device."""

    m: int
    n: int
    k: int
    cu_num: int
    gfx: str
    outcome: str  # hit | miss | error
    how: str  # exact | padded (gl=0) | padded (gl=1) | heuristic | why it raises
    padded_m: int | None = None
    row: TableRow | None = None
    kernel: str = ""  # the .co name (asm), the CK name, or "" (undetermined / none)
    log2_k_split: int = 0
    candidates: tuple[str, ...] = ()  # every kernel the heuristic's map order could pick
    safe: bool | None = None  # None: a CK kernel, or nothing runs; False if any may be unsafe
    unsafe: tuple[str, ...] = ()  # the candidates unsafe at the shape

    @property
    def runs(self) -> str:
        if self.kernel:
            return self.kernel
        if self.candidates:
            return "one of " + ", ".join(self.candidates)
        return ""


def lookup(
    index: TunedIndex,
    manifest: Manifest,
    m: int,
    n: int,
    k: int,
    *,
    cu_num: int = 256,
    gfx: str = ARCH,
) -> Resolution:
    """The row aiter hits for M x N x K on a (gfx, cu_num) device, or its fallback."""
    base = {"m": m, "n": n, "k": k, "cu_num": cu_num, "gfx": gfx}
    if gfx == "gfx942":
        return Resolution(**base, outcome="error", how="gemm_a4w4 raises: not supported on gfx942")
    if gfx != ARCH:
        return Resolution(**base, outcome="error", how=f"no f4gemm code objects for {gfx}")
    if index.error:
        return Resolution(**base, outcome="error", how=index.error)
    for how, gl in zip(LEVELS, (None, 0, 1), strict=False):
        pm = m if gl is None else padded_m(m, n, gl)
        row = index.rows.get(index.key(gfx, cu_num, pm, n, k))
        if row is not None:
            return _hit(base, how, pm, row, manifest)
    return _fallback(base, index.rules, manifest)


def _hit(base: dict, how: str, pm: int, row: TableRow, manifest: Manifest) -> Resolution:
    if CK_MARK not in row.kernel_name:
        return Resolution(
            **base, outcome="hit", how=how, padded_m=pm, row=row, kernel=row.kernel_name
        )
    entry = next((e for e in manifest if e.symbol == row.kernel_name), None)
    if entry is None:
        return Resolution(
            **base,
            outcome="error",
            how=f"asm kernel {row.kernel_name} is not in the manifest: aiter raises 'not find "
            "kernel'",
            padded_m=pm,
            row=row,
        )
    return Resolution(
        **base,
        outcome="hit",
        how=how,
        padded_m=pm,
        row=row,
        kernel=entry.name,
        log2_k_split=row.split_k,
        safe=is_safe(entry, base["m"], base["n"], base["k"]),
    )


def fallback_pool(rules: AiterRules, manifest: Manifest, n: int) -> list[KernelEntry]:
    """The kernels aiter's heuristic considers for N (before counting rounds)."""
    pool = [e for e in manifest if e.bpreshuffle]
    if rules.heuristic == "wheel":
        return [e for e in pool if not e.splitk and n % e.tile_n == 0]
    return [e for e in pool if (e.tile_m, e.tile_n) != (128, 512) or n % 512 == 0]


def _fallback(base: dict, rules: AiterRules, manifest: Manifest) -> Resolution:
    m, n, k, cu_num = base["m"], base["n"], base["k"], base["cu_num"]
    candidates = min_round_kernels(fallback_pool(rules, manifest, n), m, n, cu_num)
    if not candidates:
        return Resolution(
            **base,
            outcome="error",
            how="heuristic finds no kernel: aiter raises 'cannot get heuristic kernel'",
        )
    unsafe = tuple(e.name for e in candidates if not is_safe(e, m, n, k))
    return Resolution(
        **base,
        outcome="miss",
        how="heuristic",
        kernel=candidates[0].name if len(candidates) == 1 else "",
        candidates=tuple(e.name for e in candidates),
        safe=not unsafe,
        unsafe=unsafe,
    )


def min_round_kernels(
    entries: Iterable[KernelEntry], m: int, n: int, cu_num: int
) -> list[KernelEntry]:
    """The kernels with the fewest rounds of workgroups (split 1): the heuristic's final
    choice is always one of them, whichever order aiter's map walks."""
    entries = list(entries)
    rounds = {e.name: -(-(-(-m // e.tile_m) * -(-n // e.tile_n)) // cu_num) for e in entries}
    if not rounds:
        return []
    best = min(rounds.values())
    return [e for e in entries if rounds[e.name] == best]


def part_names(gfx: str, cu_num: int) -> list[str]:
    """The parts a key matches (gfx "" matches any arch: the cu_num-only schema)."""
    return [p.name for p in PARTS if p.cu_num == cu_num and (not gfx or p.gfx == gfx)]


#: The M values a row's catchment is counted over (aiter's tables go to M = 60,000).
CATCHMENT_M = 65536


def padded_m_array(m: np.ndarray, n: int, gl: int) -> np.ndarray:
    """padded_m over an array of M (the same rules, vectorised)."""
    if gl == 0:
        step = np.select([m <= 256, m <= 1024, m <= 4096], [16, 32, 64], 128)
        return -(-m // step) * step
    pow2 = np.left_shift(1, np.ceil(np.log2(np.maximum(m, 1))).astype(np.int64))
    return np.where((m > 8192) & (n > 4096), 8192, pow2)


def catchment(index: TunedIndex) -> dict[tuple, int]:
    """Per key of the index: how many M in 1..CATCHMENT_M reach that row (its own M exactly,
    others through padding when their own M has no row). A row reached only by its own M
    serves one batch size."""
    ms = np.arange(1, CATCHMENT_M + 1, dtype=np.int64)
    counts: dict[tuple, int] = dict.fromkeys(index.rows, 0)
    groups: dict[tuple, list[int]] = {}
    for key in index.rows:
        *device, m, n, k = key
        groups.setdefault((*device, n, k), []).append(m)
    for (*device, n, k), tuned in groups.items():
        have = np.zeros(CATCHMENT_M + 1, dtype=bool)
        have[[m for m in tuned if m <= CATCHMENT_M]] = True
        target = np.where(have[ms], ms, 0)
        for gl in (0, 1):
            padded = padded_m_array(ms, n, gl)  # <= CATCHMENT_M for every M in range
            target = np.where((target == 0) & have[padded], padded, target)
        reached, count = np.unique(target[target > 0], return_counts=True)
        for m, c in zip(reached.tolist(), count.tolist(), strict=True):
            counts[(*device, m, n, k)] += c
    return counts


@dataclass(frozen=True)
class KeyFinding:
    """A tuned row that cannot serve as its author meant, with the command that shows it."""

    kind: str  # duplicate | lost-in-merge | no-part | unsupported-arch | exact-only
    row: TableRow
    detail: str
    reproducer: str


def _reproducer(row: TableRow, *extra_m: int) -> str:
    shapes = " ".join(f"--shape {m},{row.n},{row.k}" for m in (row.m, *extra_m))
    gfx = f" --gfx {row.gfx}" if row.gfx else ""
    return f"f4pipe audit-tuned {shapes} --cu-num {row.cu_num}{gfx}"


def key_findings(index: TunedIndex) -> list[KeyFinding]:
    """Rows no device can hit as written: duplicated or merged-away keys, keys of no part (or
    of a part where a4w4 raises), and rows that only their own M reaches."""
    out: list[KeyFinding] = []
    for d in index.duplicates:
        for r in d.rows:
            if d.kept is not None and r is d.kept:
                continue
            kept = f"; kept: {d.kept.where()}" if d.kept is not None else ""
            out.append(KeyFinding("duplicate", r, f"{d.consequence}{kept}", _reproducer(r)))
    counts = catchment(index)
    for key, r in index.rows.items():
        parts = part_names(r.gfx, r.cu_num)
        if not parts:
            out.append(
                KeyFinding(
                    "no-part",
                    r,
                    f"no {r.gfx or 'AMD'} part reports cu_num {r.cu_num} (known: "
                    + ", ".join(f"{p.name} {p.gfx}/{p.cu_num}" for p in PARTS)
                    + ")",
                    _reproducer(r),
                )
            )
        elif all(p.gfx == "gfx942" for p in PARTS if p.name in parts):
            out.append(
                KeyFinding(
                    "unsupported-arch",
                    r,
                    f"cu_num {r.cu_num} is {', '.join(parts)} (gfx942), where gemm_a4w4 raises",
                    _reproducer(r),
                )
            )
        if counts.get(key, 0) == 1 and 1 < r.m < CATCHMENT_M:  # nothing pads to 1, by design
            below = r.m - 1
            out.append(
                KeyFinding(
                    "exact-only",
                    r,
                    f"only M={r.m} itself reaches this row: no other M pads to {r.m} "
                    f"(M={below} pads to {padded_m(below, r.n, 0)} first)",
                    _reproducer(r, below),
                )
            )
    return out


def distinct_ms(m_lo: int, m_hi: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The M values aiter's lookup distinguishes in [m_lo, m_hi] when a table holds a row at
    every getPaddedM gl=0 value (16-row steps up to 256, 32 to 1024, 64 to 4096, 128 above):
    each M pads to one of them at gl=0, before gl=1 is tried, so a row per value serves every
    M. Returns (the row Ms, the smallest M each serves, from 1 up: what its kernel must be
    safe at too)."""
    ms = np.arange(1, m_hi + 1, dtype=np.int64)
    padded = padded_m_array(ms, n, 0)
    keys, first = np.unique(padded, return_index=True)
    wanted = keys >= padded[m_lo - 1]
    return keys[wanted], ms[first][wanted]
