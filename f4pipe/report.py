"""The report of one artifact set: results/<aiter_id>/report/{index.html, summary.md, *.png}.

One page answers "are the rebuilt kernels the originals?": the round-trip verdict per code
object, the verification matrix (original and rebuilt side by side), splitK error against the
seed's MI355X numbers, and throughput when gfx950 hardware measured it. A stage that did not run,
or ran without a device, is shown as such ("not run", "not measured: no gfx950 device"): the
report draws only numbers that a stage recorded, never a placeholder value.

`ResultSet` (reading a result-set directory, schema-checked) also serves f4pipe.archive and
f4pipe.compare. The HTML has no script and no external resource except the PNG plots beside it,
so it opens from a file, an archive or a Snakemake report alike.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from f4pipe import __version__
from f4pipe.audit import format_finding
from f4pipe.errors import InputError
from f4pipe.fsio import atomic_dir, read_json_file, sha256_file
from f4pipe.safety import EDGE_CLASSES
from f4pipe.schemas import (
    ADDED_COLUMNS,
    AUDIT,
    BENCH,
    KERNELS,
    ROUNDTRIP,
    SAFETY,
    SPLITK,
    VERIFY,
    read_table,
)

# --- the result-set layout (decided with the Snakefile) ----------------------------------------

TABLE_FILES = {
    "kernels": ("kernels.parquet", KERNELS),
    "roundtrip": ("roundtrip.parquet", ROUNDTRIP),
    "verify": ("verify.parquet", VERIFY),
    "splitk": ("splitk.parquet", SPLITK),
    "bench": ("bench.parquet", BENCH),
    "safety": ("safety.parquet", SAFETY),
    "audit": ("audit.parquet", AUDIT),
}
TOOLCHAIN_JSON = "toolchain.json"
REPORT_DIR = "report"
ROUNDTRIP_DIR = "roundtrip"
NO_DEVICE = "none"  # device_id of rows that no device produced (kernels, roundtrip)
GEMM_TABLES = ("verify", "splitk", "bench")
RUN_KEY = ["variant", "kernel", "m", "n", "k", "log2_k_split"]  # one GEMM run in a table
VARIANTS = ("original", "rebuilt")

# --- reference numbers (seed README, measured on an MI355X; the only place they live) ---------

SEED_SPLITK_SHAPE = (256, 1024, 4096)  # M, N, K
#: log2_k_split -> max abs err / max|ref|, in percent.
SEED_SPLITK_ERR_PCT = {0: 0.28, 1: 0.51, 2: 0.62, 3: 0.81, 4: 1.15}
NOT_MEASURED = "not measured: no gfx950 device"
KERNEL_PREFIX = "f4gemm_bf16_per1x32Fp4_"  # common to every f4gemm name; tables drop it


# ---------------------------------------------------------------------------------------------
# Reading a result set


@dataclass
class ResultSet:
    """The tables and files of one results/<aiter_id>/ directory; a missing table is None."""

    directory: Path
    tables: dict[str, pd.DataFrame | None]
    toolchain: dict[str, Any] | None

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> ResultSet:
        directory = Path(directory)
        if not directory.is_dir():
            raise InputError(f"{directory}: not a result-set directory (results/<aiter_id>/)")
        tables: dict[str, pd.DataFrame | None] = {}
        for name, (file_name, schema) in TABLE_FILES.items():
            path = directory / file_name
            tables[name] = (
                read_table(path, schema, ADDED_COLUMNS.get(name, ())).to_pandas()
                if path.is_file()
                else None
            )
        if tables["kernels"] is None and tables["roundtrip"] is None:
            raise InputError(
                f"{directory}: has neither kernels.parquet nor roundtrip.parquet; "
                "point at a results/<aiter_id>/ directory the pipeline wrote"
            )
        tc_path = directory / TOOLCHAIN_JSON
        toolchain = read_json_file(tc_path, "toolchain.json") if tc_path.is_file() else None
        if toolchain is not None and not isinstance(toolchain, dict):
            raise InputError(f"{tc_path}: not a toolchain.json (a JSON object)")
        return cls(directory=directory, tables=tables, toolchain=toolchain)

    def table(self, name: str) -> pd.DataFrame | None:
        return self.tables[name]

    def _distinct(self, column: str, names: Iterable[str]) -> list[str]:
        values: set[str] = set()
        for name in names:
            df = self.tables[name]
            if df is not None and len(df):
                values.update(df[column].astype(str))
        return sorted(values)

    def _single(self, column: str, names: Sequence[str], fallback: str | None) -> str:
        values = self._distinct(column, names)
        if len(values) > 1:
            raise InputError(
                f"{self.directory}: rows of several {column}s {values}; an artifact set has one"
            )
        if values:
            return values[0]
        if fallback is None:
            raise InputError(f"{self.directory}: no row names its {column}")
        return fallback

    @property
    def aiter_id(self) -> str:
        return self._single("aiter_id", list(TABLE_FILES), self.directory.name)

    @property
    def toolchain_id(self) -> str:
        fallback = self.toolchain.get("toolchain_id") if self.toolchain else None
        return self._single("toolchain_id", ["kernels", "roundtrip"], fallback)

    @property
    def device_id(self) -> str:
        """The device the GEMM stages ran on; several (unusual) are joined with '+'."""
        devices = [d for d in self._distinct("device_id", GEMM_TABLES) if d != NO_DEVICE]
        return "+".join(devices) if devices else NO_DEVICE

    @property
    def f4pipe_versions(self) -> list[str]:
        return self._distinct("f4pipe_version", list(TABLE_FILES))

    def files(self) -> list[Path]:
        """Every regular file of the set (relative, sorted), hidden files excluded."""
        out = []
        for path in sorted(self.directory.rglob("*")):
            rel = path.relative_to(self.directory)
            if any(part.startswith(".") for part in rel.parts) or not path.is_file():
                continue
            out.append(rel)
        return out


def find_aiter_provenance(result_dir: Path, aiter_id: str) -> Path | None:
    """resources/aiter/<aiter_id>/provenance.json of the workflow that wrote results/<aiter_id>."""
    for root in (result_dir.parent.parent, Path.cwd()):
        path = root / "resources" / "aiter" / aiter_id / "provenance.json"
        if path.is_file():
            return path
    return None


def config_hash(config: Path | None) -> str:
    return sha256_file(config) if config is not None else "not given"


def build_date() -> str:
    """UTC now, or SOURCE_DATE_EPOCH when set (reproducible builds' convention)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    moment = datetime.fromtimestamp(int(epoch), UTC) if epoch else datetime.now(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


# ---------------------------------------------------------------------------------------------
# Section data (shared by HTML and markdown)


@dataclass
class Section:
    """One report section: a verdict line, a table (or none) and a plot (or none)."""

    key: str
    title: str
    verdict: str
    state: str  # ok | bad | none (not run / not measured) | info
    table: pd.DataFrame | None = None
    plot: str | None = None  # PNG file name beside index.html
    notes: list[str] = field(default_factory=list)
    code: dict[str, list[str]] = field(default_factory=dict)  # title -> preformatted lines


def short_kernel(kernel: str) -> str:
    return kernel.removeprefix(KERNEL_PREFIX)


def shape_label(row: pd.Series | dict[str, Any]) -> str:
    return f"{row['m']}x{row['n']}x{row['k']}" + (
        f" /{1 << int(row['log2_k_split'])}" if int(row["log2_k_split"]) else ""
    )


def fmt_value(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))  # integer columns that a merge turned into floats
        return f"{value:.{digits}g}"
    return str(value)


