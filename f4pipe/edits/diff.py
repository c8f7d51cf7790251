"""The instruction-level diff of two listings: per-label blocks aligned, instruction texts
diffed within each block (changed, added, removed, moved), plus descriptor and metadata field
changes."""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from f4pipe.codeobj.descriptor import descriptor_fields
from f4pipe.edits.checks import Usage, limits_of, usage_of
from f4pipe.edits.listing import KernelListing, Line

# ---------------------------------------------------------------------------------------------
# The diff


@dataclass(frozen=True)
class InsnChange:
    kind: str  # added | removed | changed | moved
    block: str
    old: Line | None
    new: Line | None

    def render(self) -> str:
        if self.kind == "added":
            assert self.new is not None
            return f"  + {self.new.where:<22} {self.new.text}"
        if self.kind == "removed":
            assert self.old is not None
            return f"  - {self.old.where:<22} {self.old.text}"
        assert self.old is not None and self.new is not None
        if self.kind == "moved":
            return f"  > {self.old.where} -> {self.new.where:<10} {self.new.text}"
        return f"  ~ {self.new.where:<22} {self.old.text}\n    {'':<22} {self.new.text}"


@dataclass(frozen=True)
class FieldChange:
    name: str
    old: Any
    new: Any


@dataclass
class EditDiff:
    """An edit against its original: instructions, descriptor, metadata, usage."""

    original: KernelListing
    edited: KernelListing
    changes: list[InsnChange]
    blocks_added: list[str]
    blocks_removed: list[str]
    descriptor: list[FieldChange]
    metadata: list[FieldChange]
    usage_original: Usage
    usage_edited: Usage

    def count(self, kind: str) -> int:
        return sum(1 for c in self.changes if c.kind == kind)

    @property
    def identical(self) -> bool:
        return not (self.changes or self.descriptor or self.metadata)

    def summary(self) -> str:
        """One line: counts of each kind of change."""
        parts = [
            f"+{self.count('added')} added",
            f"-{self.count('removed')} removed",
            f"~{self.count('changed')} changed",
            f"{self.count('moved')} moved",
        ]
        extra = []
        if self.blocks_added or self.blocks_removed:
            extra.append(f"blocks +{len(self.blocks_added)} -{len(self.blocks_removed)}")
        extra.append(f"descriptor {'changed' if self.descriptor else 'same'}")
        extra.append(f"metadata {'changed' if self.metadata else 'same'}")
        return (
            f"{', '.join(parts)} instructions "
            f"({len(self.original.lines)} -> {len(self.edited.lines)}); {'; '.join(extra)}"
        )

    def render(self, max_changes: int | None = None) -> str:
        """The readable diff: header, instruction changes by block, descriptor, metadata,
        usage. `max_changes` shortens the instruction part (for the terminal)."""
        out = [
            f"original: {self.original.path} ({self.original.symbol})",
            f"edited:   {self.edited.source_path or self.edited.path}",
            f"summary:  {self.summary()}",
            "",
            "instructions (aligned by label; + added, - removed, ~ changed, > moved):",
        ]
        shown = self.changes if max_changes is None else self.changes[:max_changes]
        block = None
        for change in shown:
            if change.block != block:
                block = change.block
                out.append(f" {block}:")
            out.append(change.render())
        if not self.changes:
            out.append("  (none)")
        elif len(shown) < len(self.changes):
            out.append(f"  ... {len(self.changes) - len(shown)} more (see the diff file)")
        for name in self.blocks_added:
            out.append(f"  new block {name}")
        for name in self.blocks_removed:
            out.append(f"  block {name} removed")
        out.append("descriptor:" + ("" if self.descriptor else " same"))
        out.extend(
            f"  {c.name}: {_fmt(c.name, c.old)} -> {_fmt(c.name, c.new)}" for c in self.descriptor
        )
        out.append("metadata:" + ("" if self.metadata else " same"))
        out.extend(
            f"  {c.name}: {_fmt(c.name, c.old)} -> {_fmt(c.name, c.new)}" for c in self.metadata
        )
        out.append("usage:")
        out.append(f"  original: {self.usage_original.render()}")
        out.append(f"  edited:   {self.usage_edited.render()}")
        return "\n".join(out) + "\n"

    def as_json(self) -> dict[str, Any]:
        def line(x: Line | None) -> dict[str, Any] | None:
            return None if x is None else {"where": x.where, "addr": x.addr, "text": x.text}

        return {
            "original": str(self.original.path),
            "edited": str(self.edited.path),
            "symbol": self.original.symbol,
            "counts": {k: self.count(k) for k in ("added", "removed", "changed", "moved")},
            "instructions": {
                "original": len(self.original.lines),
                "edited": len(self.edited.lines),
            },
            "changes": [
                {"kind": c.kind, "block": c.block, "old": line(c.old), "new": line(c.new)}
                for c in self.changes
            ],
            "blocks_added": self.blocks_added,
            "blocks_removed": self.blocks_removed,
            "descriptor": [{"name": c.name, "old": c.old, "new": c.new} for c in self.descriptor],
            "metadata": [{"name": c.name, "old": c.old, "new": c.new} for c in self.metadata],
            "usage": {
                "original": self.usage_original.__dict__,
                "edited": self.usage_edited.__dict__,
            },
        }


def _fmt(name: str, value: Any) -> str:
    """Bit-field words in hex, everything else as is."""
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and ("rsrc" in name or "properties" in name)
    ):
        return f"0x{value:x}"
    return "(absent)" if value is None else repr(value)


