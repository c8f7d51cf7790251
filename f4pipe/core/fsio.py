"""Atomic file output: a reader never sees a half-written file, a failed stage leaves nothing.

Everything f4pipe writes goes through here: write to a temporary file in the target directory,
fsync, then rename over the target (rename is atomic within one file system). Everything it
reads from a user goes through `read_input_bytes` / `read_input_text`: like readelf, they refuse
what is not a regular file (a directory, /dev/zero, a FIFO), bound the size before reading, and
turn every OSError (permission denied, symlink loop, name too long) into one InputError line
naming the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from f4pipe.core.errors import InputError

#: Default bound on one input file (a code object is < 1 MB, a result-set table a few MB).
MAX_INPUT_BYTES = 1 << 30
MAX_JSON_BYTES = 64 << 20
#: Called with each path an atomic write has just replaced (a file, or a directory whole):
#: readers that keep what they read by path (f4pipe.codeobj.codeobject.shared_images) forget it.
REPLACED_HOOKS: list[Callable[[Path], None]] = []


def _replaced(target: Path) -> None:
    for hook in REPLACED_HOOKS:
        hook(target)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(target: str | os.PathLike[str], what: str = "output") -> None:
    """Refuse, before any work, an output path that cannot be created: one under a regular
    file, one whose nearest existing directory is read-only, or a directory where a file goes."""
    target = Path(target)
    if target.is_dir():
        raise InputError(f"{what} {target}: is a directory; name a file")
    _check_creatable_under(target, what)


def check_writable_dir(target: str | os.PathLike[str], what: str) -> None:
    """Refuse a directory that outputs cannot be written into, or created at: a file, a path
    under a file, a read-only directory (found by the caller before any job starts, so a
    mistaken config costs no earlier output)."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise InputError(f"{what} {target}: is a file, not a directory; name a directory")
    if target.is_dir():
        if not os.access(target, os.W_OK | os.X_OK):
            raise InputError(f"{what} {target}: directory is not writable")
        return
    _check_creatable_under(target, what)


def _check_creatable_under(target: Path, what: str) -> None:
    """`target` can be created: its nearest existing ancestor is a writable directory."""
    parent = target.parent
    try:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise InputError(f"{what} {target}: {parent} is not a directory")
    except OSError as exc:
        raise InputError(f"{what} {target}: {exc.strerror or exc}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{what} {target}: directory {parent} is not writable")


def _make_parent(target: Path) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        check_writable(target)  # names the component in the way
        raise InputError(f"cannot create {target.parent}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `target`; on success rename it over `target`."""
    target = Path(target)
    _make_parent(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp creates 0600; give the file the mode an ordinary open() would.
    tmp_path.chmod(0o666 & ~_umask())
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, target)
        _replaced(target)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_bytes(target: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def write_text(target: str | os.PathLike[str], text: str) -> None:
    write_bytes(target, text.encode())


def write_json(target: str | os.PathLike[str], obj: Any) -> None:
    write_text(target, json_text(obj, indent=2) + "\n")


def json_text(obj: Any, indent: int | None = None) -> str:
    """Strict JSON: a non-finite float (which json.dumps would write as a bare NaN or Infinity,
    invalid JSON) becomes null, so every reader can parse what f4pipe prints or writes."""
    return json.dumps(_finite(obj), indent=indent, sort_keys=True, default=str, allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary directory beside `target`; on success it replaces `target` whole."""
    target = Path(target)
    _make_parent(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp creates 0700
    try:
        yield tmp
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
        _replaced(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_input_bytes(
    path: str | os.PathLike[str], what: str, limit: int = MAX_INPUT_BYTES
) -> bytes:
    """The bytes of the user's file `path` (a `what`, e.g. "code object"), or an InputError."""
    path = Path(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise InputError(f"{path}: is {kind}, not a {what}")
        if st.st_size > limit:
            raise InputError(too_large(path, what, st.st_size, limit))
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(too_large(path, what, len(data), limit))
    return data


def read_input_text(path: str | os.PathLike[str], what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """`read_input_bytes` decoded as UTF-8; anything else is an InputError naming the file."""
    data = read_input_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: not a UTF-8 text {what} (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def read_json_file(path: str | os.PathLike[str], what: str) -> Any:
    """A JSON file given to f4pipe, parsed; malformed JSON is an InputError naming the file."""
    text = read_input_text(path, what, MAX_JSON_BYTES)
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"{path}: not a valid {what} (JSON): {exc}") from None


def too_large(path: Path, what: str, size: int, limit: int) -> str:
    return f"{path}: {what} of {size} bytes exceeds the {limit}-byte limit for one input file"
