"""v_mfma_scale_f32_16x16x128_f8f6f4 (FP4 x FP4, E8M0 scales) against a scalar model written
straight from the register maps in docs/reference/gfx950.md: lane by lane, nibble by nibble,
exact sums."""

from __future__ import annotations

import numpy as np
import pytest
from emu_snippets import make_executor
from mfma_model import mfma_model

RNG = np.random.default_rng(20260)


@pytest.mark.parametrize(
    ("op_sel", "op_sel_hi"), [((0, 0), (0, 0)), ((1, 0), (1, 1)), ((0, 1), (0, 1))]
)
def test_scaled_fp4_mfma_matches_the_register_map_model(toolchain, op_sel, op_sel_hi) -> None:
    mods = f"op_sel:[{op_sel[0]},{op_sel[1]},0] op_sel_hi:[{op_sel_hi[0]},{op_sel_hi[1]},0]"
    ex = make_executor(
        toolchain,
        f"v_mfma_scale_f32_16x16x128_f8f6f4 a[8:11], v[0:3], v[4:7], a[8:11], v12, v13 {mods} "
        "cbsz:4 blgp:4",
    )
    a = RNG.integers(0, 2**32, size=(4, 64), dtype=np.uint64).astype(np.uint32)
    b = RNG.integers(0, 2**32, size=(4, 64), dtype=np.uint64).astype(np.uint32)
    # every scale byte different: a wrong byte select, lane map or A/B pairing shows up
    sa = RNG.integers(118, 137, size=(64, 4), dtype=np.uint8).view(np.uint32).reshape(64)
    sb = RNG.integers(118, 137, size=(64, 4), dtype=np.uint8).view(np.uint32).reshape(64)
    c = RNG.normal(0, 100, size=(4, 64)).astype(np.float32).view(np.uint32)
    ex.vgpr[0:4, 0] = a
    ex.vgpr[4:8, 0] = b
    ex.vgpr[256 + 8 : 256 + 12, 0] = c
    ex.vgpr[12, 0] = sa
    ex.vgpr[13, 0] = sb
    ex.run()
    want = mfma_model(a, b, c, sa, sb, op_sel[0] + 2 * op_sel_hi[0], op_sel[1] + 2 * op_sel_hi[1])
    got = ex.vgpr[256 + 8 : 256 + 12, 0]
    for i in range(16):
        for j in range(16):
            lane, reg = j + 16 * (i // 4), i % 4
            assert got[reg, lane] == want[i, j].view(np.uint32), (i, j)


def test_nan_scale_poisons_its_rows(toolchain) -> None:
    ex = make_executor(
        toolchain,
        "v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3], v[0:3], v[4:7], 0, v12, v13 cbsz:4 blgp:4",
    )
    ex.vgpr[0:8, 0] = 0x22222222  # every element 1.0
    ex.vgpr[12, 0] = 0x7F
    ex.vgpr[13, 0] = 0x7F
    ex.vgpr[12, 0, 16 + 3] = 0xFF  # row 3, k-block 1 of src0: NaN
    ex.run()
    d = ex.vgpr[256 : 256 + 4, 0].view(np.float32)
    for i in range(16):
        for j in range(16):
            v = d[i % 4, j + 16 * (i // 4)]
            assert np.isnan(v) if i == 3 else v == 128.0


def test_sum_is_rounded_once_even_when_float64_alone_would_round_twice(toolchain) -> None:
    """C = 2^24, block 0 adds 1, block 1 adds 2^-60: the exact sum 2^24 + 1 + 2^-60 lies just
    above the f32 midpoint 2^24 + 1, so it rounds up to 2^24 + 2. A plain float64 sum loses
    the 2^-60 and then rounds the tie to even (2^24): wrong by one f32 ulp."""
    ex = make_executor(
        toolchain,
        "v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3], v[0:3], v[4:7], a[0:3], v12, v13 cbsz:4 blgp:4",
    )
    for reg in (0, 4):  # A[0][0] = B[0][0] = 1.0 (k-block 0), A[0][32] = B[0][32] = 1.0 (block 1)
        ex.vgpr[reg, 0, 0] = 0x2
        ex.vgpr[reg, 0, 16] = 0x2
    ex.vgpr[12, 0] = ex.vgpr[13, 0] = 127  # scales 1.0 ...
    ex.vgpr[12, 0, 16] = ex.vgpr[13, 0, 16] = 97  # ... but row/column 0, block 1: 2^-30 each
    ex.vgpr[256, 0, 0] = np.float32(2.0**24).view(np.uint32)
    ex.run()
    assert ex.vgpr[256, 0, 0].view(np.float32) == np.float32(2.0**24 + 2)


@pytest.mark.parametrize("scale_range", [(124, 131), (118, 137), (115, 135)])
def test_float64_fast_path_equals_the_exact_path_bit_for_bit(scale_range) -> None:
    """Wherever exact_in_float64 admits a batch, the float64 matmul gives exactly the bits of
    the TwoSum path, signed zeros included (rows of +-0 codes, C of +-0 and random f32)."""
    from f4pipe.emu.ops_mfma import (
        E8M0_VALUE,
        _fp4_operand,
        block_terms,
        exact_in_float64,
        exact_sum,
        float64_sum,
        live_blocks,
    )

    rng = np.random.default_rng(scale_range[0])
    n, admitted = 8, 0
    for trial in range(60):
        regs = rng.integers(0, 2**32, size=(2, 4, n, 64), dtype=np.uint64).astype(np.uint32)
        regs[:, :, : n // 2, : 16 * (trial % 4)] &= np.uint32(0x88888888)  # only +0 / -0
        regs[trial % 2, :, n // 2 :, 16 * (trial % 4) :] = 0  # zero blocks (scales ignored)
        a, b = _fp4_operand(regs[0]), _fp4_operand(regs[1])
        ea, eb = rng.integers(*scale_range, size=(2, n, 4, 16), dtype=np.uint16).astype(np.uint8)
        (ea if trial % 2 == 0 else eb)[n // 2 :, trial % 4 :] = 0  # 2^-127 on zero blocks only
        c = rng.normal(0, 10.0 ** (trial % 5), size=(n, 16, 16)).astype(np.float32)
        c[:, :4] = 0.0
        c[:, 4:6] = -0.0
        c64 = c.astype(np.float64)
        terms = block_terms(a, b, E8M0_VALUE[ea], E8M0_VALUE[eb])
        for cc in (c64, 0.0, -0.0):
            if exact_in_float64(ea, eb, live_blocks(regs[0]), live_blocks(regs[1]), cc):
                admitted += 1
                fast = float64_sum(terms, cc).view(np.uint32)
                want = exact_sum(terms, cc).view(np.uint32)
                assert (fast == want).all(), (trial, cc if np.isscalar(cc) else "regs")
    assert admitted > 0


@pytest.mark.parametrize(
    "a_scales, b_scales",
    [
        ((124, 131), (124, 131)),  # the operands' default: both float32 steps far inside
        ((240, 251), (4, 16)),  # A's step alone overflows float32, the product does not
        ((238, 245), (4, 16)),  # ... A's step at float32's top, still finite
        ((1, 8), (245, 252)),  # A's step alone is subnormal
        ((3, 10), (127, 134)),  # ... A's step at float32's smallest normal
        ((64, 71), (66, 73)),  # the product down to float32's smallest normal
        ((180, 187), (180, 186)),  # ... and up to its largest
        ((120, 135), (0, 255)),  # wide: the exact sum
    ],
)
def test_fp4_mfma_equals_the_exact_path_bit_for_bit(a_scales, b_scales) -> None:
    """Whatever path fp4_mfma takes (all blocks taken as live, then the zero blocks; scaling
    in float32 or float64; the exact sum), its bits are the TwoSum path's, signed zeros, scales
    at float32's edges (a partial times 2^(e-127) near the normal range's ends), NaN scales and
    zero blocks included."""
    from f4pipe.emu.ops_mfma import E8M0_VALUE, _fp4_operand, block_terms, exact_sum, fp4_mfma

    rng = np.random.default_rng(a_scales[0] + b_scales[0])
    n = 6
    for trial in range(40):
        regs = rng.integers(0, 2**32, size=(2, 4, n, 64), dtype=np.uint64).astype(np.uint32)
        regs[:, :, : n // 2, : 16 * (trial % 4)] &= np.uint32(0x88888888)  # only +0 / -0
        regs[trial % 2, :, n // 2 :, 16 * (trial % 4) :] = 0  # zero blocks
        ea = rng.integers(*a_scales, size=(n, 4, 16), dtype=np.uint16).astype(np.uint8)
        eb = rng.integers(*b_scales, size=(n, 4, 16), dtype=np.uint16).astype(np.uint8)
        (ea if trial % 2 == 0 else eb)[n // 2 :, trial % 4 :] = 0  # 2^-127 on zero blocks
        c = rng.normal(0, 10.0 ** (trial % 5), size=(n, 16, 16)).astype(np.float32)
        c *= np.float32(2.0 ** min(int(ea.max()) + int(eb.max()) - 254, 100))  # the products' scale
        c[:, :4] = 0.0
        c[:, 4:6] = -0.0
        a, b = _fp4_operand(regs[0]), _fp4_operand(regs[1])
        terms = block_terms(a, b, E8M0_VALUE[ea], E8M0_VALUE[eb])
        for cc in (c.astype(np.float64), 0.0, -0.0):
            with np.errstate(invalid="ignore", over="ignore"):
                want = exact_sum(terms, cc).view(np.uint32)
                got = fp4_mfma(regs[0], regs[1], ea, eb, cc).view(np.uint32)
            same = (got == want) | (
                np.isnan(got.view(np.float32)) & np.isnan(want.view(np.float32))
            )
            assert same.all(), (trial, cc if np.isscalar(cc) else "regs")
