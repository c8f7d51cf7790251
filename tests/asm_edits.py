"""Editing a shipped kernel's assembly in tests: the one kernel the editing tests edit, and
an edit that must hit exactly one place."""

from __future__ import annotations

#: The kernel the editing tests (edits, try, fit-resources, perf) change.
EDITED_KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"


def edited(base: str, old: str, new: str) -> str:
    """`base` with its one occurrence of `old` replaced (the edit must hit exactly one place)."""
    assert base.count(old) == 1, f"{old!r} occurs {base.count(old)} times"
    return base.replace(old, new)
