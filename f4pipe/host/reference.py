"""The CPU reference GEMM: D = alpha * dequant(A) @ dequant(B)^T in float64.

Not rounded to bf16, as in the seed driver: verification compares the kernel's bf16 output with
the exact value. With the default operand ranges (fp4 values times 2^-3..2^3) every product and
every partial sum is a multiple of 2^-8 far below 2^53, so float64 accumulation is exact in any
order and a BLAS matmul equals a naive loop bit for bit.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from f4pipe.core.errors import ShapeError
from f4pipe.host.operands import MxOperand


def kernel_alpha(alpha: float) -> float:
    """alpha as the kernel sees it: the kernarg slot is an f32."""
    return float(np.float32(alpha))


def reference_gemm(a: MxOperand, b: MxOperand, alpha: float = 1.0) -> np.ndarray:
    """float64 [M, N] = alpha * A @ B^T for A [M, K] and B [N, K]."""
    if a.k != b.k:
        raise ShapeError(f"A has K={a.k} but B has K={b.k}")
    return reference_of_values(a.dequantize(), b.dequantize(), alpha)


def reference_of_values(a: np.ndarray, b: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """reference_gemm of operands already dequantized (float64 [M, K] and [N, K]), for a
    caller that pairs each operand with several others (the shape-edge sweep)."""
    return (a @ b.T) * kernel_alpha(alpha)


#: The references reused between runs, by operand draw and alpha (shared_reference), and the
#: most bytes they may hold: the seed matrix runs all 35 kernels at 300x2048x1024 (4.9 MB), and
#: one 2048x8192 reference (128 MB) is not worth keeping.
_REFERENCES: dict[tuple, np.ndarray] = {}
REFERENCES_MAX_BYTES = 32 << 20


def shared_reference(
    a: MxOperand, b: MxOperand, alpha: float, draw: tuple[Hashable, ...]
) -> np.ndarray:
    """reference_gemm(a, b, alpha), computed once while kept for the same `draw` (whatever
    determines a and b: shape, seeds, distribution): a matrix runs many kernels at one shape in
    a row, and the float64 GEMM of each is a tenth of a second or more. Read-only, so no caller
    changes what another is given."""
    key = (*draw, kernel_alpha(alpha))
    ref = _REFERENCES.get(key)
    if ref is None:
        ref = reference_gemm(a, b, alpha)
        ref.setflags(write=False)
        if ref.nbytes <= REFERENCES_MAX_BYTES:  # a larger one leaves the kept ones be
            while sum(v.nbytes for v in _REFERENCES.values()) + ref.nbytes > REFERENCES_MAX_BYTES:
                _REFERENCES.pop(next(iter(_REFERENCES)))
            _REFERENCES[key] = ref
    return ref
