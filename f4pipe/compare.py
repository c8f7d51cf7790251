"""Two artifact sets side by side: everything an aiter or ROCm update changed.

Inputs are result-set directories or archives (checked, then unpacked into a temporary
directory). The comparison names:
- kernels added, removed and renamed (a renamed kernel keeps its bytes under a new name);
- manifest attributes per kernel (tiles, splitK, bpreshuffle, symbol, .co name, arch, code object
  version) and the manifest's header spelling;
- per code object whose bytes changed: sha256, target, code object version and ELF ABI version,
  every kernel-descriptor directive and metadata entry (kernarg size, LDS, registers, arguments)
  that differs, an instruction-level summary and the first lines of the assembly diff;
- the aiter source: provenance, content digest, manifest and tuned-table digests;
- round-trip verdicts, verification and splitK results (status or error values, compared
  exactly: the reference and the device are deterministic), shape-edge safety verdicts, and the
  tuned-table audit: rows added, removed or changed, and rows newly unsafe;
- throughput deltas where both sets measured.
`Comparison.differs` is true when anything a verdict depends on changed (all of the above but
provenance and throughput). Output: index.html + summary.md (+ a ratio plot), or JSON.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from f4pipe.archive import PROVENANCE_NAME, SUFFIX, extract_archive
from f4pipe.asmfacts import fact_changes, instruction_diff
from f4pipe.audit import TARGET_ARCH
from f4pipe.errors import InputError
from f4pipe.fsio import atomic_dir, read_input_text
from f4pipe.layout import ROUNDTRIP_DIR
from f4pipe.report.plots import pyplot, save_figure
from f4pipe.report.render import (
    Section,
    fmt_value,
    render_html,
    render_markdown,
    shape_label,
    short_kernel,
)
from f4pipe.report.sections import VERIFY_METRICS
from f4pipe.resultset import RUN_KEY, ResultSet, find_aiter_provenance

ASM_DIFF_LINES = 40  # per kernel; the full diff is one `diff` of the two .s files away
TERMINAL_ROWS = 20  # per list in the terminal summary; -o and --json carry every row
#: The stages whose error metrics a comparison lines up run by run (the report's columns).
GEMM_METRICS = {"verify": VERIFY_METRICS, "splitk": VERIFY_METRICS}


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
    descriptor: list[str]  # every header, descriptor and metadata fact: "field: a -> b"
    asm_lines_changed: int | None
    asm_diff: list[str]
    instructions: str = ""  # instruction-level summary: "+a -r ~c instructions (n -> m)"


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


def renamed_kernels(a: ResultSet, b: ResultSet) -> dict[str, str]:
    """A kernel only A has -> the kernel only B has with the same bytes (sha256)."""
    fa, fb = _kernel_facts(a), _kernel_facts(b)
    gone = {fa[k][0]: k for k in fa.keys() - fb.keys()}
    return {gone[fb[k][0]]: k for k in sorted(fb.keys() - fa.keys()) if fb[k][0] in gone}


def code_object_changes(a: ResultSet, b: ResultSet) -> list[CodeObjectChange]:
    fa, fb = _kernel_facts(a), _kernel_facts(b)
    renamed = renamed_kernels(a, b)
    moved = set(renamed) | set(renamed.values())
    changes = []
    for kernel in sorted(fa.keys() | fb.keys()):
        (sha_a, n_a), (sha_b, n_b) = fa.get(kernel, ("", None)), fb.get(kernel, ("", None))
        if sha_a == sha_b or kernel in moved:
            continue
        change = "added" if kernel not in fa else "removed" if kernel not in fb else "changed"
        asm_a, asm_b = _asm(a, kernel), _asm(b, kernel)
        facts: list[str] = []
        lines, diff, insns = None, [], ""
        if asm_a is not None and asm_b is not None:
            facts = fact_changes(asm_a, asm_b)
            lines, diff = asm_diff(asm_a, asm_b)
            insns = instruction_diff(asm_a, asm_b).summary()
        changes.append(
            CodeObjectChange(kernel, change, sha_a, sha_b, n_a, n_b, facts, lines, diff, insns)
        )
    return changes


# ---------------------------------------------------------------------------------------------
# Kernels and the manifest

MANIFEST_ATTRIBUTES = (
    "tile_m",
    "tile_n",
    "splitk",
    "bpreshuffle",
    "symbol",
    "co_name",
    "arch",
    "code_object_version",
)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds (so a bool prints as yes/no)."""
    return value.item() if hasattr(value, "item") else value


