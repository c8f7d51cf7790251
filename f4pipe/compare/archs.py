"""Every architecture a result set holds, compared alike: gfx950's kernels and each other
architecture's (`architectures/<arch>/`, aiter's gfx1250 f4gemm) are added, removed, renamed,
rebuilt (bytes changed), re-described (manifest attributes) or re-judged (round trip) by the
same functions (f4pipe.compare.changes), each change named with its architecture.

An update that rebuilt every gfx1250 object once read as "code objects changed: 0": compare
looked at gfx950's tables alone. An architecture's tables are read as a set of their own (its
directory holds its round trip's `.s` files), so nothing below knows which architecture it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from f4pipe.arch.gfx950 import ARCH
from f4pipe.compare.changes import (
    CodeObjectChange,
    code_object_changes,
    kernel_list_changes,
    manifest_attribute_changes,
    roundtrip_changes,
)
from f4pipe.core.layout import ARCHS_DIR, TABLES
from f4pipe.pipeline.resultset import ResultSet
from f4pipe.report.render import short_kernel

#: The kinds of change counted per architecture (verdict_changes: "<arch> <kind>").
ARCH_KINDS = ("kernels", "manifest", "code objects", "roundtrip")


@dataclass
class ArchitectureChanges:
    """What changed in one architecture's code objects (not gfx950's: Comparison has those)."""

    arch: str
    kernels: pd.DataFrame
    manifest: pd.DataFrame
    code_objects: list[CodeObjectChange]
    roundtrip: pd.DataFrame

    def counts(self) -> dict[str, int]:
        """Per kind, as verdict_changes counts it (prefixed with the architecture)."""
        sizes = (len(self.kernels), len(self.manifest), len(self.code_objects))
        return {
            f"{self.arch} {kind}": n
            for kind, n in zip(ARCH_KINDS, (*sizes, len(self.roundtrip)), strict=True)
        }

    def summary_lines(self) -> list[str]:
        lines = [f"{self.arch} code objects changed: {len(self.code_objects)}"]
        lines += [
            f"  {c.change}: {self.arch} {c.kernel} ({c.instructions or 'no assembly to diff'})"
            for c in self.code_objects
        ]
        lines.append(f"{self.arch} kernels added/removed/renamed: {len(self.kernels)}")
        lines += [
            f"  {r['change']}: {self.arch} {r['kernel']}" + (f" -> {r['to']}" if r["to"] else "")
            for _, r in self.kernels.iterrows()
        ]
        lines.append(f"{self.arch} manifest attributes changed: {len(self.manifest)}")
        lines += [
            f"  {self.arch} {r['kernel']} {r['attribute']}: {r['A']} -> {r['B']}"
            for _, r in self.manifest.iterrows()
        ]
        lines.append(f"{self.arch} round-trip verdicts changed: {len(self.roundtrip)}")
        lines += [
            f"  {self.arch} {r['kernel']}: equivalent {r['equivalent A']} -> {r['equivalent B']}"
            for _, r in self.roundtrip.iterrows()
        ]
        return lines

    def as_json(self) -> dict[str, Any]:
        def records(df: pd.DataFrame) -> list[dict[str, Any]]:
            return json.loads(df.to_json(orient="records"))

        return {
            "kernels": records(self.kernels),
            "manifest": records(self.manifest),
            "code_objects": [vars(c) for c in self.code_objects],
            "roundtrip": records(self.roundtrip),
        }


def architecture_view(rs: ResultSet, arch: str) -> ResultSet:
    """One other architecture's tables as a set of their own (None where it has none)."""
    tables = rs.arch_tables.get(arch, {})
    return ResultSet(
        rs.directory / ARCHS_DIR / arch, {name: tables.get(name) for name in TABLES}, None
    )


def architecture_changes(a: ResultSet, b: ResultSet) -> list[ArchitectureChanges]:
    """Per architecture beside gfx950 that either set holds, in name order."""
    out = []
    for arch in sorted(a.arch_tables.keys() | b.arch_tables.keys()):
        va, vb = architecture_view(a, arch), architecture_view(b, arch)
        manifest = pd.DataFrame(
            manifest_attribute_changes(va, vb), columns=["kernel", "attribute", "A", "B"]
        )
        out.append(
            ArchitectureChanges(
                arch,
                kernel_list_changes(va, vb),
                manifest,
                code_object_changes(va, vb),
                roundtrip_changes(va, vb),
            )
        )
    return out


def card_counts(
    kernels: pd.DataFrame,
    code_objects: list[CodeObjectChange],
    manifest: pd.DataFrame,
    roundtrip: pd.DataFrame,
) -> dict[str, int]:
    """Kernels added, removed, renamed, and changed (bytes, manifest attributes or round-trip
    verdict: each kernel once), as the report's first card names them."""
    counts = {
        change: int((kernels["change"] == change).sum()) if len(kernels) else 0
        for change in ("added", "removed", "renamed")
    }
    changed = {short_kernel(c.kernel) for c in code_objects if c.change == "changed"}
    changed |= {short_kernel(k) for k in manifest.get("kernel", []) if not k.startswith("(")}
    changed |= set(roundtrip.get("kernel", []))  # already short
    changed -= {short_kernel(k) for k in kernels.get("kernel", [])}  # added, removed, renamed
    changed -= {short_kernel(k) for k in kernels.get("to", []) if k}
    counts["changed"] = len(changed)
    return counts


def card_text(counts: dict[str, int]) -> str:
    """ "4 kernels added, 5 changed" (only the kinds that happened)."""
    return ", ".join(
        f"{n} {'kernels ' if i == 0 else ''}{kind}"
        for i, (kind, n) in enumerate((k, n) for k, n in counts.items() if n)
    )


def per_architecture_cards(
    gfx950: dict[str, int], others: list[ArchitectureChanges]
) -> dict[str, str]:
    """Architecture -> its card text, for each architecture where a kernel changed."""
    cards = {ARCH: gfx950} | {
        o.arch: card_counts(o.kernels, o.code_objects, o.manifest, o.roundtrip) for o in others
    }
    return {arch: card_text(counts) for arch, counts in cards.items() if any(counts.values())}