def roundtrip_section(rs: ResultSet) -> Section:
    df = rs.table("roundtrip")
    sec = Section("roundtrip", "Round-trip: disassemble, reassemble, compare", "not run", "none")
    if df is None or not len(df):
        sec.notes.append("roundtrip.parquet is missing: the round-trip stage has not run.")
        return sec
    df = df.sort_values("kernel")
    sec.notes.append(f"kernel names drop the common prefix {KERNEL_PREFIX}")
    n_eq = int(df["equivalent"].sum())
    unexplained = int(df["text_bytes_unexplained"].sum())
    sec.verdict = (
        f"{n_eq} of {len(df)} code objects equivalent; "
        f"{int(df['text_bytes_differing'].sum())} .text bytes differ, "
        f"{int(df['text_bytes_explained'].sum())} explained, {unexplained} unexplained"
    )
    hazards = int(df["hazards"].fillna(0).sum())
    sec.verdict += f"; {hazards} static timing finding(s) in the rebuilt objects"
    sec.state = "ok" if n_eq == len(df) and unexplained == 0 and not hazards else "bad"
    checks = ["header_ok", "descriptor_ok", "text_disasm_ok", "notes_ok", "symbols_ok"]
    checks.append("sections_ok")
    table = pd.DataFrame(
        {
            "kernel": df["kernel"].map(short_kernel),
            "equivalent": df["equivalent"],
            **{c.removesuffix("_ok"): df[c] for c in checks},
            "bytes differing": df["text_bytes_differing"],
            "explained": df["text_bytes_explained"],
            "unexplained": df["text_bytes_unexplained"],
            "instructions": df["num_instructions"],
            "hazards": df["hazards"],
            "size": df["original_size"],
            "detail": df["detail"],
        }
    )
    sec.table = table.reset_index(drop=True)
    return sec