def kernel_list_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame:
    """Kernels added, removed and renamed (same bytes, new name)."""
    fa, fb = _kernel_facts(a), _kernel_facts(b)
    renamed = renamed_kernels(a, b)
    rows = [{"kernel": old, "change": "renamed", "to": new} for old, new in renamed.items()]
    rows += [
        {"kernel": k, "change": "removed", "to": ""}
        for k in sorted(fa.keys() - fb.keys())
        if k not in renamed
    ]
    rows += [
        {"kernel": k, "change": "added", "to": ""}
        for k in sorted(fb.keys() - fa.keys())
        if k not in renamed.values()
    ]
    return pd.DataFrame(rows, columns=["kernel", "change", "to"])


def manifest_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame:
    """Per kernel in both sets (renamed ones paired), each manifest attribute that differs;
    plus the manifest's header spelling when both fetch records name it."""
    rows = []
    ka, kb = a.table("kernels"), b.table("kernels")
    if ka is not None and kb is not None:
        ia, ib = ka.set_index("kernel"), kb.set_index("kernel")
        pairs = {k: k for k in ia.index.intersection(ib.index)} | renamed_kernels(a, b)
        for ka_name, kb_name in sorted(pairs.items()):
            for attr in MANIFEST_ATTRIBUTES:
                va, vb = (
                    fmt_value(_plain(ia.loc[ka_name, attr])),
                    fmt_value(_plain(ib.loc[kb_name, attr])),
                )
                if va != vb:
                    rows.append({"kernel": kb_name, "attribute": attr, "A": va, "B": vb})
    ha, hb = (aiter_fetch(rs).get("manifest_header") for rs in (a, b))
    if ha and hb and ha != hb:
        rows.append({"kernel": "(manifest CSV)", "attribute": "header", "A": ha, "B": hb})
    return pd.DataFrame(rows, columns=["kernel", "attribute", "A", "B"])


# ---------------------------------------------------------------------------------------------
# Provenance


def aiter_fetch(rs: ResultSet) -> dict[str, Any]:
    """The fetch record of the set's aiter: the archive's copy, else resources/ beside results/
    ({} when neither exists)."""
    archived = rs.directory / PROVENANCE_NAME
    if archived.is_file():
        record = json.loads(archived.read_text()).get("aiter_fetch")
        return record if isinstance(record, dict) else {}
    path = find_aiter_provenance(rs.directory.resolve(), rs.aiter_id)
    return json.loads(path.read_text()) if path is not None else {}


def _source_facts(record: dict[str, Any]) -> dict[str, str]:
    """The facts of a fetch record a reader compares: source, digests of manifest and tables."""
    if not record:
        return {}
    out = {f"source {k}": str(v) for k, v in sorted(record.get("source", {}).items())}
    out["content sha256"] = str(record.get("content_sha256", "-"))
    for name, info in sorted(record.get("files", {}).items()):
        if name.endswith(".csv"):
            out[f"manifest {name} sha256"] = info["sha256"]
    tables = record.get("tables")
    out["tuned tables"] = "not recorded" if tables is None else str(len(tables))
    for rel, info in sorted((tables or {}).items()):
        out[f"tuned table {rel} sha256"] = info["sha256"]
    out["fetched by f4pipe"] = str(record.get("f4pipe_version", "-"))
    return out


def provenance_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame:
    """What differs between the two fetch records (fetch times aside)."""
    fa, fb = _source_facts(aiter_fetch(a)), _source_facts(aiter_fetch(b))
    if not fa or not fb:
        missing = [label for label, f in (("A", fa), ("B", fb)) if not f]
        return pd.DataFrame(
            [{"item": "aiter fetch record", "A": "", "B": f"not found for {', '.join(missing)}"}]
        )
    rows = [
        {"item": k, "A": fa.get(k, "-"), "B": fb.get(k, "-")}
        for k in sorted(fa.keys() | fb.keys())
        if fa.get(k) != fb.get(k)
    ]
    return pd.DataFrame(rows, columns=["item", "A", "B"])


