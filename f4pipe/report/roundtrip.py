"""The report's round-trip section: every architecture's code objects, gfx950's first.

aiter ships f4gemm for gfx950 and, in its git tree since 2026-06, for gfx1250. Both are
disassembled, reassembled and proven equivalent; only gfx950's go on to the emulator, splitK,
safety, timing and the audit. The section says both: one verdict per architecture, one table
with an `arch` column when there is more than one, and for the others a line naming the stages
that are gfx950's and why.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from f4pipe.arch.gfx950 import ARCH
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.pipeline.stages import GFX950_ONLY_REASON
from f4pipe.report.render import KERNEL_PREFIX, Section, in_kernel_order, short_kernel

#: The equivalence checks of a round-trip row, each a column of the table (`_ok` dropped).
CHECKS = ["header_ok", "descriptor_ok", "text_disasm_ok", "notes_ok", "symbols_ok", "sections_ok"]
#: What the report lists for another architecture's objects instead of running them.
GFX950_STAGES = "emulator verify, splitK, shape-edge safety, throughput and the tuned-table audit"


def roundtrip_tables(rs: ResultSet) -> dict[str, pd.DataFrame]:
    """Each architecture's round-trip rows that the set holds, gfx950's first."""
    tables = {ARCH: rs.table("roundtrip")}
    tables |= {arch: t.get("roundtrip") for arch, t in rs.arch_tables.items()}
    return {arch: df for arch, df in tables.items() if df is not None and len(df)}


def arch_verdict(df: pd.DataFrame) -> str:
    n_eq = int(df["equivalent"].sum())
    return (
        f"{n_eq} of {len(df)} code objects equivalent; "
        f"{int(df['text_bytes_differing'].sum())} .text bytes differ, "
        f"{int(df['text_bytes_explained'].sum())} explained, "
        f"{int(df['text_bytes_unexplained'].sum())} unexplained"
    )


def roundtrip_headline(tables: dict[str, pd.DataFrame], hazards: int) -> str:
    """'35 of 35 equivalent, 0 unexplained bytes' (per architecture when there are several),
    the static timing findings instead of the bytes when there are any: the verdict's counts."""
    counts = [f"{int(df['equivalent'].sum())} of {len(df)}" for df in tables.values()]
    if len(tables) > 1:
        counts = [f"{arch} {c}" for arch, c in zip(tables, counts, strict=True)]
    head = ", ".join(counts) + " equivalent"
    if hazards:
        return f"{head}, {hazards} timing findings"
    unexplained = {arch: int(df["text_bytes_unexplained"].sum()) for arch, df in tables.items()}
    if len(tables) == 1 or not any(unexplained.values()):
        return f"{head}, {max(unexplained.values())} unexplained bytes"
    return f"{head}; " + ", ".join(f"{a} {n} unexplained" for a, n in unexplained.items() if n)


def is_clean(df: pd.DataFrame) -> bool:
    return bool(df["equivalent"].all()) and int(df["text_bytes_unexplained"].sum()) == 0


def roundtrip_table(df: pd.DataFrame) -> pd.DataFrame:
    df = df.sort_values("kernel", key=in_kernel_order)
    return pd.DataFrame(
        {
            "kernel": df["kernel"].map(short_kernel),
            "equivalent": df["equivalent"],
            **{c.removesuffix("_ok"): df[c] for c in CHECKS},
            "bytes differing": df["text_bytes_differing"],
            "explained": df["text_bytes_explained"],
            "unexplained": df["text_bytes_unexplained"],
            "instructions": df["num_instructions"],
            "hazards": df["hazards"],
            "size": df["original_size"],
            "detail": df["detail"],
        }
    )


def roundtrip_section(rs: ResultSet, out_dir: Path | None) -> Section:
    sec = Section("roundtrip", "Round-trip: disassemble, reassemble, compare", "not run", "none")
    sec.headline = "not run"
    tables = roundtrip_tables(rs)
    if ARCH not in tables:
        sec.notes.append("roundtrip.parquet is missing: the round-trip stage has not run.")
        return sec
    sec.notes.append(f"kernel names drop the common prefix {KERNEL_PREFIX}")
    gfx950 = tables[ARCH]
    hazards = int(gfx950["hazards"].fillna(0).sum())
    findings = f"{hazards} static timing finding(s) in the rebuilt objects"
    if len(tables) == 1:
        sec.verdict = f"{arch_verdict(gfx950)}; {findings}"
    else:  # the timing analysis is gfx950's: its findings go with gfx950's verdict
        sec.verdict = "; ".join(
            f"{arch}: {arch_verdict(df)}" + (f", {findings}" if arch == ARCH else "")
            for arch, df in tables.items()
        )
    sec.headline = roundtrip_headline(tables, hazards)
    clean = all(is_clean(df) for df in tables.values())
    sec.state = "ok" if clean and not hazards else "bad"
    if len(tables) == 1:
        sec.table = roundtrip_table(gfx950).reset_index(drop=True)
        return sec
    others = ", ".join(arch for arch in tables if arch != ARCH)
    sec.notes.append(
        f"{others}: round trip only; {GFX950_STAGES} are gfx950 only: {GFX950_ONLY_REASON}"
    )
    parts = [roundtrip_table(df).assign(arch=arch) for arch, df in tables.items()]
    table = pd.concat(parts, ignore_index=True)
    sec.table = table[["arch", *[c for c in table.columns if c != "arch"]]]
    return sec
