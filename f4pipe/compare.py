"""Two artifact sets side by side: what an aiter or ROCm update changed.

Inputs are result-set directories or archives (checked, then unpacked into a temporary
directory). The comparison names, per kernel, code objects whose bytes changed (sha256,
instruction count, kernel-descriptor directives, the first lines of the assembly diff), round-trip
verdicts that changed, verification and splitK results that changed (status or error values,
compared exactly: the reference and the device are deterministic), and throughput deltas where
both sets measured. Output: index.html + summary.md (+ a ratio plot) in one directory.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from f4pipe.archive import SUFFIX, extract_archive
from f4pipe.errors import InputError
from f4pipe.fsio import atomic_dir, read_input_text
from f4pipe.report import (
    ROUNDTRIP_DIR,
    RUN_KEY,
    ResultSet,
    Section,
    fmt_value,
    pyplot,
    render_html,
    render_markdown,
    save_figure,
    shape_label,
    short_kernel,
)

ASM_DIFF_LINES = 40  # per kernel; the full diff is one `diff` of the two .s files away
GEMM_METRICS = {
    "verify": ("max_abs_err", "err_frac", "bad"),
    "splitk": ("max_abs_err", "err_frac", "bad"),
}


@contextlib.contextmanager
def open_result_set(path: str | os.PathLike[str]) -> Iterator[ResultSet]:
    """A result set from a directory, or from an archive unpacked for the duration."""
    path = Path(path)
    if path.is_dir():
        yield ResultSet.load(path)
        return
    if path.is_file() and path.name.endswith(SUFFIX):
        with tempfile.TemporaryDirectory(prefix="f4pipe-compare-") as tmp:
            yield ResultSet.load(extract_archive(path, tmp))
        return
    raise InputError(f"{path}: neither a result-set directory nor an f4pipe {SUFFIX} archive")


# ---------------------------------------------------------------------------------------------
# Code objects


def descriptor_directives(asm: str) -> dict[str, str]:
    """`.amdhsa_*` lines of each `.amdhsa_kernel` block of a co2asm .s: "kernel.field" -> value."""
    out: dict[str, str] = {}
    kernel = None
    for line in asm.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == ".amdhsa_kernel" and len(words) == 2:
            kernel = words[1]
        elif words[0] == ".end_amdhsa_kernel":
            kernel = None
        elif kernel is not None and words[0].startswith(".amdhsa_"):
            out[f"{kernel}{words[0]}"] = " ".join(words[1:])
    return out


def _asm(rs: ResultSet, kernel: str) -> str | None:
    path = rs.directory / ROUNDTRIP_DIR / f"{kernel}.s"
    return read_input_text(path, "assembly file") if path.is_file() else None


def asm_diff(a: str, b: str, limit: int = ASM_DIFF_LINES) -> tuple[int, list[str]]:
    """(changed code lines, the first `limit` lines of a unified diff); comments ignored."""

    def code(text: str) -> list[str]:
        return [ln for ln in text.splitlines() if not ln.lstrip().startswith("//")]

    diff = list(difflib.unified_diff(code(a), code(b), "A", "B", n=1, lineterm=""))
    changed = sum(1 for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
    return changed, diff[:limit] + (
        [f"... ({len(diff) - limit} more lines)"] if len(diff) > limit else []
    )


@dataclass
class CodeObjectChange:
    kernel: str
    change: str  # changed | added | removed
    sha_a: str
    sha_b: str
    insns_a: int | None
    insns_b: int | None
    descriptor: list[str]  # "field: a -> b"
    asm_lines_changed: int | None
    asm_diff: list[str]


def _kernel_facts(rs: ResultSet) -> dict[str, tuple[str, int | None]]:
    """kernel -> (original sha256, instruction count) from kernels/roundtrip rows."""
    facts: dict[str, tuple[str, int | None]] = {}
    rt = rs.table("roundtrip")
    if rt is not None:
        for _, r in rt.iterrows():
            facts[r["kernel"]] = (r["original_sha256"], int(r["num_instructions"]))
    kernels = rs.table("kernels")
    if kernels is not None:
        for _, r in kernels.iterrows():
            facts[r["kernel"]] = (r["sha256"], facts.get(r["kernel"], ("", None))[1])
    return facts


def code_object_changes(a: ResultSet, b: ResultSet) -> list[CodeObjectChange]:
    fa, fb = _kernel_facts(a), _kernel_facts(b)
    changes = []
    for kernel in sorted(fa.keys() | fb.keys()):
        (sha_a, n_a), (sha_b, n_b) = fa.get(kernel, ("", None)), fb.get(kernel, ("", None))
        if sha_a == sha_b:
            continue
        change = "added" if kernel not in fa else "removed" if kernel not in fb else "changed"
        asm_a, asm_b = _asm(a, kernel), _asm(b, kernel)
        desc: list[str] = []
        lines, diff = None, []
        if asm_a is not None and asm_b is not None:
            da, db = descriptor_directives(asm_a), descriptor_directives(asm_b)
            desc = [
                f"{k}: {da.get(k, '-')} -> {db.get(k, '-')}"
                for k in sorted(da.keys() | db.keys())
                if da.get(k) != db.get(k)
            ]
            lines, diff = asm_diff(asm_a, asm_b)
        changes.append(CodeObjectChange(kernel, change, sha_a, sha_b, n_a, n_b, desc, lines, diff))
    return changes


# ---------------------------------------------------------------------------------------------
# Rows


def roundtrip_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame:
    ta, tb = a.table("roundtrip"), b.table("roundtrip")
    if ta is None or tb is None:
        return pd.DataFrame()
    cols = ["kernel", "equivalent", "text_bytes_unexplained", "detail"]
    m = ta[cols].merge(tb[cols], on="kernel", how="outer", suffixes=(" A", " B"))
    differs = (m["equivalent A"] != m["equivalent B"]) | (
        m["text_bytes_unexplained A"] != m["text_bytes_unexplained B"]
    )
    out = m[differs].sort_values("kernel").reset_index(drop=True)
    out["kernel"] = out["kernel"].map(short_kernel)
    return out


def _arrow(a: object, b: object) -> str:
    return (
        fmt_value(a)
        if fmt_value(a, 17) == fmt_value(b, 17)
        else f"{fmt_value(a)} -> {fmt_value(b)}"
    )


def gemm_changes(a: ResultSet, b: ResultSet, name: str) -> pd.DataFrame | None:
    """Runs (same variant, kernel, shape, split) whose status or error values differ, plus runs
    only one set has. None when either set lacks the table."""
    ta, tb = a.table(name), b.table(name)
    if ta is None or tb is None:
        return None
    metrics = list(GEMM_METRICS[name])
    cols = [*RUN_KEY, "status", *metrics]
    m = (
        ta[cols]
        .drop_duplicates(RUN_KEY)
        .merge(tb[cols].drop_duplicates(RUN_KEY), on=RUN_KEY, how="outer", suffixes=(" A", " B"))
    )
    rows = []
    for _, r in m.iterrows():
        pairs = [(r[f"{c} A"], r[f"{c} B"]) for c in ["status", *metrics]]
        if all(fmt_value(x, 17) == fmt_value(y, 17) for x, y in pairs):
            continue
        rows.append(
            {
                "variant": r["variant"],
                "kernel": short_kernel(r["kernel"]),
                "shape (MxNxK /split)": shape_label(r),
                **{c: _arrow(x, y) for c, (x, y) in zip(["status", *metrics], pairs, strict=True)},
            }
        )
    return pd.DataFrame(rows)


def throughput_deltas(a: ResultSet, b: ResultSet) -> pd.DataFrame | None:
    ta, tb = a.table("bench"), b.table("bench")
    if ta is None or tb is None:
        return None
    ma, mb = (t[t["status"] == "measured"][[*RUN_KEY, "us", "tflops"]] for t in (ta, tb))
    m = ma.merge(mb, on=RUN_KEY, suffixes=(" A", " B"))
    if not len(m):
        return None
    m["ratio B/A (TFLOP/s)"] = m["tflops B"] / m["tflops A"]
    m.insert(2, "shape (MxNxK /split)", [shape_label(r) for _, r in m.iterrows()])
    m["kernel"] = m["kernel"].map(short_kernel)
    return m.drop(columns=["m", "n", "k", "log2_k_split"]).reset_index(drop=True)


def plot_ratio(table: pd.DataFrame, path: Path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    labels = [
        f"{r['variant']} {r['kernel']}\n{r['shape (MxNxK /split)']}" for _, r in table.iterrows()
    ]
    ax.bar(range(len(table)), table["ratio B/A (TFLOP/s)"], color="tab:blue")
    ax.axhline(1.0, color="k", linestyle=":")
    ax.set_xticks(range(len(table)), labels, fontsize=7)
    ax.set_ylabel("TFLOP/s B / A")
    return save_figure(fig, path)


# ---------------------------------------------------------------------------------------------
# The comparison


@dataclass
class Comparison:
    a: ResultSet
    b: ResultSet
    code_objects: list[CodeObjectChange]
    roundtrip: pd.DataFrame
    gemm: dict[str, pd.DataFrame | None]
    throughput: pd.DataFrame | None

    @property
    def differs(self) -> bool:
        return bool(
            self.code_objects
            or len(self.roundtrip)
            or any(df is not None and len(df) for df in self.gemm.values())
        )

    def summary_lines(self) -> list[str]:
        lines = [f"A: {set_label(self.a)}", f"B: {set_label(self.b)}"]
        lines.append(f"code objects changed: {len(self.code_objects)}")
        lines += [
            f"  {c.change}: {c.kernel} (instructions {_arrow(c.insns_a, c.insns_b)}, "
            f"{fmt_value(c.asm_lines_changed)} assembly lines changed, "
            f"{len(c.descriptor)} descriptor fields)"
            for c in self.code_objects
        ]
        lines.append(f"round-trip verdicts changed: {len(self.roundtrip)}")
        for name, df in self.gemm.items():
            lines.append(f"{name} results changed: {'not in both sets' if df is None else len(df)}")
        tp = self.throughput
        lines.append(
            "throughput: not measured in both sets"
            if tp is None
            else f"throughput: {len(tp)} runs, B/A {tp['ratio B/A (TFLOP/s)'].min():.3f} .. "
            f"{tp['ratio B/A (TFLOP/s)'].max():.3f}"
        )
        return lines


def set_label(rs: ResultSet) -> str:
    return f"{rs.aiter_id} · {rs.toolchain_id} · {rs.device_id} ({rs.directory.name})"


def compare_sets(a: ResultSet, b: ResultSet) -> Comparison:
    return Comparison(
        a=a,
        b=b,
        code_objects=code_object_changes(a, b),
        roundtrip=roundtrip_changes(a, b),
        gemm={name: gemm_changes(a, b, name) for name in GEMM_METRICS},
        throughput=throughput_deltas(a, b),
    )


def _code_object_section(c: Comparison) -> Section:
    sec = Section("code", "Code objects that changed", "", "ok")
    if not c.code_objects:
        sec.verdict = "no code object changed (same sha256 for every kernel)"
        return sec
    sec.state = "bad"
    sec.verdict = f"{len(c.code_objects)} code objects changed"
    sec.table = pd.DataFrame(
        [
            {
                "kernel": short_kernel(x.kernel),
                "change": x.change,
                "sha256 A": x.sha_a[:16],
                "sha256 B": x.sha_b[:16],
                "instructions": _arrow(x.insns_a, x.insns_b),
                "asm lines changed": x.asm_lines_changed,
                "descriptor": "; ".join(x.descriptor) or "same",
            }
            for x in c.code_objects
        ]
    )
    for x in c.code_objects:
        if x.asm_diff:
            sec.code[f"{x.kernel}: assembly diff (A -> B, comments ignored)"] = x.asm_diff
    return sec


def _table_section(key: str, title: str, df: pd.DataFrame | None, what: str) -> Section:
    if df is None:
        return Section(key, title, f"{what}: not in both sets", "none")
    if not len(df):
        return Section(key, title, f"no {what} changed", "ok")
    return Section(key, title, f"{len(df)} {what} changed", "bad", table=df)


def comparison_sections(c: Comparison, out_dir: Path | None) -> list[Section]:
    sections = [_code_object_section(c)]
    sections.append(
        _table_section("roundtrip", "Round-trip verdicts", c.roundtrip, "round-trip verdicts")
    )
    sections.append(
        _table_section("verify", "Verification results", c.gemm["verify"], "verification results")
    )
    sections.append(_table_section("splitk", "splitK errors", c.gemm["splitk"], "splitK results"))
    tp = c.throughput
    if tp is None:
        sections.append(
            Section("bench", "Throughput", "not measured in both sets: no gfx950 device", "none")
        )
    else:
        sec = Section("bench", "Throughput", c.summary_lines()[-1], "info", table=tp)
        if out_dir is not None:
            sec.plot = plot_ratio(tp, out_dir / "throughput_ratio.png")
        sections.append(sec)
    return sections


def write_comparison(c: Comparison, out_dir: str | os.PathLike[str]) -> Path:
    """index.html + summary.md (+ throughput_ratio.png) in `out_dir`, replaced whole."""
    target = Path(out_dir)
    title = f"f4pipe compare: {c.a.aiter_id} -> {c.b.aiter_id}"
    prov = [("A", set_label(c.a)), ("B", set_label(c.b))]
    for label, rs in (("A", c.a), ("B", c.b)):
        prov.append((f"{label} f4pipe version (rows)", ", ".join(rs.f4pipe_versions) or "-"))
    with atomic_dir(target) as tmp:
        sections = comparison_sections(c, tmp)
        (tmp / "index.html").write_text(render_html(title, sections, prov))
        (tmp / "summary.md").write_text(render_markdown(title, sections, prov))
    return target
