"""What changed between two result sets, one function per kind of change: code objects (bytes,
descriptor and metadata facts, instructions), the kernel list and manifest, the aiter source, and
the rows of each table (round trip, GEMM stages, safety, audit, throughput)."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from f4pipe.aiter.hostfacts import HOST_FACTS_KEY
from f4pipe.arch.gfx950 import ARCH
from f4pipe.compare.asmfacts import fact_changes, instruction_diff
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import read_input_text
from f4pipe.core.layout import BASE_VARIANTS, K_PADDINGS, ROUNDTRIP_DIR, SCALE_PADDINGS
from f4pipe.core.schemas import KERNEL_EXTRA_COLUMNS
from f4pipe.pipeline.archive import PROVENANCE_NAME
from f4pipe.pipeline.resultset import RUN_KEY, ResultSet, find_aiter_provenance
from f4pipe.report.render import (
    fmt_value,
    shape_label,
    short_kernel,
)
from f4pipe.report.sections import VERIFY_METRICS

ASM_DIFF_LINES = 40  # per kernel; the full diff is one `diff` of the two .s files away
#: The stages whose error metrics a comparison lines up run by run (the report's columns).
GEMM_METRICS = {"verify": VERIFY_METRICS, "splitk": VERIFY_METRICS}


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
    *KERNEL_EXTRA_COLUMNS,  # gfx1250's own columns (null for gfx950's kernels)
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
    rows = manifest_attribute_changes(a, b)
    ha, hb = (aiter_fetch(rs).get("manifest_header") for rs in (a, b))
    if ha and hb and ha != hb:
        rows.append({"kernel": "(manifest CSV)", "attribute": "header", "A": ha, "B": hb})
    return pd.DataFrame(rows, columns=["kernel", "attribute", "A", "B"])


def manifest_attribute_changes(a: ResultSet, b: ResultSet) -> list[dict[str, str]]:
    """Per kernel in both kernels tables (renamed ones paired), each attribute that differs."""
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
    return rows


# ---------------------------------------------------------------------------------------------
# Provenance


def aiter_fetch(rs: ResultSet) -> dict[str, Any]:
    """The fetch record of the set's aiter: the archive's copy, else resources/ beside results/
    ({} when neither exists)."""
    archived = rs.directory / PROVENANCE_NAME
    if archived.is_file():
        record = _json_object(archived).get("aiter_fetch")
        return record if isinstance(record, dict) else {}
    path = find_aiter_provenance(rs.directory.resolve(), rs.aiter_id)
    return _json_object(path) if path is not None else {}


def _json_object(path: Path) -> dict[str, Any]:
    """A JSON object file compare reads, or one InputError naming it (exit 2)."""
    try:
        value = json.loads(read_input_text(path, "provenance record"))
    except ValueError as exc:
        raise InputError(f"{path}: not a JSON provenance record ({exc}); re-create it") from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: a provenance record must be a JSON object")
    return value


def _source_facts(record: dict[str, Any]) -> dict[str, str]:
    """The facts of a fetch record a reader compares: source, digests of manifest and tables."""
    if not record:
        return {}
    out = {
        f"source {k}": str(v)
        for k, v in sorted(record.get("source", {}).items())
        if k != HOST_FACTS_KEY  # compared fact by fact (compare.hostfacts)
    }
    out["content sha256"] = str(record.get("content_sha256", "-"))
    for name, info in sorted(record.get("files", {}).items()):
        if name.endswith(".csv"):
            out[f"manifest {name} sha256"] = info["sha256"]
    tables = record.get("tables")
    out["tuned tables"] = "not recorded" if tables is None else str(len(tables))
    for rel, info in sorted((tables or {}).items()):
        out[f"tuned table {rel} sha256"] = info["sha256"]
    out["fetched by f4pipe"] = str(record.get("f4pipe_version", "-"))
    out.update(_architecture_facts(record))
    return out


#: Item prefix of an architecture's f4gemm directory in the source facts.
ARCHITECTURE_ITEM = "architecture "


def _architecture_facts(record: dict[str, Any]) -> dict[str, str]:
    """Per architecture beside gfx950 (provenance `architectures`), how many code objects it
    holds and its manifest's digest: an architecture that appeared or disappeared is a row."""
    out: dict[str, str] = {}
    for arch, info in sorted(record.get("architectures", {}).items()):
        files = info.get("files", {})
        count = sum(name.endswith(".co") for name in files)
        out[f"{ARCHITECTURE_ITEM}{arch}"] = f"{count} code objects"
        for name, file in sorted(files.items()):
            if name.endswith(".csv"):
                out[f"{arch} manifest {name} sha256"] = file["sha256"]
    return out


