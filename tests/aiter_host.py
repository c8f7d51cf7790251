"""Later aiter revisions' host code, made in a test from the pinned wheel's own files (read at
run time, never stored here): tests/test_hostfacts.py, test_update.py."""

from __future__ import annotations


def in_e8m0_shuffle(text: str, old: str, new: str) -> str:
    """`text` with the first `old` inside e8m0_shuffle's body replaced by `new`."""
    start = text.index("def e8m0_shuffle(")
    at = text.index(old, start)
    assert at < text.index("\ndef ", start + 1)
    return text[:at] + new + text[at + len(old) :]
