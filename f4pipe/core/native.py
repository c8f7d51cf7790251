"""Small C sources f4pipe compiles on the user's machine with the system C compiler.

Two pieces of f4pipe are C: the HIP shim (f4pipe.hipshim, a libamdhip64.so that has to be a
real library) and the emulator's FP4 MFMA fast path (f4pipe.emu.native, where numpy's
per-call floor is the emulator's largest cost). Both are built here, with the compiler that
CC names, else gcc, else cc. The HIP shim raises when none is found (it cannot exist
without one); the MFMA fast path is optional and its caller falls back to numpy.

`cached_library` keeps a build under f4pipe's cache, keyed by the source's bytes, the flags
and the machine type, and writes it atomically (a temporary file renamed into place), so
concurrent processes (parallel tests, Snakemake jobs) never load a half-written library.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from f4pipe.core.cache import cache_root
from f4pipe.core.errors import ToolchainError

#: Where cached_library keeps its builds under the cache root.
NATIVE_DIR = "native"


def c_compiler() -> str | None:
    """The C compiler to use: $CC, else gcc, else cc on PATH; None when there is none."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def compile_shared(
    source: Path, output: Path, flags: list[str], what: str, libraries: tuple[str, ...] = ()
) -> None:
    """Compile `source` into the shared library `output`, linked with `libraries` ("m");
    ToolchainError naming `what` when there is no compiler or the build fails."""
    compiler = c_compiler()
    if compiler is None:
        raise ToolchainError(f"no C compiler to build {what}: apt-get install gcc")
    command = [compiler, *flags, "-fPIC", "-shared", str(source), "-o", str(output)]
    command += [f"-l{name}" for name in libraries]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToolchainError(f"building {what} failed ({compiler}):\n{done.stderr.strip()}")


def cached_library(
    source: Path, flags: list[str], what: str, libraries: tuple[str, ...] = ()
) -> Path:
    """The shared library built from `source` with `flags` and `libraries`, compiled on first
    use and kept under the cache; ToolchainError as compile_shared."""
    key = hashlib.sha256()
    recipe = " ".join([*flags, *libraries]).encode()
    for part in (source.read_bytes(), recipe, platform.machine().encode()):
        key.update(part + b"\0")
    library = cache_root() / NATIVE_DIR / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if library.exists():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{library.name}.", dir=library.parent)
    os.close(handle)
    try:
        compile_shared(source, Path(temporary), flags, what, libraries)
        os.replace(temporary, library)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return library