def _absent(item: str) -> str:
    """What a fact missing from one record reads as: an architecture is "absent"."""
    return "absent" if item.startswith(ARCHITECTURE_ITEM) else "-"


def provenance_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame:
    """What differs between the two fetch records (fetch times aside)."""
    return fetch_record_changes(aiter_fetch(a), aiter_fetch(b))


def fetch_record_changes(ra: dict[str, Any], rb: dict[str, Any]) -> pd.DataFrame:
    """What differs between two fetch records (provenance.json): item, A, B."""
    fa, fb = _source_facts(ra), _source_facts(rb)
    if not fa or not fb:
        missing = [label for label, f in (("A", fa), ("B", fb)) if not f]
        return pd.DataFrame(
            [{"item": "aiter fetch record", "A": "", "B": f"not found for {', '.join(missing)}"}]
        )
    rows = [
        {"item": k, "A": fa.get(k, _absent(k)), "B": fb.get(k, _absent(k))}
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


def change_text(a: object, b: object) -> str:
    """`a`, or `a -> b` when the two differ (as the report formats them)."""
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
                **{
                    c: change_text(x, y)
                    for c, (x, y) in zip(["status", *metrics], pairs, strict=True)
                },
            }
        )
    return pd.DataFrame(rows)


SAFETY_KEY = ["variant", "kernel", "edge_class", "m", "n", "k", "policy", "scale_pad", "k_pad"]
#: What a safety table written before the K-tail classes ran every cell under: the C++ driver's
#: scale padding, A and B unpadded in K (core.layout SCALE_PADDINGS[0], K_PADDINGS[0]).
PADDING_BEFORE_K_TAILS = {"scale_pad": SCALE_PADDINGS[0], "k_pad": K_PADDINGS[0]}


def _with_paddings(table: pd.DataFrame) -> pd.DataFrame:
    """The safety table with its padding columns, filled for a set written before them: the
    K-tail classes run one shape under several paddings, so a cell is known only with them.
    And its variant, filled (original) for a set written before edits were swept."""
    missing = {c: v for c, v in PADDING_BEFORE_K_TAILS.items() if c not in table.columns}
    table = table.assign(**missing) if missing else table
    variant = table["variant"] if "variant" in table.columns else None
    return table.assign(
        variant=BASE_VARIANTS[0] if variant is None else variant.fillna(BASE_VARIANTS[0])
    )