def _gemm_rows(rs: ResultSet, name: str) -> pd.DataFrame | None:
    df = rs.table(name)
    return None if df is None or not len(df) else df


def _not_run(sec: Section, name: str, df: pd.DataFrame | None) -> bool:
    """Mark `sec` "not run" (no table) or "skipped" (no row ran); True if nothing to show."""
    if df is None:
        sec.verdict, sec.state = "not run", "none"
        sec.notes.append(f"{name}.parquet is missing: the {name} stage has not run.")
        return True
    ran = df[df["status"].isin(["passed", "failed"])]
    if not len(ran):
        errored = (df["status"] == "error").any()
        sec.verdict = f"no {name} run completed: {_status_counts(df)}"
        sec.state = "bad" if errored else "none"
        sec.notes.extend(f"reason: {r}" for r in sorted(set(df["reason"])))
        return True
    return False


def _status_counts(df: pd.DataFrame) -> str:
    counts = df["status"].value_counts().sort_index()
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def _side_by_side(df: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """One line per (kernel, shape): each variant's status and metrics in columns, then one
    reason column (what each variant's row says when it did not run through)."""
    key = ["kernel", "m", "n", "k", "log2_k_split"]
    variants = [v for v in VARIANTS if v in set(df["variant"])]
    variants += sorted(set(df["variant"]) - set(variants))
    merged: pd.DataFrame | None = None
    for variant in variants:
        part = df[df["variant"] == variant][[*key, "status", *metrics, "reason"]]
        part = part.drop_duplicates(key).rename(
            columns={c: f"{variant} {c}" for c in ["status", *metrics, "reason"]}
        )
        merged = part if merged is None else merged.merge(part, on=key, how="outer")
    assert merged is not None
    merged = merged.sort_values(["m", "n", "k", "log2_k_split", "kernel"]).reset_index(drop=True)
    merged.insert(1, "shape (MxNxK /split)", [shape_label(r) for _, r in merged.iterrows()])
    merged["kernel"] = merged["kernel"].map(short_kernel)
    reason_cols = [f"{v} reason" for v in variants]
    merged["reason"] = [
        "; ".join(f"{v}: {r[c]}" for v, c in zip(variants, reason_cols, strict=True) if r[c])
        for _, r in merged[reason_cols].fillna("").iterrows()
    ]
    return merged.drop(columns=["m", "n", "k", "log2_k_split", *reason_cols])


def _identical(df: pd.DataFrame, metrics: Sequence[str]) -> tuple[int, int]:
    """(runs whose original and rebuilt results are bit-identical, runs both variants ran)."""
    cols = [f"{v} {m}" for v in VARIANTS for m in ("status", *metrics)]
    if not all(c in df.columns for c in cols):
        return 0, 0
    ran = ["passed", "failed"]
    both = df[df["original status"].isin(ran) & df["rebuilt status"].isin(ran)]
    same = both[
        [
            all(
                fmt_value(row[f"original {m}"], 17) == fmt_value(row[f"rebuilt {m}"], 17)
                for m in ("status", *metrics)
            )
            for _, row in both.iterrows()
        ]
    ]
    return len(same), len(both)


VERIFY_METRICS = ("max_abs_err", "err_frac", "bad")


def verify_section(rs: ResultSet) -> Section:
    df = _gemm_rows(rs, "verify")
    sec = Section("verify", "Verification matrix: kernel x shape, original and rebuilt", "", "")
    if _not_run(sec, "verify", df):
        if df is not None:
            sec.table = _side_by_side(df, VERIFY_METRICS)
        return sec
    assert df is not None
    per_variant = "; ".join(
        f"{v}: {_status_counts(df[df['variant'] == v])}" for v in sorted(set(df["variant"]))
    )
    sec.table = _side_by_side(df, VERIFY_METRICS)
    same, both = _identical(sec.table, VERIFY_METRICS)
    sec.verdict = per_variant + (
        f"; rebuilt matches original in {same} of {both} runs both ran" if both else ""
    )
    if both:
        sec.notes.append(
            "Original and rebuilt matching on the emulator is expected, not independent "
            "evidence: the decoder reads the same instructions from both (the round trip's "
            "decoded-instruction identity; the differing bytes are don't-care bits). Only "
            "hardware runs of both variants test the rebuilt bytes beyond that."
        )
    hazards = df["hazards"].fillna(0).sum()
    if df["hazards"].notna().any():
        sec.notes.append(
            f"timing checked on the emulator (memory counters, LDS visibility, wait states): "
            f"{int(hazards)} hazard(s) in {int((df['hazards'].fillna(0) > 0).sum())} run(s)"
        )
    bad = df["status"].isin(["failed", "error", "hazard"]).any() or same != both
    sec.state = "bad" if bad else "ok"
    sec.notes.append(f"device: {', '.join(sorted(set(df['device_id'])))}")
    sec.notes.extend(_problems(df))
    return sec


def _problems(df: pd.DataFrame) -> list[str]:
    """One line per failed or errored run, so they are seen without reading the whole table."""
    bad = df[df["status"].isin(["failed", "hazard", "error"])]
    lines = [
        f"{r['status']}: {r['variant']} {short_kernel(r['kernel'])} {shape_label(r)}"
        + (f" ({r['reason']})" if r["reason"] else f" ({r['bad']} bad elements)")
        for _, r in bad.iterrows()
    ]
    return lines + _advisories(df)


def _advisories(df: pd.DataFrame) -> list[str]:
    """One finding per (variant, kernel) whose runs carry timing advisories (f4pipe.emu.timing:
    what the kernel relies on beyond the ISA's promises), with the first pair named."""
    out = []
    flagged = df[df["advisories"].fillna(0) > 0]
    for (variant, kernel), rows in flagged.groupby(["variant", "kernel"], sort=True):
        reason = str(rows.iloc[0]["reason"])
        at = reason.find("advisory: ")
        detail = reason[at + len("advisory: ") :] if at >= 0 else reason
        out.append(
            f"finding (advisory, not a failure): {variant} {short_kernel(kernel)}: "
            f"{int(rows['advisories'].max())} pair(s) in {len(rows)} run(s); {detail}"
        )
    return out


def splitk_section(rs: ResultSet, out_dir: Path | None) -> Section:
    df = _gemm_rows(rs, "splitk")
    sec = Section("splitk", "splitK: error vs split count", "", "")
    ref = ", ".join(f"{1 << k}: {v} %" for k, v in SEED_SPLITK_ERR_PCT.items())
    m, n, k = SEED_SPLITK_SHAPE
    sec.notes.append(f"reference: seed MI355X at M={m} N={n} K={k}, split {ref} of max|ref|")
    if _not_run(sec, "splitk", df):
        if df is not None:
            sec.table = _side_by_side(df, ("err_frac", "max_abs_err"))
        if (
            out_dir is not None
        ):  # the seed's reference alone, marked as such: the plot always exists
            sec.plot = plot_splitk(None, out_dir / "splitk.png")
        return sec
    assert df is not None
    ran = df[df["status"].isin(["passed", "failed"])]
    worst = ran.groupby("log2_k_split")["err_frac"].max()
    sec.verdict = f"{_status_counts(df)}; worst error by split: " + ", ".join(
        f"{1 << int(lg)}: {v * 100:.2f} %" for lg, v in worst.items()
    )
    sec.state = "bad" if df["status"].isin(["failed", "error"]).any() else "ok"
    sec.notes.extend(_problems(df))
    sec.table = _side_by_side(df, ("err_frac", "max_abs_err"))
    if out_dir is not None:
        sec.plot = plot_splitk(ran, out_dir / "splitk.png")
    return sec


def bench_section(rs: ResultSet, out_dir: Path | None) -> Section:
    df = _gemm_rows(rs, "bench")
    sec = Section("bench", "Throughput: original vs rebuilt", NOT_MEASURED, "none")
    if df is None:
        sec.notes.append("bench.parquet is missing: the bench stage has not run.")
        return sec
    measured = df[df["status"] == "measured"]
    if not len(measured):
        devices = ", ".join(sorted(set(df["device_id"])))
        sec.notes.append(f"{len(df)} bench rows on device {devices}, none measured")
        sec.notes.extend(f"reason: {r}" for r in sorted(set(df["reason"])))
        return sec
    table = _side_by_side(measured, ("us", "tflops"))
    if "original tflops" in table and "rebuilt tflops" in table:
        table["ratio rebuilt/original"] = table["rebuilt tflops"] / table["original tflops"]
    sec.table = table
    sec.state = "info"
    sec.verdict = (
        f"{len(measured)} runs measured on {', '.join(sorted(set(measured['device_id'])))}"
    )
    if "ratio rebuilt/original" in table:
        ratios = table["ratio rebuilt/original"].dropna()
        if len(ratios):
            sec.verdict += f"; rebuilt/original TFLOP/s {ratios.min():.3f} .. {ratios.max():.3f}"
    if out_dir is not None:
        sec.plot = plot_bench(table, out_dir / "throughput.png")
    return sec


VERDICT_RANK = {"safe": 0, "race": 1, "wrong": 2, "fault": 3}


def _safety_cell(rows: pd.DataFrame) -> str:
    """The worst verdict of a kernel x edge class cell, with its first evidence."""
    if not len(rows):
        return "-"
    worst = rows.loc[rows["verdict"].map(VERDICT_RANK).idxmax()]
    v = str(worst["verdict"])
    if v == "wrong" and worst["bad"]:
        return (
            f"wrong D[{int(worst['first_bad_row'])},{int(worst['first_bad_col'])}] "
            f"exp {fmt_value(worst['expected'])} got {fmt_value(worst['got'])}"
        )
    if v == "wrong":
        return f"wrong ({int(worst['canary_damaged'])} canaries)"
    if v == "race":
        return f"race ({int(worst['races'])} dwords)"
    return v


def safety_section(rs: ResultSet) -> Section:
    df = rs.table("safety")
    sec = Section("safety", "Shape-edge safety: kernel x edge class (emulator)", "not run", "none")
    if df is None or not len(df):
        sec.notes.append("safety.parquet is missing: the safety sweep has not run.")
        return sec
    raw = df[df["policy"] == "unsafe"]
    padded = df[df["policy"] == "pad"]
    counts = []
    for edge in EDGE_CLASSES:
        cell = raw[raw["edge_class"] == edge].groupby("kernel")["verdict"]
        worst = cell.agg(lambda v: max(v, key=VERDICT_RANK.__getitem__))
        tally = worst.value_counts()
        counts.append(f"{edge}: " + ", ".join(f"{n} {v}" for v, n in sorted(tally.items())))
    disagree = df[~df["agrees"]]
    sec.verdict = f"{df['kernel'].nunique()} kernels; worst verdict per kernel: " + "; ".join(
        counts
    )
    sec.verdict += (
        f"; padded-output remedy safe in {int((padded['verdict'] == 'safe').sum())} of "
        f"{len(padded)} unsafe shapes"
    )
    sec.state = "bad" if len(disagree) else "info"
    sec.notes.append(
        "safe: D[:M,:N] right and no canary outside it moved in every workgroup order, no "
        "races; race: right here, but two workgroups store to one address (hardware order "
        "decides); wrong: first bad element (expected, got) in some order; fault: the kernel "
        "left its buffers (the emulator refuses; hardware writes or reads whatever is there)"
    )
    sec.notes.append(
        f"orders: {', '.join(sorted(set(df['orders'])))}; kernel names drop "
        f"the prefix {KERNEL_PREFIX}"
    )
    if len(disagree):
        sec.notes.append(
            f"{len(disagree)} row(s) where f4pipe.safety's rules disagree with the emulator: "
            + ", ".join(
                f"{short_kernel(r['kernel'])} {r['edge_class']} M={r['m']} N={r['n']} K={r['k']}"
                for _, r in disagree.iterrows()
            )
        )
    table = []
    for kernel, rows in raw.groupby("kernel", sort=True):
        first = rows.iloc[0]
        line: dict[str, Any] = {"kernel": short_kernel(str(kernel))}
        line["store"] = first["store_class"]
        for edge in EDGE_CLASSES:
            line[edge] = _safety_cell(rows[rows["edge_class"] == edge])
        pads = padded[padded["kernel"] == kernel]
        line["padded"] = (
            "-" if not len(pads) else "safe" if (pads["verdict"] == "safe").all() else "NOT safe"
        )
        line["static D bound"] = first["static_d_bound"]
        line["static N guards"] = first["static_n_guards"]
        table.append(line)
    sec.table = pd.DataFrame(table)
    repro = []
    for (kernel, edge), rows in raw[raw["verdict"] != "safe"].groupby(["kernel", "edge_class"]):
        worst = rows.loc[rows["verdict"].map(VERDICT_RANK).idxmax()]
        repro.append(f"# {short_kernel(str(kernel))} {edge}: {worst['verdict']}")
        repro.append(str(worst["reproducer"]))
    if repro:
        sec.code["Reproducers (one per unsafe cell; exit 1 or 2 on the emulator)"] = repro
    return sec


def audit_section(rs: ResultSet) -> Section:
    """Per tuned table: rows checked, unsafe, other-arch; every unsafe row as a finding with
    aiter's recorded columns beside f4pipe's verdict."""
    df = rs.table("audit")
    sec = Section("audit", "Tuned-config audit: aiter's a4w4 tuned GEMM tables", "not run", "none")
    if df is None:
        sec.notes.append("audit.parquet is missing: the tuned-config audit has not run.")
        return sec
    if not len(df):
        sec.verdict = "the fetched aiter has no a4w4 tuned GEMM table with asm rows"
        return sec
    unsafe = df[df["status"] == "unsafe"]
    parts = []
    for name, t in df.groupby("csv", sort=True):
        other = int((t["status"] == "other-arch").sum())
        bad = t[t["status"] == "unsafe"]
        emulated = bad["emulated"].value_counts()
        parts.append(
            f"{name}: {len(t) - other} asm rows checked, {len(bad)} unsafe"
            + (
                " (emulated: " + ", ".join(f"{n} {v}" for v, n in sorted(emulated.items())) + ")"
                if len(emulated)
                else ""
            )
            + (f", {other} rows for other archs skipped" if other else "")
        )
    unknown = int((df["status"] == "unknown-kernel").sum())
    sec.verdict = "; ".join(parts) + (
        f"; {unknown} rows name kernels not in the manifest" if unknown else ""
    )
    sec.state = "bad" if len(unsafe) else "ok"
    if len(unsafe):
        sec.table = pd.DataFrame(
            {
                "table": unsafe["csv"],
                "line": unsafe["line"],
                "M": unsafe["m"],
                "N": unsafe["n"],
                "K": unsafe["k"],
                "kernel": unsafe["kernel"].map(short_kernel),
                "aiter us": unsafe["aiter_us"],
                "aiter errRatio": unsafe["aiter_err_ratio"],
                "f4pipe": unsafe["emulated"].where(unsafe["emulated"] != "", "rules only"),
                "per order": unsafe["emu_orders"],
                "edge": unsafe["edge_classes"],
            }
        ).reset_index(drop=True)
        for name, t in unsafe.groupby("csv", sort=True):
            sec.code[f"Findings in {name} (aiter's record beside f4pipe's verdict)"] = [
                line for _, r in t.iterrows() for line in format_finding(r.to_dict()).splitlines()
            ]
    return sec


def provenance(
    rs: ResultSet, config: Path | None, aiter_provenance: Path | None
) -> list[tuple[str, str]]:
    tc = rs.toolchain or {}
    items = [
        ("aiter id", rs.aiter_id),
        ("toolchain", f"{rs.toolchain_id} ({tc.get('vendor', '?')}, {tc.get('bin_dir', '?')})"),
        ("device", rs.device_id),
        ("f4pipe version (rows)", ", ".join(rs.f4pipe_versions) or "-"),
        ("f4pipe version (report)", __version__),
        ("date", build_date()),
        ("config sha256", config_hash(config)),
    ]
    if aiter_provenance is not None:
        prov = read_json_file(aiter_provenance, "provenance.json")
        prov = prov if isinstance(prov, dict) else {}
        items.append(("aiter source", json.dumps(prov.get("source", "?"), sort_keys=True)))
        items.append(("aiter content sha256", str(prov.get("content_sha256", "?"))))
    else:
        items.append(("aiter source", "provenance.json not found"))
    for name, (file_name, _) in TABLE_FILES.items():
        path = rs.directory / file_name
        items.append((file_name, sha256_file(path) if path.is_file() else f"absent ({name})"))
    return items


# ---------------------------------------------------------------------------------------------
# Plots (matplotlib, Agg: no display needed)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> str:
    # No "Software"/date metadata: the same rows give the same PNG bytes (archives stay stable).
    fig.savefig(path, dpi=110, metadata={"Software": None})
    pyplot().close(fig)
    return path.name


def plot_splitk(ran: pd.DataFrame | None, path: Path) -> str:
    """Error vs split count per (variant, kernel, shape) beside the seed's MI355X line;
    with no runs (`ran` None) only the seed's line, titled so nobody mistakes it for a result."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.2), layout="constrained")
    xs = sorted(SEED_SPLITK_ERR_PCT)
    m, n, k = SEED_SPLITK_SHAPE
    ax.plot(
        [1 << x for x in xs],
        [SEED_SPLITK_ERR_PCT[x] for x in xs],
        "k:",
        marker="s",
        label=f"seed MI355X (M={m} N={n} K={k})",
    )
    styles = {"original": ("-", "o"), "rebuilt": ("--", "x")}
    if ran is None:
        ran = pd.DataFrame(columns=["variant", "kernel", "m", "n", "k", "log2_k_split"])
        ax.set_title("no splitK runs in this set: seed reference only", fontsize=9)
    for (variant, kernel, mm, nn, kk), grp in ran.groupby(["variant", "kernel", "m", "n", "k"]):
        grp = grp.sort_values("log2_k_split")
        line, marker = styles.get(str(variant), ("-.", "^"))
        short = short_kernel(str(kernel))
        ax.plot(
            [1 << int(v) for v in grp["log2_k_split"]],
            grp["err_frac"] * 100,
            line,
            marker=marker,
            label=f"{short} {variant} (M={mm} N={nn} K={kk})",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks([1 << x for x in xs], [str(1 << x) for x in xs])
    ax.set_xlabel("K split count")
    ax.set_ylabel("max |err| / max |ref|  (%)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return save_figure(fig, path)


def plot_bench(table: pd.DataFrame, path: Path) -> str:
    plt = pyplot()
    labels = [f"{r['kernel']}\n{r['shape (MxNxK /split)']}" for _, r in table.iterrows()]
    cols = [c for c in (f"{v} tflops" for v in VARIANTS) if c in table]
    has_ratio = "ratio rebuilt/original" in table
    fig, axes = plt.subplots(
        1, 2 if has_ratio else 1, figsize=(11, 4.2), layout="constrained", squeeze=False
    )
    ax = axes[0][0]
    width = 0.8 / max(len(cols), 1)
    for i, col in enumerate(cols):
        xs = [j + i * width for j in range(len(table))]
        ax.bar(xs, table[col].fillna(0), width, label=col.split()[0])
    ax.set_xticks([j + width * (len(cols) - 1) / 2 for j in range(len(table))], labels, fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.legend()
    if has_ratio:
        ax2 = axes[0][1]
        ax2.bar(range(len(table)), table["ratio rebuilt/original"].fillna(0), color="tab:green")
        ax2.axhline(1.0, color="k", linestyle=":")
        ax2.set_xticks(range(len(table)), labels, fontsize=7)
        ax2.set_ylabel("rebuilt / original")
    return save_figure(fig, path)


# ---------------------------------------------------------------------------------------------
# Rendering

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#1b1f24;
max-width:1320px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid
#d0d7de;padding-bottom:4px} .sub{color:#57606a;font-size:13px}
.glance{display:grid;grid-template-columns:repeat(auto-fit,minmax(240px,1fr));gap:10px;
margin:16px 0}
.card{border-radius:6px;padding:10px 12px;font-size:13px;border:1px solid #d0d7de}
.card b{display:block;font-size:14px;margin-bottom:4px}
.ok{background:#dafbe1;border-color:#4ac26b}.bad{background:#ffebe9;border-color:#ff8182}
.none{background:#f6f8fa;border-color:#afb8c1}.info{background:#ddf4ff;border-color:#54aeff}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #d0d7de;padding:2px 6px;text-align:left;white-space:nowrap}
th{background:#f6f8fa;position:sticky;top:0} td.num{text-align:right;font-variant-numeric:
tabular-nums} td.yes{color:#1a7f37} td.no{color:#cf222e;font-weight:bold}
td.st-passed,td.st-measured{color:#1a7f37} td.st-failed,td.st-error{color:#cf222e;
font-weight:bold} td.st-skipped{color:#6e7781}
td.detail{white-space:normal;min-width:280px;max-width:480px}
.panel{border:1px dashed #afb8c1;background:#f6f8fa;padding:14px;font-size:14px;margin:8px 0}
.scroll{overflow-x:auto;max-width:100%}
img{max-width:100%;border:1px solid #d0d7de} h3{font-size:14px}
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:8px;font-size:12px;overflow-x:auto}
ul.notes{font-size:12px;color:#57606a}
"""


REASON_CHARS = 90  # in table cells; the full text is the cell's tooltip and in the notes


def _cell(column: str, value: Any) -> str:
    text = fmt_value(value)
    classes = []
    if isinstance(value, bool):
        classes.append("yes" if value else "no")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        classes.append("num")
    if column.endswith("status"):
        classes.append(f"st-{text.split('->')[-1].strip()}")  # "passed -> failed": as failed
    if column.endswith("reason") or column == "detail":
        classes.append("detail")
        if len(text) > REASON_CHARS:
            short = html.escape(text[:REASON_CHARS])
            return f'<td class="detail" title="{html.escape(text)}">{short}…</td>'
    cls = f' class="{" ".join(classes)}"' if classes else ""
    return f"<td{cls}>{html.escape(text)}</td>"


def html_table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for row in df.itertuples(index=False):
        body.append(
            "<tr>"
            + "".join(_cell(str(c), v) for c, v in zip(df.columns, row, strict=True))
            + "</tr>"
        )
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(body)}</table></div>'


