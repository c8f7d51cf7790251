"""The scaled FP4 MFMA written straight from the register maps in docs/reference/gfx950.md:
lane by lane, nibble by nibble, exact sums rounded once (the tests' model, independent of
f4pipe.emu.ops_mfma)."""

from __future__ import annotations

import math

import numpy as np

from f4pipe.core.numerics import e8m0_to_float, fp4_to_float


def elements(regs: np.ndarray) -> np.ndarray:
    """[4 regs, 64 lanes] -> M[r][k]: lane 16g + r, k = 32g + t, item t in reg t//8, nibble t%8."""
    out = np.zeros((16, 128))
    for lane in range(64):
        g, r = divmod(lane, 16)
        for t in range(32):
            nib = (int(regs[t // 8, lane]) >> (4 * (t % 8))) & 0xF
            out[r, 32 * g + t] = fp4_to_float(np.array([nib]))[0]
    return out


def scale_of(scale_reg: np.ndarray, byte: int) -> np.ndarray:
    """S[r][g] = E8M0 byte `byte` of the scale register in lane 16g + r."""
    out = np.zeros((16, 4))
    for lane in range(64):
        g, r = divmod(lane, 16)
        out[r, g] = e8m0_to_float(np.array([(int(scale_reg[lane]) >> (8 * byte)) & 0xFF]))[0]
    return out


def mfma_model(a, b, c, sa, sb, byte_a, byte_b) -> np.ndarray:
    """D[i][j] = C[i][j] + sum_k A[i][k] B[j][k] scaleA[i][k/32] scaleB[j][k/32], rounded once."""
    am, bm = elements(a), elements(b)
    sam, sbm = scale_of(sa, byte_a), scale_of(sb, byte_b)
    d = np.zeros((16, 16), dtype=np.float32)
    for i in range(16):
        for j in range(16):
            lane, reg = j + 16 * (i // 4), i % 4
            terms = [float(c[reg, lane].view(np.float32))]
            terms += [am[i, k] * bm[j, k] * sam[i, k // 32] * sbm[j, k // 32] for k in range(128)]
            d[i, j] = np.float32(math.fsum(terms))
    return d


def result_registers(d: np.ndarray) -> np.ndarray:
    """[4 regs, 64 lanes] f32 bits of D[16][16]: D[i][j] in register i % 4 of lane
    j + 16 (i // 4)."""
    out = np.zeros((4, 64), np.uint32)
    for i in range(16):
        for j in range(16):
            out[i % 4, j + 16 * (i // 4)] = np.float32(d[i, j]).view(np.uint32)
    return out
