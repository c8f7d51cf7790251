"""The FP4 MFMA's compiled fast path (mfma_fp4.c), loaded once per process.

Why: the scaled MFMA was the emulator's largest cost, about a third of every stage's CPU, and
most of it numpy's per-call floor (gathers, tiny batched matmuls) rather than arithmetic.
mfma_fp4.c does the same arithmetic on the register file in place, operation for operation
where the order of operations matters: the numpy code stays the model, the C its faster equal
(tests/test_emu_native.py holds them bit for bit equal, NaN payloads included). Operands
other than vector registers (a constant C, scalar scales) take the numpy path.

The library is built with the system C compiler on first use and kept under f4pipe's cache
(f4pipe.core.native). Without a compiler, or with F4PIPE_NATIVE=0 in the environment, every
MFMA takes the numpy path: slower, never different.
"""

from __future__ import annotations

import ctypes
import logging
import os
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from f4pipe.core.errors import ToolchainError
from f4pipe.core.native import cached_library
from f4pipe.core.numerics import e8m0_to_float, fp4_to_float

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)

SOURCE_NAME = "mfma_fp4.c"
#: No -Werror here: a newer compiler's new warning must not cost a user the fast path
#: (tests/test_emu_native.py builds the source with -Werror).
FLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-ffp-contract=off"]
LIBRARIES = ("m",)
#: Set to 0 to run every MFMA through numpy (to compare, or to rule the C out).
ENVIRONMENT = "F4PIPE_NATIVE"

#: Twice each FP4 e2m1 value (integers, |x| <= 12) and each E8M0 byte's scale, the C's tables.
FP4_TWICE = (fp4_to_float(np.arange(16, dtype=np.uint8)) * 2).astype(np.int8)
E8M0_SCALE = np.ascontiguousarray(e8m0_to_float(np.arange(256, dtype=np.uint8)))

_POINTER, _INT64, _INT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_ARGUMENTS = [_POINTER, _INT64, _POINTER, _INT64] + [_INT64] * 5 + [_INT, _INT64, _INT]
_ARGUMENTS += [_POINTER, _POINTER]


def enabled() -> bool:
    return os.environ.get(ENVIRONMENT, "1") != "0"


@cache
def mfma_fp4() -> Callable[..., int] | None:
    """f4pipe_mfma_fp4 from the cached build, or None (no compiler, build failed, or
    F4PIPE_NATIVE=0): the caller then uses numpy."""
    if not enabled():
        return None
    try:
        with resources.as_file(resources.files(__package__).joinpath(SOURCE_NAME)) as src:
            path = cached_library(src, FLAGS, "the emulator's MFMA", LIBRARIES)
            library = ctypes.CDLL(str(path))
    except (ToolchainError, OSError) as exc:
        log.warning("MFMA arithmetic runs in numpy (slower, same results): %s", exc)
        return None
    function = library.f4pipe_mfma_fp4
    function.argtypes = _ARGUMENTS
    function.restype = _INT
    return function


def fp4_mfma_in_place(
    vgpr: np.ndarray,
    waves: np.ndarray,
    registers: tuple[int, int, int, int, int, int],
    scale_bytes: tuple[int, int],
) -> bool:
    """D = A x B (block-scaled) + C for `waves` of the register file `vgpr` [512, W, 64],
    written into it; False (nothing written) when the C is unavailable. `registers`: the
    file indices of A, B, C, D, A's scales, B's scales; `scale_bytes`: which byte of each
    scale register holds the scale."""
    function = mfma_fp4()
    if function is None or not vgpr.flags.c_contiguous or vgpr.dtype != np.uint32:
        return False
    a, b, c, d, scale_a, scale_b = registers
    function(
        vgpr.ctypes.data,
        vgpr.shape[1],
        waves.ctypes.data,
        len(waves),
        a,
        b,
        c,
        d,
        scale_a,
        scale_bytes[0],
        scale_b,
        scale_bytes[1],
        FP4_TWICE.ctypes.data,
        E8M0_SCALE.ctypes.data,
    )
    return True
