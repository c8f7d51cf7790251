"""Numerics: conversions, nibble packing, and the shuffles against the README's index maps."""

from __future__ import annotations

import math

import ml_dtypes
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


def test_decoders_agree_with_ml_dtypes_on_every_code():
    """The hand conversions (no ml_dtypes import on the launch path) give ml_dtypes' values
    for all 16 fp4 codes, all 256 E8M0 bytes and all 65536 bf16 patterns, NaNs included."""
    import ml_dtypes

    fp4 = np.arange(16, dtype=np.uint8)
    want = fp4.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    np.testing.assert_array_equal(fp4_to_float(fp4), want)
    assert (np.signbit(fp4_to_float(fp4)) == np.signbit(want)).all()  # -0.0 stays negative
    e8m0 = np.arange(256, dtype=np.uint8)
    want = e8m0.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    np.testing.assert_array_equal(e8m0_to_float(e8m0), want)
    bf16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    with np.errstate(invalid="ignore"):  # signalling NaNs widen to quiet ones
        want = bf16.view(ml_dtypes.bfloat16).astype(np.float64)
    got = bf16_bits_to_float(bf16)
    np.testing.assert_array_equal(got, want)
    assert (np.signbit(got) == np.signbit(want)).all()


def test_bf16_encoder_agrees_with_ml_dtypes_on_every_rounding_case():
    """Every f32 whose top half is any of the 65536 patterns, with every low half that decides
    RNE differently (0, 1, just below, at and just above the halfway point, all ones): the
    same bf16 bits as ml_dtypes, NaN inputs, overflow to infinity and ties to even included."""
    import ml_dtypes

    top = np.arange(65536, dtype=np.uint32) << np.uint32(16)
    low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)
    f32 = (top[:, None] | low[None, :]).reshape(-1).view(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        want = f32.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(float_to_bf16_bits(f32), want)
    doubles = np.array([1e39, -1e39, 3.0e38, np.inf, -np.nan, 2.0**-140])
    with np.errstate(invalid="ignore", over="ignore"):
        want = doubles.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(float_to_bf16_bits(doubles), want)


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


@pytest.mark.parametrize(
    ("x", "rne", "rtz"),
    [
        (1.0 + 2**-8, 1.0, 1.0),  # a tie, to even
        (1.0 + 3 * 2**-8, 1.0 + 2**-6, 1.0 + 2**-7),  # a tie, to even (up); toward zero down
        (-(1.0 + 3 * 2**-9), -(1.0 + 2**-7), -1.0),  # above the tie: away; toward zero: in
        (259.0, 260.0, 258.0),
        (2.0**-130 * 1.75, 2.0**-130 * 1.75, 2.0**-130 * 1.75),  # subnormal, exact
        (2.0**-133 * 1.5, 2.0**-132, 2.0**-133),  # the subnormal quantum 2^-133
        (3.5e38, math.inf, float.fromhex("0x1.fep127")),  # past the largest finite bf16
    ],
)
def test_round_to_bf16_by_hand(x: float, rne: float, rtz: float) -> None:
    from f4pipe.core.numerics import round_to_bf16

    assert round_to_bf16(np.array([x]), "rne")[0] == rne
    assert round_to_bf16(np.array([x]), "rtz")[0] == rtz


def test_round_to_bf16_nearest_even_is_ml_dtypes_from_float32() -> None:
    from f4pipe.core.numerics import round_to_bf16

    x = np.random.default_rng(7).standard_normal(100_000).astype(np.float32) * 1e3
    want = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.array_equal(round_to_bf16(x.astype(np.float64), "rne"), want)