def safety_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame | None:
    """Shape-edge cells whose verdict changed, or that only one set has. None when either set
    lacks the table."""
    ta, tb = a.table("safety"), b.table("safety")
    if ta is None or tb is None:
        return None
    cols = [*SAFETY_KEY, "verdict", "bad", "races"]
    m = merge_sets(_with_paddings(ta)[cols], _with_paddings(tb)[cols], SAFETY_KEY)
    rows = []
    for _, r in m.iterrows():
        pairs = {c: (r[f"{c} A"], r[f"{c} B"]) for c in ("verdict", "bad", "races")}
        if all(fmt_value(x) == fmt_value(y) for x, y in pairs.values()):
            continue
        rows.append(
            {
                "variant": r["variant"],
                "kernel": short_kernel(r["kernel"]),
                "edge": r["edge_class"],
                "shape (MxNxK)": f"{r['m']}x{r['n']}x{r['k']}",
                "policy": r["policy"],
                "padding": r["scale_pad"] + ("+0K" if r["k_pad"] == "zeros" else ""),
                **{c: change_text(x, y) for c, (x, y) in pairs.items()},
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
    state += f" ({emulated})" if isinstance(emulated, str) and emulated else ""
    finding = r.get(f"lookup_finding {side}")
    return state + (f" [{finding}]" if isinstance(finding, str) and finding else "")


def audit_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame | None:
    """Tuned-table rows added, removed or changed (kernel, splitK or verdict), each marked when
    it is newly unsafe. Rows are matched by (table, gfx, cu_num, M, N, K); a table without the
    gfx column (before aiter added it) holds gfx950 rows. None when either set lacks the table."""
    ta, tb = a.table("audit"), b.table("audit")
    if ta is None or tb is None:
        return None
    cols = [*AUDIT_KEY, "line", "kernel", "symbol", "log2_k_split", "status", "emulated"]
    cols += ["lookup_finding"]  # null in sets written before the lookup model
    fa, fb = (t[cols].assign(gfx=t["gfx"].fillna("").replace("", ARCH)) for t in (ta, tb))
    m = merge_sets(fa.drop_duplicates(AUDIT_KEY), fb.drop_duplicates(AUDIT_KEY), AUDIT_KEY)
    rows = []
    for _, r in m.iterrows():
        state_a, state_b = _audit_state(r, "A"), _audit_state(r, "B")
        if state_a == state_b:
            continue
        change = "added" if state_a == "-" else "removed" if state_b == "-" else "changed"
        rows.append(
            {
                "table": r["csv"] + (f" [{r['gfx']}]" if r["gfx"] != ARCH else ""),
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


TUNE_KEY = ["list", "m", "n", "k"]


def _pick_state(r: pd.Series, side: str) -> str:
    """One side of a tuned shape as a reader compares it: the pick and split, or the status."""
    status = r[f"status {side}"]
    if not isinstance(status, str):
        return "-"
    if pd.isna(r[f"kernel {side}"]) or status != "tuned":
        return status
    return f"{short_kernel(str(r[f'kernel {side}']))} splitK={int(r[f'log2_k_split {side}'])}"


def tune_changes(a: ResultSet, b: ResultSet) -> pd.DataFrame | None:
    """Tuned shapes whose pick changed (kernel, split, or no safe kernel any more), added or
    removed, matched by (shape list, M, N, K); with both predicted times. None when either set
    lacks the table."""
    ta, tb = a.table("tune"), b.table("tune")
    if ta is None or tb is None:
        return None

    def shapes(t: pd.DataFrame) -> pd.DataFrame:
        picked = t[t["picked"]].drop_duplicates(TUNE_KEY)
        lacking = t[t["status"] != "tuned"].drop_duplicates(TUNE_KEY).assign(kernel=None)
        cols = [*TUNE_KEY, "kernel", "log2_k_split", "status", "us_pred"]
        return pd.concat([picked, lacking])[cols]

    m = merge_sets(shapes(ta), shapes(tb), TUNE_KEY)
    rows = []
    for _, r in m.iterrows():
        state_a, state_b = _pick_state(r, "A"), _pick_state(r, "B")
        if state_a == state_b:
            continue
        rows.append(
            {
                "list": r["list"],
                "shape (MxNxK)": f"{r['m']}x{r['n']}x{r['k']}",
                "change": "added" if state_a == "-" else "removed" if state_b == "-" else "changed",
                "A": state_a,
                "B": state_b,
                "us A (pred)": fmt_value(r["us_pred A"]),
                "us B (pred)": fmt_value(r["us_pred B"]),
            }
        )
    columns = ["list", "shape (MxNxK)", "change", "A", "B", "us A (pred)", "us B (pred)"]
    return pd.DataFrame(rows, columns=columns)


#: What makes two measurements come from different machines (f4pipe.devices.devinfo columns).
MACHINE_KEYS = ("device_fingerprint", "rocm_version")


def _machine_differs(r: pd.Series) -> str:
    """Why two rows are from different machines ("" if they are not known to be)."""
    for key in MACHINE_KEYS:
        va, vb = r.get(f"{key} A"), r.get(f"{key} B")
        if isinstance(va, str) and isinstance(vb, str) and va and vb and va != vb:
            return f"{key} {va} vs {vb}"
    return ""


def throughput_deltas(
    a: ResultSet, b: ResultSet, floor_pct: float | None = None, across_machines: bool = False
) -> pd.DataFrame | None:
    """Measured runs in both sets, B against A. Rows whose launch times both sets kept are
    judged against the noise (f4pipe.host.benchstats.judge): `change` is "slower", "faster" or
    "" (within noise); rows timed before the protocol recorded spread are "not judged", and so
    are rows from different machines (device fingerprint or ROCm release) unless
    `across_machines`, which then labels each judgement."""
    from f4pipe.host.benchstats import FLOOR_PCT, judge, summarize

    ta, tb = a.table("bench"), b.table("bench")
    if ta is None or tb is None:
        return None
    cols = [*RUN_KEY, "us", "tflops", "launch_us", *MACHINE_KEYS]
    ma, mb = (t[t["status"] == "measured"][cols] for t in (ta, tb))
    m = merge_sets(ma, mb, RUN_KEY, how="inner")
    if not len(m):
        return None
    m["ratio B/A (TFLOP/s)"] = m["tflops B"] / m["tflops A"]
    changes, judged, lows, highs = [], [], [], []
    spans: tuple[list, list] = ([], [])  # per side, TFLOP/s at the ends of the interval
    for _, r in m.iterrows():
        la, lb = r["launch_us A"], r["launch_us B"]
        if la is None or lb is None or not len(la) or not len(lb):
            changes.append("")
            judged.append("not judged: no launch times recorded")
            lows.append(None)
            highs.append(None)
            spans[0].append((None, None))
            spans[1].append((None, None))
            continue
        sa, sb = summarize(la), summarize(lb)  # TFLOP/s B/A = us A / us B
        lows.append(sa.ci_low / sb.ci_high)
        highs.append(sa.ci_high / sb.ci_low)
        flop = 2.0 * r["m"] * r["n"] * r["k"] / 1e6
        spans[0].append((flop / sa.ci_high, flop / sa.ci_low))
        spans[1].append((flop / sb.ci_high, flop / sb.ci_low))
        other = _machine_differs(r)
        if other and not across_machines:
            changes.append("")
            judged.append(f"not judged: different machines ({other}); --across-machines")
            continue
        j = judge(sa, sb, FLOOR_PCT if floor_pct is None else floor_pct)
        changes.append(j.change)
        judged.append(j.render() + (f" ACROSS MACHINES ({other})" if other else ""))
    m["change"] = changes
    m["B vs A (median us)"] = judged
    m["ratio lo"] = lows  # the ratio's range from the two runs' 95 % intervals
    m["ratio hi"] = highs
    for side, span in zip("AB", spans, strict=True):
        m[f"tflops {side} lo"] = [lo for lo, _ in span]
        m[f"tflops {side} hi"] = [hi for _, hi in span]
    m.insert(2, "shape (MxNxK /split)", [shape_label(r) for _, r in m.iterrows()])
    m["kernel"] = m["kernel"].map(short_kernel)
    dropped = ["m", "n", "k", "log2_k_split", "launch_us A", "launch_us B"]
    dropped += [f"{key} {side}" for key in MACHINE_KEYS for side in "AB"]
    return m.drop(columns=dropped).reset_index(drop=True)