# ---------------------------------------------------------------------------------------------
# Rows


def merge_sets(
    ta: pd.DataFrame, tb: pd.DataFrame, on: str | list[str], how: str = "outer"
) -> pd.DataFrame:
    """Rows of set A beside rows of set B by key, columns suffixed " A" / " B". Two tables that
    hold no row (a stage that ran no case, an audit without tables) merge as plain objects:
    pandas 3 cannot merge two empty Arrow string columns."""
    if not len(ta) and not len(tb):
        ta, tb = ta.astype(object), tb.astype(object)
    return ta.merge(tb, on=on, how=how, suffixes=(" A", " B"))


def roundtrip_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame:
    ta, tb = a.table("roundtrip"), b.table("roundtrip")
    if ta is None or tb is None:
        return pd.DataFrame()
    cols = ["kernel", "equivalent", "text_bytes_unexplained", "detail"]
    m = merge_sets(ta[cols], tb[cols], on="kernel")
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
    m = merge_sets(ta[cols].drop_duplicates(RUN_KEY), tb[cols].drop_duplicates(RUN_KEY), RUN_KEY)
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


SAFETY_KEY = ["kernel", "edge_class", "m", "n", "k", "policy"]


def safety_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame | None:
    """Shape-edge cells whose verdict changed, or that only one set has. None when either set
    lacks the table."""
    ta, tb = a.table("safety"), b.table("safety")
    if ta is None or tb is None:
        return None
    cols = [*SAFETY_KEY, "verdict", "bad", "races"]
    m = merge_sets(ta[cols], tb[cols], SAFETY_KEY)
    rows = []
    for _, r in m.iterrows():
        pairs = {c: (r[f"{c} A"], r[f"{c} B"]) for c in ("verdict", "bad", "races")}
        if all(fmt_value(x) == fmt_value(y) for x, y in pairs.values()):
            continue
        rows.append(
            {
                "kernel": short_kernel(r["kernel"]),
                "edge": r["edge_class"],
                "shape (MxNxK)": f"{r['m']}x{r['n']}x{r['k']}",
                "policy": r["policy"],
                **{c: _arrow(x, y) for c, (x, y) in pairs.items()},
            }
        )
    return pd.DataFrame(rows)


AUDIT_KEY = ["csv", "gfx", "cu_num", "m", "n", "k"]


def _audit_state(r: pd.Series, side: str) -> str:
    """One side of an audit row as a reader compares it: kernel, splitK, status, emulated."""
    if pd.isna(r[f"status {side}"]):
        return "-"
    state = f"{short_kernel(str(r[f'kernel {side}']) or str(r[f'symbol {side}']))} "
    state += f"splitK={fmt_value(r[f'log2_k_split {side}'])} {r[f'status {side}']}"
    emulated = r[f"emulated {side}"]
    return state + (f" ({emulated})" if isinstance(emulated, str) and emulated else "")


def audit_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame | None:
    """Tuned-table rows added, removed or changed (kernel, splitK or verdict), each marked when
    it is newly unsafe. Rows are matched by (table, gfx, cu_num, M, N, K); a table without the
    gfx column (before aiter added it) holds gfx950 rows. None when either set lacks the table."""
    ta, tb = a.table("audit"), b.table("audit")
    if ta is None or tb is None:
        return None
    cols = [*AUDIT_KEY, "line", "kernel", "symbol", "log2_k_split", "status", "emulated"]
    fa, fb = (t[cols].assign(gfx=t["gfx"].fillna("").replace("", TARGET_ARCH)) for t in (ta, tb))
    m = merge_sets(fa.drop_duplicates(AUDIT_KEY), fb.drop_duplicates(AUDIT_KEY), AUDIT_KEY)
    rows = []
    for _, r in m.iterrows():
        state_a, state_b = _audit_state(r, "A"), _audit_state(r, "B")
        if state_a == state_b:
            continue
        change = "added" if state_a == "-" else "removed" if state_b == "-" else "changed"
        rows.append(
            {
                "table": r["csv"] + (f" [{r['gfx']}]" if r["gfx"] != TARGET_ARCH else ""),
                "line B": fmt_value(r["line B"]),
                "shape (MxNxK)": f"{r['m']}x{r['n']}x{r['k']}",
                "change": change,
                "A": state_a,
                "B": state_b,
                "newly unsafe": r["status B"] == "unsafe" and r["status A"] != "unsafe",
            }
        )
    return pd.DataFrame(
        rows, columns=["table", "line B", "shape (MxNxK)", "change", "A", "B", "newly unsafe"]
    )


