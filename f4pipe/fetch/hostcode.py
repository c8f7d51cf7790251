"""The release's host facts (f4pipe.aiter.hostfacts) read at fetch time from the source itself
(the wheel, the git tree or the local tree) and kept in the fetch record's source as
`host_facts`: the verdicts and compare read them from there, with each fact's file and line."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from f4pipe.aiter.hostfacts import HOST_FACTS_KEY, HOST_FILES, WHEEL_META, read_host_facts
from f4pipe.core.fsio import read_input_text

HOST_FACTS = HOST_FACTS_KEY


def _record(read: Any) -> dict[str, dict[str, str | int]]:
    return {name: fact.record() for name, fact in read_host_facts(read).items()}


def wheel_host_facts(wheel: Path) -> dict[str, dict[str, str | int]]:
    """The facts of a wheel (aiter's C++ sources sit below aiter_meta/ in it)."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())

        def read(path: str) -> str | None:
            for member in (path, WHEEL_META + path):
                if member in names:
                    return zf.read(member).decode("utf-8", errors="replace")
            return None

        return _record(read)


def tree_host_facts(root: Path | None) -> dict[str, dict[str, str | int]]:
    """The facts of an aiter tree (a git work tree or a local checkout or install; None: a
    source with no such tree, every fact then unknown)."""

    def read(path: str) -> str | None:
        if root is None:
            return None
        for candidate in (root / path, root / WHEEL_META / path):
            if candidate.is_file():
                return read_input_text(candidate, "aiter host source")
        return None

    return _record(read)


def aiter_root_above(directory: Path) -> Path | None:
    """The aiter tree a local f4gemm directory sits in: the nearest parent holding one of the
    host files (hsa/gfx950/f4gemm of a checkout, aiter_meta/hsa/... of an install)."""
    for parent in directory.resolve().parents:
        if any((parent / p).is_file() or (parent / WHEEL_META / p).is_file() for p in HOST_FILES):
            return parent
    return None
