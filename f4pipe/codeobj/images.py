"""One read per code object and command: the scope inside which f4pipe.codeobj.codeobject
keeps what it parsed by path. Kept apart from the ELF reader so that the command line can open
the scope without importing it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from f4pipe.core import fsio

#: (inode, size, mtime) of a file: a file that changes on disk without f4pipe's writes is read
#: again.
FileIdentity = tuple[int, int, int]
#: The code objects read inside a `shared_images()` scope, by resolved path; None outside one.
_shared: dict[Path, tuple[FileIdentity, Any]] | None = None


@contextlib.contextmanager
def shared_images() -> Iterator[None]:
    """Inside, `CodeObject.read` reads and parses each file once, and every consumer (the
    static checks, the emulator's loader, the predictor, the round trip, `try`) gets that one
    CodeObject and through it one decoded Program per kernel (f4pipe.codeobj.program). A file
    that an atomic write of f4pipe's replaces (f4pipe.core.fsio), or that changes on disk, is
    read again. Each command of the CLI runs inside one scope; outside, every read is fresh."""
    global _shared
    outer = _shared
    _shared = {} if outer is None else outer
    try:
        yield
    finally:
        _shared = outer


def _forget(replaced: Path) -> None:
    if _shared:
        top = replaced.resolve()  # a path f4pipe has just written: no loop
        for key in [k for k in _shared if k == top or top in k.parents]:
            del _shared[key]


fsio.REPLACED_HOOKS.append(_forget)


def _identity(path: Path) -> FileIdentity:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def lookup(path: Path) -> Any:
    """The CodeObject read from `path` in this scope, if the file has not changed since."""
    if _shared is None:
        return None
    try:
        hit = _shared.get(path.resolve())
        return hit[1] if hit is not None and hit[0] == _identity(path) else None
    except (OSError, RuntimeError):  # unreadable now, or a symlink loop: the reader says why
        return None


def keep(path: Path, code_object: Any) -> None:
    """Remember what was read from `path` (in a scope; outside one, nothing is kept)."""
    if _shared is not None:
        with contextlib.suppress(OSError, RuntimeError):
            _shared[path.resolve()] = (_identity(path), code_object)