def throughput_deltas(a: ResultSet, b: ResultSet) -> pd.DataFrame | None:
    ta, tb = a.table("bench"), b.table("bench")
    if ta is None or tb is None:
        return None
    ma, mb = (t[t["status"] == "measured"][[*RUN_KEY, "us", "tflops"]] for t in (ta, tb))
    m = merge_sets(ma, mb, RUN_KEY, how="inner")
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
    kernels: pd.DataFrame
    manifest: pd.DataFrame
    code_objects: list[CodeObjectChange]
    provenance: pd.DataFrame
    roundtrip: pd.DataFrame
    gemm: dict[str, pd.DataFrame | None]
    safety: pd.DataFrame | None
    audit: pd.DataFrame | None
    throughput: pd.DataFrame | None

    def verdict_changes(self) -> dict[str, int]:
        """Per kind, how many changes a verdict depends on (provenance and throughput aside)."""
        tables = {
            "kernels": self.kernels,
            "manifest": self.manifest,
            "roundtrip": self.roundtrip,
            **self.gemm,
            "safety": self.safety,
            "audit": self.audit,
        }
        counts = {name: 0 if df is None else len(df) for name, df in tables.items()}
        counts["code objects"] = len(self.code_objects)
        return counts

    @property
    def differs(self) -> bool:
        return any(self.verdict_changes().values())

    @property
    def newly_unsafe(self) -> int:
        return 0 if self.audit is None else int(self.audit["newly unsafe"].sum())

    def summary_lines(self) -> list[str]:
        lines = [f"A: {set_label(self.a)}", f"B: {set_label(self.b)}"]
        lines.append(f"code objects changed: {len(self.code_objects)}")
        for c in self.code_objects:
            lines.append(
                f"  {c.change}: {c.kernel} (instructions {_arrow(c.insns_a, c.insns_b)}, "
                f"{fmt_value(c.asm_lines_changed)} assembly lines changed, "
                f"{len(c.descriptor)} descriptor/metadata fields)"
            )
            if c.instructions:
                lines.append(f"    {c.instructions}")
            lines += [f"    {fact}" for fact in c.descriptor]
        lines.append(f"kernels added/removed/renamed: {len(self.kernels)}")
        lines += [
            f"  {r['change']}: {r['kernel']}" + (f" -> {r['to']}" if r["to"] else "")
            for _, r in self.kernels.iterrows()
        ]
        lines.append(f"manifest attributes changed: {len(self.manifest)}")
        lines += [
            f"  {r['kernel']} {r['attribute']}: {r['A']} -> {r['B']}"
            for _, r in self.manifest.iterrows()
        ]
        lines.append(f"aiter source changes: {len(self.provenance)}")
        lines += [f"  {r['item']}: {r['A']} -> {r['B']}" for _, r in self.provenance.iterrows()]
        lines.append(f"round-trip verdicts changed: {len(self.roundtrip)}")
        for name, df in self.gemm.items():
            lines.append(f"{name} results changed: {'not in both sets' if df is None else len(df)}")
            if df is not None:
                lines += _capped(
                    [
                        f"  {r['variant']} {r['kernel']} {r['shape (MxNxK /split)']}: {r['status']}"
                        for _, r in df.iterrows()
                    ]
                )
        lines += self._safety_audit_lines()
        tp = self.throughput
        lines.append(
            "throughput: not measured in both sets"
            if tp is None
            else f"throughput: {len(tp)} runs, B/A {tp['ratio B/A (TFLOP/s)'].min():.3f} .. "
            f"{tp['ratio B/A (TFLOP/s)'].max():.3f}"
        )
        return lines

    def _safety_audit_lines(self) -> list[str]:
        lines = []
        sf = self.safety
        lines.append(f"safety verdicts changed: {'not in both sets' if sf is None else len(sf)}")
        if sf is not None:
            lines += _capped(
                [
                    f"  {r['kernel']} {r['edge']} {r['shape (MxNxK)']} {r['policy']}: "
                    f"{r['verdict']}"
                    for _, r in sf.iterrows()
                ]
            )
        au = self.audit
        if au is None:
            lines.append("tuned-table audit rows changed: not in both sets")
            return lines
        lines.append(
            f"tuned-table audit rows changed: {len(au)} "
            f"({', '.join(f'{n} {c}' for c, n in sorted(au['change'].value_counts().items()))}"
            f"{', ' if len(au) else ''}{self.newly_unsafe} newly unsafe)"
        )
        ordered = pd.concat([au[au["newly unsafe"]], au[~au["newly unsafe"]]])
        listed = [
            f"  {r['change']}{' NEWLY UNSAFE' if r['newly unsafe'] else ''}: {r['table']} "
            f"{r['shape (MxNxK)']}: {r['A']} -> {r['B']}"
            for _, r in ordered.iterrows()
        ]
        return lines + _capped(listed, max(TERMINAL_ROWS, self.newly_unsafe))

    def as_json(self) -> dict[str, Any]:
        """Everything in the summary as data, for scripts."""

        def records(df: pd.DataFrame | None) -> list[dict[str, Any]] | None:
            if df is None:
                return None
            return json.loads(df.to_json(orient="records"))

        return {
            "a": set_label(self.a),
            "b": set_label(self.b),
            "differs": self.differs,
            "verdict_changes": self.verdict_changes(),
            "newly_unsafe": self.newly_unsafe,
            "kernels": records(self.kernels),
            "manifest": records(self.manifest),
            "code_objects": [vars(c) for c in self.code_objects],
            "provenance": records(self.provenance),
            "roundtrip": records(self.roundtrip),
            **{name: records(df) for name, df in self.gemm.items()},
            "safety": records(self.safety),
            "audit": records(self.audit),
            "throughput": records(self.throughput),
        }


