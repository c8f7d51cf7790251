"""Numerics: conversions, nibble packing, and the shuffles against the README's index maps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from f4pipe.core.errors import ShapeError
from f4pipe.core.numerics import (
    bf16_bits_to_float,
    dequantize,
    e8m0_to_float,
    float_to_bf16_bits,
    float_to_fp4,
    fp4_to_float,
    pack_fp4,
    pad_scales,
    padded_scale_shape,
    round_up,
    shuffle_b,
    shuffle_scales,
    unpack_fp4,
    unshuffle_b,
    unshuffle_scales,
)

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_fp4_codes_are_ocp_e2m1():
    codes = np.arange(16, dtype=np.uint8)
    assert fp4_to_float(codes).tolist()[:8] == E2M1
    assert fp4_to_float(codes).tolist()[8:] == [-v for v in E2M1]
    assert float_to_fp4(np.array(E2M1)).tolist() == list(range(8))


def test_e8m0_special_values():
    got = e8m0_to_float(np.array([0x00, 124, 127, 130, 254, 0xFF], dtype=np.uint8))
    assert got[0] == 2.0**-127  # not 2^-126 (the seed README's typo)
    assert got[1:5].tolist() == [0.125, 1.0, 8.0, 2.0**127]
    assert np.isnan(got[5])


def test_bf16_round_trip_and_rounding():
    assert float_to_bf16_bits(np.array([1.0, -2.0])).tolist() == [0x3F80, 0xC000]
    # 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even -> 1.0.
    assert float_to_bf16_bits(np.array([1.0 + 2.0**-8])).tolist() == [0x3F80]
    assert bf16_bits_to_float(np.array([0x3F81], dtype=np.uint16)).tolist() == [1.0 + 2.0**-7]


def test_pack_low_nibble_is_even_element():
    packed = pack_fp4(np.array([[1, 2, 15, 0]], dtype=np.uint8))
    assert packed.tolist() == [[0x21, 0x0F]]


@given(st.integers(1, 9), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_unpack_inverts_pack(rows, half_k, seed):
    codes = np.random.default_rng(seed).integers(0, 16, (rows, 2 * half_k), dtype=np.uint8)
    assert np.array_equal(unpack_fp4(pack_fp4(codes)), codes)


def readme_shuffle_b(src: np.ndarray) -> np.ndarray:
    """The seed README's element-wise map, literally."""
    n, kp = src.shape
    dst = np.zeros(n * kp, dtype=np.uint8)
    for n0 in range(n // 16):
        for n1 in range(16):
            for k0 in range(kp // 32):
                for k1 in range(2):
                    for k2 in range(16):
                        dst[(((n0 * (kp // 32) + k0) * 2 + k1) * 16 + n1) * 16 + k2] = src[
                            n0 * 16 + n1, k0 * 32 + k1 * 16 + k2
                        ]
    return dst.reshape(n, kp)


def readme_shuffle_scales(padded: np.ndarray) -> np.ndarray:
    sm, sn = padded.shape
    dst = np.zeros(sm * sn, dtype=np.uint8)
    for d0 in range(sm // 32):
        for d1 in range(2):
            for d2 in range(16):
                for d3 in range(sn // 8):
                    for d4 in range(2):
                        for d5 in range(4):
                            dst[
                                ((((d0 * (sn // 8) + d3) * 4 + d5) * 16 + d2) * 2 + d4) * 2 + d1
                            ] = padded[d0 * 32 + d1 * 16 + d2, d3 * 8 + d4 * 4 + d5]
    return dst.reshape(sm, sn)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_shuffle_b_matches_readme_map(n16, k64, seed):
    src = np.random.default_rng(seed).integers(0, 256, (16 * n16, 32 * k64), dtype=np.uint8)
    shuffled = shuffle_b(src)
    assert np.array_equal(shuffled, readme_shuffle_b(src))
    assert np.array_equal(unshuffle_b(shuffled), src)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_shuffle_scales_matches_readme_map(m32, n8, seed):
    padded = np.random.default_rng(seed).integers(0, 256, (32 * m32, 8 * n8), dtype=np.uint8)
    shuffled = shuffle_scales(padded)
    assert np.array_equal(shuffled, readme_shuffle_scales(padded))
    assert np.array_equal(unshuffle_scales(shuffled), padded)


@given(st.integers(1, 600), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_pad_scales(rows, cols, seed):
    scales = np.random.default_rng(seed).integers(0, 255, (rows, cols), dtype=np.uint8)
    padded = pad_scales(scales)
    assert padded.shape == (round_up(rows, 256), round_up(cols, 8))
    assert padded.shape == padded_scale_shape(rows, 32 * cols)
    assert np.array_equal(padded[:rows, :cols], scales)
    assert (padded[rows:] == 0x7F).all() and (padded[:, cols:] == 0x7F).all()


def test_shuffle_rejects_bad_shapes():
    with pytest.raises(ShapeError, match="N % 16"):
        shuffle_b(np.zeros((8, 32), dtype=np.uint8))
    with pytest.raises(ShapeError, match="pad_scales"):
        shuffle_scales(np.zeros((31, 8), dtype=np.uint8))


def test_dequantize_applies_one_scale_per_32():
    codes = np.full((1, 64), 2, dtype=np.uint8)  # 1.0 everywhere
    scales = np.array([[126, 129]], dtype=np.uint8)  # 0.5, 4.0
    got = dequantize(pack_fp4(codes), scales)
    assert got[0, :32].tolist() == [0.5] * 32 and got[0, 32:].tolist() == [4.0] * 32
