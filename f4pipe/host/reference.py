"""The CPU reference GEMM: D = alpha * dequant(A) @ dequant(B)^T in float64.

Not rounded to bf16, as in the seed driver: verification compares the kernel's bf16 output with
the exact value. With the default operand ranges (fp4 values times 2^-3..2^3) every product and
every partial sum is a multiple of 2^-8 far below 2^53, so float64 accumulation is exact in any
order and a BLAS matmul equals a naive loop bit for bit.
"""

from __future__ import annotations

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
    return (a.dequantize() @ b.dequantize().T) * kernel_alpha(alpha)