def _capped(lines: list[str], limit: int = TERMINAL_ROWS) -> list[str]:
    """At most `limit` lines, then how many more (the report and --json list them all)."""
    if len(lines) <= limit:
        return lines
    return [*lines[:limit], f"  ... {len(lines) - limit} more (see -o DIR or --json)"]


def set_label(rs: ResultSet) -> str:
    return f"{rs.aiter_id} · {rs.toolchain_id} · {rs.device_id} ({rs.directory.name})"


def compare_sets(a: ResultSet, b: ResultSet) -> Comparison:
    return Comparison(
        a=a,
        b=b,
        kernels=kernel_list_changes(a, b),
        manifest=manifest_changes(a, b),
        code_objects=code_object_changes(a, b),
        provenance=provenance_changes(a, b),
        roundtrip=roundtrip_changes(a, b),
        gemm={name: gemm_changes(a, b, name) for name in GEMM_METRICS},
        safety=safety_changes(a, b),
        audit=audit_changes(a, b),
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
                "instruction diff": x.instructions,
                "asm lines changed": x.asm_lines_changed,
                "descriptor / metadata": "; ".join(x.descriptor) or "same",
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


def _audit_section(c: Comparison) -> Section:
    sec = _table_section("audit", "Tuned-table audit", c.audit, "tuned-table rows")
    if c.audit is not None and len(c.audit):
        sec.verdict += f", {c.newly_unsafe} newly unsafe"
    return sec


def comparison_sections(c: Comparison, out_dir: Path | None) -> list[Section]:
    sections = [
        _table_section("kernels", "Kernels added, removed, renamed", c.kernels, "kernels"),
        _table_section("manifest", "Manifest attributes", c.manifest, "manifest attributes"),
        _code_object_section(c),
        _table_section("source", "aiter source and digests", c.provenance, "source facts"),
    ]
    if len(c.provenance):
        sections[-1].state = "info"
    sections.append(
        _table_section("roundtrip", "Round-trip verdicts", c.roundtrip, "round-trip verdicts")
    )
    sections.append(
        _table_section("verify", "Verification results", c.gemm["verify"], "verification results")
    )
    sections.append(_table_section("splitk", "splitK errors", c.gemm["splitk"], "splitK results"))
    sections.append(_table_section("safety", "Shape-edge safety", c.safety, "safety verdicts"))
    sections.append(_audit_section(c))
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