def md_table(df: pd.DataFrame, max_rows: int | None = None) -> str:
    shown = df if max_rows is None else df.head(max_rows)
    lines = [
        "| " + " | ".join(str(c) for c in df.columns) + " |",
        "|" + "---|" * len(df.columns),
    ]
    for row in shown.itertuples(index=False):
        cells = (fmt_value(v).replace("|", "\\|").replace("\n", " ") for v in row)
        lines.append("| " + " | ".join(cells) + " |")
    if max_rows is not None and len(df) > max_rows:
        lines.append(f"\n({len(df) - max_rows} more rows in index.html)")
    return "\n".join(lines)


def _drop_empty_reasons(df: pd.DataFrame) -> pd.DataFrame:
    """Hide reason columns that say nothing (every run went through)."""
    empty = [c for c in df.columns if c.endswith("reason") and not df[c].fillna("").any()]
    return df.drop(columns=empty)


def render_html(title: str, sections: list[Section], prov: list[tuple[str, str]]) -> str:
    cards = "".join(
        f'<div class="card {s.state}"><b>{html.escape(s.title.split(":")[0])}</b>'
        f"{html.escape(s.verdict)}</div>"
        for s in sections
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<div class="sub">{html.escape(" · ".join(f"{k}: {v}" for k, v in prov[:4]))}</div>',
        f'<div class="glance">{cards}</div>',
    ]
    for s in sections:
        parts.append(f'<h2 id="{s.key}">{html.escape(s.title)}</h2>')
        if s.state == "none":
            parts.append(f'<div class="panel">{html.escape(s.verdict)}</div>')
        else:
            parts.append(f'<div class="card {s.state}">{html.escape(s.verdict)}</div>')
        if s.plot:
            parts.append(f'<p><img src="{html.escape(s.plot)}" alt="{html.escape(s.title)}"></p>')
        if s.notes:
            items = "".join(f"<li>{html.escape(n)}</li>" for n in s.notes)
            parts.append(f'<ul class="notes">{items}</ul>')
        if s.table is not None and len(s.table):
            parts.append(html_table(_drop_empty_reasons(s.table)))
        for name, lines in s.code.items():
            parts.append(
                f"<h3>{html.escape(name)}</h3><pre>{html.escape(chr(10).join(lines))}</pre>"
            )
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in prov)
    parts.append(f'<h2 id="provenance">Provenance</h2><table>{rows}</table>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render_markdown(title: str, sections: list[Section], prov: list[tuple[str, str]]) -> str:
    lines = [f"# {title}", "", "| section | verdict |", "|---|---|"]
    lines += [f"| {s.title.split(':')[0]} | {s.verdict} |" for s in sections]
    for s in sections:
        lines += ["", f"## {s.title}", "", s.verdict, ""]
        lines += [f"- {n}" for n in s.notes]
        if s.plot:
            lines += ["", f"![{s.title}]({s.plot})"]
        if s.table is not None and len(s.table):
            max_rows = None if s.key == "roundtrip" else 60
            lines += ["", md_table(_drop_empty_reasons(s.table), max_rows)]
        for name, code in s.code.items():
            lines += ["", f"### {name}", "", "```diff", *code, "```"]
    lines += ["", "## Provenance", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in prov]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The stage


@dataclass(frozen=True)
class Report:
    directory: Path
    index: Path
    summary: Path
    plots: tuple[Path, ...]
    sections: tuple[Section, ...]


def fidelity_section() -> Section:
    """What an emulator verdict is worth: f4pipe.emu.fidelity's table."""
    from f4pipe.emu.fidelity import FIDELITY

    sec = Section(
        "fidelity",
        "Emulator fidelity: what a verdict from the emulator covers",
        "exact where the ISA defines the result; memory values in one legal schedule, with "
        "the timing that schedule hides checked; no throughput",
        "info",
    )
    sec.table = pd.DataFrame(FIDELITY, columns=["aspect", "how", "detail"])
    return sec


def build_sections(rs: ResultSet, out_dir: Path | None) -> list[Section]:
    from f4pipe.reportreuse import reuse_section

    return [
        roundtrip_section(rs),
        verify_section(rs),
        splitk_section(rs, out_dir),
        bench_section(rs, out_dir),
        safety_section(rs),
        audit_section(rs),
        fidelity_section(),
        reuse_section(rs),
    ]


def build_report(
    result_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    aiter_provenance: str | os.PathLike[str] | None = None,
) -> Report:
    """Write index.html, summary.md and the plots for one result set (default: <set>/report/).

    The directory is replaced whole, so a report never mixes plots of two builds.
    """
    rs = ResultSet.load(result_dir)
    target = Path(out_dir) if out_dir is not None else rs.directory / REPORT_DIR
    prov_path = Path(aiter_provenance) if aiter_provenance else None
    if prov_path is None:
        prov_path = find_aiter_provenance(rs.directory.resolve(), rs.aiter_id)
    prov = provenance(rs, Path(config) if config else None, prov_path)
    title = f"f4pipe report: {rs.aiter_id} · {rs.toolchain_id} · {rs.device_id}"
    with atomic_dir(target) as tmp:
        sections = build_sections(rs, tmp)
        (tmp / "index.html").write_text(render_html(title, sections, prov))
        (tmp / "summary.md").write_text(render_markdown(title, sections, prov))
    plots = tuple(target / s.plot for s in sections if s.plot)
    return Report(target, target / "index.html", target / "summary.md", plots, tuple(sections))
