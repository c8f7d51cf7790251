"""f4pipe's cache directory, the identity of its source, and what commands keep in the cache.

Some results depend on a kernel's bytes and f4pipe's own code alone, yet cost seconds: the
static wait-state and counter findings every emulator launch, `try`, `hazards` and the round
trip need of each kernel. A main job used to find them again in every stage's process (about
0.2 s per kernel and stage). `kept` keeps such a value under the cache, keyed by what it is
computed from and by `f4pipe_identity` (the package's version and a digest of its source), so
a development checkout never reads what other code computed; entries of another source are
removed when the first entry of a new one is written.

Only the command line keeps values (`f4pipe.cli.main` runs each command within
`keeping_between_commands`): a
library caller, a test that swaps a rule in, or a benchmark computes afresh, so nothing it
computes under a patched rule can reach a later command.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TypeVar

from f4pipe import __version__
from f4pipe.core.fsio import write_bytes

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Where `kept` values live under the cache root (one directory per f4pipe identity).
KEPT_DIR = "kept"
_KEEPING = False


def cache_root() -> Path:
    """f4pipe's cache (toolchains, wheels): $F4PIPE_CACHE, else $XDG_CACHE_HOME/f4pipe."""
    if os.environ.get("F4PIPE_CACHE"):
        return Path(os.environ["F4PIPE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "f4pipe"


@cache
def f4pipe_identity() -> str:
    """f4pipe's version and the sha256 over its source files (path and bytes, sorted)."""
    package = Path(__file__).resolve().parents[1]  # f4pipe/
    h = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".c") and "__pycache__" not in path.parts:
            h.update(path.relative_to(package).as_posix().encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return f"{__version__}+src.{h.hexdigest()[:16]}"


def version_dir(root_name: str) -> Path:
    """This f4pipe source's directory of the cache area `root_name`."""
    return cache_root() / root_name / f4pipe_identity()


def write_versioned(path: Path, data: bytes) -> None:
    """Write an entry under a version_dir (atomically); the first entry of a version removes
    the other versions' directories, which can never be read again."""
    version = _version_of(path)
    first = not version.is_dir()
    write_bytes(path, data)
    if first:
        for other in version.parent.iterdir():
            if other != version and other.is_dir():
                shutil.rmtree(other, ignore_errors=True)


def _version_of(path: Path) -> Path:
    identity = f4pipe_identity()
    while path.name != identity:
        if path.parent == path:
            raise ValueError(f"{path} is not under a version directory")
        path = path.parent
    return path


@contextmanager
def keeping_between_commands() -> Iterator[None]:
    """Within the block, `kept` reads and writes the cache (the command line's choice, see
    the module docstring); a command run in-process leaves it off again after."""
    global _KEEPING
    before, _KEEPING = _KEEPING, True
    try:
        yield
    finally:
        _KEEPING = before


def kept(kind: str, key: object, compute: Callable[[], T]) -> T:
    """compute(), kept under the cache by `kind` and `key` (a repr-stable value: tuples,
    strings, bytes, numbers) within keeping_between_commands. Entries are pickles this same
    f4pipe source wrote; one that cannot be read is computed again and replaced."""
    if not _KEEPING:
        return compute()
    digest = hashlib.sha256(repr(key).encode()).hexdigest()
    path = version_dir(KEPT_DIR) / kind / f"{digest}.pickle"
    try:
        return pickle.loads(path.read_bytes())
    except FileNotFoundError:
        pass
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        log.warning("recomputing %s: cannot read %s: %s", kind, path, exc)
    value = compute()
    try:
        write_versioned(path, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError as exc:
        log.warning("cannot keep %s in %s: %s", kind, path, exc)
    return value