def diff_listings(original: KernelListing, edited: KernelListing) -> EditDiff:
    """Align blocks by label, then diff each pair of blocks' instruction texts."""
    blocks_a, blocks_b = original.blocks(), edited.blocks()
    names_a, names_b = [b[0] for b in blocks_a], [b[0] for b in blocks_b]
    changes: list[InsnChange] = []
    added: list[str] = []
    removed: list[str] = []
    matcher = difflib.SequenceMatcher(None, names_a, names_b, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal" or (op == "replace" and a1 - a0 == b1 - b0):
            # Equal names, or renamed labels in the same places: compare contents pairwise.
            for (_, la), (_, lb) in zip(blocks_a[a0:a1], blocks_b[b0:b1], strict=True):
                changes.extend(_diff_block(la, lb))
            continue
        for name, lines in blocks_a[a0:a1]:
            removed.append(name)
            changes.extend(InsnChange("removed", name, x, None) for x in lines)
        for name, lines in blocks_b[b0:b1]:
            added.append(name)
            changes.extend(InsnChange("added", name, None, x) for x in lines)
    return EditDiff(
        original=original,
        edited=edited,
        changes=changes,
        blocks_added=added,
        blocks_removed=removed,
        descriptor=diff_descriptors(original, edited),
        metadata=diff_metadata(original.metadata, edited.metadata),
        usage_original=usage_of(original),
        usage_edited=usage_of(edited),
    )


def _diff_block(a: list[Line], b: list[Line]) -> list[InsnChange]:
    block = b[0].block if b else a[0].block
    out: list[InsnChange] = []
    ta, tb = [x.text for x in a], [x.text for x in b]
    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        if op != "replace":
            out.extend(InsnChange("removed", block, x, None) for x in a[a0:a1])
            out.extend(InsnChange("added", block, None, x) for x in b[b0:b1])
            continue
        out.extend(_pair_by_mnemonic(block, a[a0:a1], b[b0:b1]))
    return _find_moves(block, out)


def _pair_by_mnemonic(block: str, a: list[Line], b: list[Line]) -> list[InsnChange]:
    """Within a replaced run, same-mnemonic instructions in the same order are `changed`
    (an operand edited); the rest are removed or added."""
    out: list[InsnChange] = []
    ma, mb = [x.mnemonic for x in a], [x.mnemonic for x in b]
    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(None, ma, mb, autojunk=False).get_opcodes():
        if op == "equal":
            out.extend(
                InsnChange("changed", block, x, y) for x, y in zip(a[a0:a1], b[b0:b1], strict=True)
            )
        else:
            out.extend(InsnChange("removed", block, x, None) for x in a[a0:a1])
            out.extend(InsnChange("added", block, None, x) for x in b[b0:b1])
    return out


def _find_moves(block: str, changes: list[InsnChange]) -> list[InsnChange]:
    """A removed and an added instruction of identical text in one block is one move (in
    order: the first removed copy pairs with the first added copy)."""
    added = Counter(c.new.text for c in changes if c.kind == "added" and c.new is not None)
    removed = Counter(c.old.text for c in changes if c.kind == "removed" and c.old is not None)
    movable = added & removed
    if not movable:
        return changes
    targets: dict[str, list[Line]] = {}
    taken = Counter[str]()
    for c in changes:
        if c.kind == "added" and c.new is not None and taken[c.new.text] < movable[c.new.text]:
            taken[c.new.text] += 1
            targets.setdefault(c.new.text, []).append(c.new)
    moved_new = {id(x) for lines in targets.values() for x in lines}
    out = []
    for c in changes:
        if c.kind == "removed" and c.old is not None and targets.get(c.old.text):
            out.append(InsnChange("moved", block, c.old, targets[c.old.text].pop(0)))
        elif c.kind == "added" and id(c.new) in moved_new:
            continue
        else:
            out.append(c)
    return out


def descriptor_summary(listing: KernelListing) -> dict[str, int]:
    """The descriptor's fields plus what they decode to (granted registers)."""
    f = dict(descriptor_fields(listing.descriptor))
    lim = limits_of(listing)
    f.update(
        granulated_workitem_vgpr_count=lim.granulated_vgprs,
        granulated_wavefront_sgpr_count=lim.granulated_sgprs,
        accum_offset=lim.accum_offset,
        granted_vgprs=lim.vgprs,
        granted_agprs=lim.agprs,
        granted_sgprs=lim.sgprs,
    )
    return f


def diff_descriptors(a: KernelListing, b: KernelListing) -> list[FieldChange]:
    fa, fb = descriptor_summary(a), descriptor_summary(b)
    out = [FieldChange(k, fa[k], fb[k]) for k in fa if fa[k] != fb[k]]
    if not out and a.descriptor != b.descriptor:
        diff = [i for i in range(len(a.descriptor)) if a.descriptor[i] != b.descriptor[i]]
        out.append(FieldChange("reserved bytes", diff, diff))
    return out


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k in sorted(value, key=str):
            _flatten(value[k], f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        for i, x in enumerate(value):
            name = x.get(".name") if "kernels" in prefix else None
            _flatten(x, f"{prefix}[{name if name else i}]", out)
    else:
        out[prefix] = value


def diff_metadata(a: dict[str, Any], b: dict[str, Any]) -> list[FieldChange]:
    """Changed, added (old None) and removed (new None) metadata entries, by path."""
    fa: dict[str, Any] = {}
    fb: dict[str, Any] = {}
    _flatten(a, "", fa)
    _flatten(b, "", fb)
    keys = list(fa) + [k for k in fb if k not in fa]
    return [FieldChange(k, fa.get(k), fb.get(k)) for k in keys if fa.get(k) != fb.get(k)]
