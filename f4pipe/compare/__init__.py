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

The parts: `changes` (one function per kind of change) and `render` (sections, plot, files);
this module opens the sets and assembles the Comparison.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from f4pipe.compare.archs import (
    ArchitectureChanges,
    architecture_changes,
    card_counts,
    per_architecture_cards,
)
from f4pipe.compare.changes import (
    GEMM_METRICS,
    CodeObjectChange,
    aiter_fetch,
    audit_changes,
    change_text,
    code_object_changes,
    gemm_changes,
    kernel_list_changes,
    manifest_changes,
    provenance_changes,
    roundtrip_changes,
    safety_changes,
    throughput_deltas,
    tune_changes,
)
from f4pipe.compare.hostfacts import COLUMNS as HOST_COLUMNS
from f4pipe.compare.hostfacts import host_fact_changes
from f4pipe.core.errors import InputError
from f4pipe.pipeline.archive import SUFFIX, extract_archive
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.report.render import fmt_value

TERMINAL_ROWS = 20  # per list in the terminal summary; -o and --json carry every row


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
    tune: pd.DataFrame | None = None  # tuned picks that changed: predicted, not a verdict
    #: Each architecture beside gfx950 that either set holds (f4pipe.compare.archs).
    architectures: list[ArchitectureChanges] = field(default_factory=list)
    #: The release's host facts that changed (f4pipe.compare.hostfacts).
    host_facts: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=HOST_COLUMNS))

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
        for arch in self.architectures:
            counts |= arch.counts()
        counts["host facts"] = len(self.host_facts)
        return counts

    def architecture_cards(self) -> dict[str, str]:
        """Per architecture whose kernels changed: "4 kernels added, 5 changed"."""
        gfx950 = card_counts(self.kernels, self.code_objects, self.manifest, self.roundtrip)
        return per_architecture_cards(gfx950, self.architectures)

    @property
    def differs(self) -> bool:
        return any(self.verdict_changes().values())

    @property
    def regressions(self) -> int:
        """Runs judged slower than in A beyond the noise (f4pipe.host.benchstats.judge)."""
        tp = self.throughput
        return 0 if tp is None else int((tp["change"] == "slower").sum())

    @property
    def tuned_picks(self) -> int:
        """Tuned shapes whose pick changed, was added or removed (f4pipe tune)."""
        return 0 if self.tune is None else len(self.tune)

    @property
    def newly_unsafe(self) -> int:
        return 0 if self.audit is None else int(self.audit["newly unsafe"].sum())

    def summary_lines(self) -> list[str]:
        lines = [f"A: {set_label(self.a)}", f"B: {set_label(self.b)}"]
        lines.append(f"code objects changed: {len(self.code_objects)}")
        for c in self.code_objects:
            lines.append(
                f"  {c.change}: {c.kernel} (instructions {change_text(c.insns_a, c.insns_b)}, "
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
        lines.append(f"host facts changed (this release's host code): {len(self.host_facts)}")
        lines += [f"  {r['fact']}: {r['A']} -> {r['B']}" for _, r in self.host_facts.iterrows()]
        lines.append(f"round-trip verdicts changed: {len(self.roundtrip)}")
        for arch in self.architectures:
            lines += arch.summary_lines()
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
        lines += self._tune_lines()
        tp = self.throughput
        if tp is None:
            lines.append("throughput: not measured in both sets")
            return lines
        faster = int((tp["change"] == "faster").sum())
        unjudged = int(tp["B vs A (median us)"].str.startswith("not judged").sum())
        machines = int(tp["B vs A (median us)"].str.contains("different machines").sum())
        lines.append(
            f"throughput: {len(tp)} runs, B/A {tp['ratio B/A (TFLOP/s)'].min():.3f} .. "
            f"{tp['ratio B/A (TFLOP/s)'].max():.3f}; judged against the noise: "
            f"{self.regressions} slower, {faster} faster, {unjudged} not judged"
            + (f" ({machines} from different machines: --across-machines)" if machines else "")
        )
        lines += [
            f"  {r['variant']} {r['kernel']} {r['shape (MxNxK /split)']}: {r['B vs A (median us)']}"
            for _, r in tp.iterrows()
            if r["change"]
        ]
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

    def _tune_lines(self) -> list[str]:
        tn = self.tune
        if tn is None:
            return ["tuned picks changed: not in both sets"]
        lines = [f"tuned picks changed (PREDICTED, not a verdict): {len(tn)}"]
        return lines + _capped(
            [
                f"  {r['change']}: {r['list']} {r['shape (MxNxK)']}: {r['A']} -> {r['B']}"
                for _, r in tn.iterrows()
            ]
        )

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
            "regressions": self.regressions,
            "kernels": records(self.kernels),
            "manifest": records(self.manifest),
            "code_objects": [vars(c) for c in self.code_objects],
            "provenance": records(self.provenance),
            "roundtrip": records(self.roundtrip),
            **{name: records(df) for name, df in self.gemm.items()},
            "safety": records(self.safety),
            "audit": records(self.audit),
            "throughput": records(self.throughput),
            "tune": records(self.tune),
            "architecture_cards": self.architecture_cards(),
            "host_facts": records(self.host_facts),
            "architectures": {a.arch: a.as_json() for a in self.architectures},
        }


def _capped(lines: list[str], limit: int = TERMINAL_ROWS) -> list[str]:
    """At most `limit` lines, then how many more (the report and --json list them all)."""
    if len(lines) <= limit:
        return lines
    return [*lines[:limit], f"  ... {len(lines) - limit} more (see -o DIR or --json)"]


def set_label(rs: ResultSet) -> str:
    return f"{rs.aiter_id} · {rs.toolchain_id} · {rs.device_id} ({rs.directory.name})"


def compare_sets(
    a: ResultSet, b: ResultSet, *, floor_pct: float | None = None, across_machines: bool = False
) -> Comparison:
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
        throughput=throughput_deltas(a, b, floor_pct, across_machines),
        tune=tune_changes(a, b),
        architectures=architecture_changes(a, b),
        host_facts=host_fact_changes(aiter_fetch(a), aiter_fetch(b)),
    )
