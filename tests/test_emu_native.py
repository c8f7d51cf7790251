"""The FP4 MFMA's C fast path (f4pipe/emu/mfma_fp4.c) against the numpy code it replaces
(f4pipe.emu.ops_mfma.fp4_mfma, the model), bit for bit: both of its paths (sums exact in
float64; the TwoSum cascade), NaN scales and NaN payloads in C, infinities, signed zeros,
subnormal C, zero blocks under extreme scales and results past float32's range; the default
build (AVX2's dot products where the CPU has them), SSE2's alone and the portable one; the
source clean under -Werror; and real kernels, whose outputs and safety rows are the same with
the C on and off.

The C is built with the system compiler, which every machine f4pipe tests on has (.ci/run
installs gcc): a missing compiler fails here rather than skipping."""

from __future__ import annotations

import ctypes
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from f4pipe.aiter.manifest import read_manifest
from f4pipe.core.native import cached_library, compile_shared
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.emu import EmulatorDevice, native
from f4pipe.emu.ops_mfma import acc_to_matrix, fp4_mfma, matrix_to_acc
from f4pipe.host.gemm import GemmRequest, run_gemm
from f4pipe.pipeline.edgesweep import sweep

A, B, C, D, SCALE_A, SCALE_B = 0, 4, 8, 12, 16, 17  # register file indices in `run_c`
#: f32 bit patterns a C register may hold beyond ordinary numbers.
SPECIAL_C = np.array(
    [
        0x7F800000,  # +inf
        0xFF800000,  # -inf
        0x7FC00000,  # the default quiet NaN
        0xFFC12345,  # a negative NaN with a payload
        0x7F800001,  # a signalling NaN
        0x80000000,  # -0
        0x00000001,  # the least subnormal
        0x807FFFFF,  # the largest subnormal, negative
        0x7F7FFFFF,  # the largest finite
    ],
    dtype=np.uint32,
)


#: The builds besides the default one (AVX2's dot products where the CPU has them): SSE2's
#: alone, and the portable C of non-x86 machines.
BUILD_FLAGS = {"sse2": ["-DF4PIPE_NO_AVX2"], "portable": ["-DF4PIPE_PORTABLE"]}


def _library(build: str) -> Path:
    with resources.as_file(resources.files("f4pipe.emu").joinpath(native.SOURCE_NAME)) as src:
        flags = [*native.FLAGS, *BUILD_FLAGS[build]]
        return cached_library(src, flags, f"the {build} MFMA", native.LIBRARIES)


def _function(build: str):
    if build == "default":
        function = native.mfma_fp4()
        assert function is not None, "the C fast path did not build (see the log)"
        return function
    function = ctypes.CDLL(str(_library(build))).f4pipe_mfma_fp4
    function.argtypes, function.restype = native._ARGUMENTS, ctypes.c_int
    return function


def run_c(function, a_regs, b_regs, ea, eb, c_bits, bytes_ab=(1, 2)) -> tuple[np.ndarray, int]:
    """The C's D [n, 16, 16] (f32 bits) and its path (1 exact, 0 TwoSum) for waves 1..n of a
    register file of n + 2 waves, the scales in bytes `bytes_ab` of their registers among
    random other bytes; the waves not selected must keep their registers."""
    n = a_regs.shape[1]
    rng = np.random.default_rng(n)
    vgpr = rng.integers(0, 2**32, size=(18, n + 2, 64), dtype=np.uint64).astype(np.uint32)
    selected = slice(1, n + 1)
    vgpr[A : A + 4, selected] = a_regs
    vgpr[B : B + 4, selected] = b_regs
    vgpr[C : C + 4, selected] = matrix_to_acc(c_bits)
    for reg, scales, byte in ((SCALE_A, ea, bytes_ab[0]), (SCALE_B, eb, bytes_ab[1])):
        words = vgpr[reg, selected].copy().view(np.uint8).reshape(n, 64, 4)
        words[:, :, byte] = scales.reshape(n, 64)
        vgpr[reg, selected] = words.reshape(n, 256).view(np.uint32)
    before = vgpr.copy()
    waves = np.arange(1, n + 1, dtype=np.int64)
    regs = (A, B, C, D, SCALE_A, bytes_ab[0], SCALE_B, bytes_ab[1])
    path = function(
        vgpr.ctypes.data,
        n + 2,
        waves.ctypes.data,
        n,
        *regs[:4],
        *regs[4:],
        native.FP4_TWICE.ctypes.data,
        native.E8M0_SCALE.ctypes.data,
    )
    unselected = np.ones(n + 2, dtype=bool)
    unselected[selected] = False
    assert np.array_equal(vgpr[:, unselected], before[:, unselected])
    assert np.array_equal(vgpr[:D], before[:D]), "only D is written"
    return acc_to_matrix(np.ascontiguousarray(vgpr[D : D + 4, selected])), path


def _case(rng, n: int, trial: int, a_scales, b_scales, special: bool):
    regs = rng.integers(0, 2**32, size=(2, 4, n, 64), dtype=np.uint64).astype(np.uint32)
    regs[:, :, : n // 2, : 16 * (trial % 4)] &= np.uint32(0x88888888)  # only +0 / -0
    regs[trial % 2, :, n // 2 :, 16 * (trial % 4) :] = 0  # zero blocks
    ea = rng.integers(*a_scales, size=(n, 4, 16), dtype=np.uint16).astype(np.uint8)
    eb = rng.integers(*b_scales, size=(n, 4, 16), dtype=np.uint16).astype(np.uint8)
    (ea if trial % 2 == 0 else eb)[n // 2 :, trial % 4 :] = 0  # 2^-127, on zero blocks too
    c = rng.normal(0, 10.0 ** (trial % 5), size=(n, 16, 16)).astype(np.float32)
    c *= np.float32(2.0 ** min(int(ea.max()) + int(eb.max()) - 254, 100))
    c[:, :2] = 0.0
    c[:, 2:3] = -0.0
    bits = c.view(np.uint32)
    if special:
        bits[:, 3:5] = rng.choice(SPECIAL_C, size=(n, 2, 16))
        if trial % 3 == 0:  # NaN scales on some rows, meeting NaN C of other payloads
            ea[:, trial % 4, 3:5] = 0xFF
    return regs, ea, eb, bits


SCENARIOS = [
    ((124, 131), (124, 131), False),  # the shipped kernels' kind: exact in float64
    ((64, 71), (66, 73), False),  # products down to float32's smallest normal
    ((180, 187), (180, 186), False),  # ... and up to its largest
    ((240, 251), (4, 16), False),  # one scale alone past float32's range
    ((120, 135), (0, 255), False),  # wide, NaN scales among them: the TwoSum path
    ((200, 255), (200, 255), False),  # sums past float32's range: infinities
    ((124, 131), (124, 131), True),  # infinities, NaN payloads, subnormals in C
    ((1, 40), (200, 240), True),
]


@pytest.mark.parametrize("build", ["default", *BUILD_FLAGS])
def test_c_equals_numpy_bit_for_bit(build: str) -> None:
    function = _function(build)
    paths = set()
    for index, (a_scales, b_scales, special) in enumerate(SCENARIOS):
        rng = np.random.default_rng(100 + index)
        for trial in range(12):
            n = 1 + trial % 5
            regs, ea, eb, c_bits = _case(rng, n, trial, a_scales, b_scales, special)
            with np.errstate(invalid="ignore", over="ignore"):
                want = fp4_mfma(regs[0], regs[1], ea, eb, c_bits.view(np.float32).astype(float))
            got, path = run_c(function, regs[0], regs[1], ea, eb, c_bits, (trial % 4, 3))
            paths.add(path)
            assert np.array_equal(got, want.view(np.uint32)), (a_scales, b_scales, trial)
    assert paths == {0, 1}, "both of the C's paths ran"


@pytest.mark.parametrize("every_block_live", [False, True])
def test_the_tie_is_decided_by_the_far_term(every_block_live: bool) -> None:
    """C = 2^24, block 0 adds 1, block 1 adds 2^-60 (scales 2^-30 each): the exact sum lies
    just above the f32 midpoint 2^24 + 1 and rounds up, where a float64 sum rounds to even.
    With every block live, the exactness test sees the scales of all of them."""
    regs = np.zeros((2, 4, 1, 64), dtype=np.uint32)
    if every_block_live:  # A's item 2 and B's item 3 in every lane: no product with D[0][0]
        regs[0, 0] = 0x2 << 8
        regs[1, 0] = 0x2 << 12
    regs[:, 0, 0, [0, 16]] |= np.uint32(0x2)  # A[0][0] = B[0][0] = A[0][32] = B[0][32] = 1
    ea = np.full((1, 4, 16), 127, dtype=np.uint8)
    eb = ea.copy()
    ea[0, 1, 0] = eb[0, 1, 0] = 97
    c = np.zeros((1, 16, 16), dtype=np.float32)
    c[0, 0, 0] = 2.0**24
    got, path = run_c(_function("default"), regs[0], regs[1], ea, eb, c.view(np.uint32))
    assert path == 0
    assert got[0, 0, 0].view(np.float32) == np.float32(2.0**24 + 2)
    want = fp4_mfma(regs[0], regs[1], ea, eb, c.astype(float))
    assert np.array_equal(got, want.view(np.uint32))


def test_a_c_off_the_products_grid_takes_the_twosum_path() -> None:
    """Terms 2^24 and 1 (every scale within 12 binades), C = 2^-30: the bounds hold, but C is
    no multiple of the products' unit, so the exact sum 2^24 + 1 + 2^-30 needs 55 bits; a
    float64 sum rounds it to the midpoint 2^24 + 1, then to even (2^24)."""
    regs = np.zeros((2, 4, 1, 64), dtype=np.uint32)
    regs[:, 0, 0, [0, 16]] = 0x2  # A[0][0] = B[0][0] = A[0][32] = B[0][32] = 1
    ea = np.full((1, 4, 16), 127, dtype=np.uint8)
    ea[0, 0, 0] = 139  # block 0 of row 0: 2^12
    eb = ea.copy()
    c = np.zeros((1, 16, 16), dtype=np.float32)
    c[0, 0, 0] = 2.0**-30
    got, path = run_c(_function("default"), regs[0], regs[1], ea, eb, c.view(np.uint32))
    assert path == 0
    assert got[0, 0, 0].view(np.float32) == np.float32(2.0**24 + 2)
    want = fp4_mfma(regs[0], regs[1], ea, eb, c.astype(float))
    assert np.array_equal(got, want.view(np.uint32))


def test_the_source_is_clean_under_werror(tmp_path: Path) -> None:
    source = resources.files("f4pipe.emu").joinpath(native.SOURCE_NAME)
    with resources.as_file(source) as src:
        for extra in ([], *BUILD_FLAGS.values()):
            flags = [*native.FLAGS, "-Werror", "-pedantic", *extra]
            compile_shared(src, tmp_path / "mfma.so", flags, "the MFMA", native.LIBRARIES)


def _without_c(monkeypatch) -> None:
    monkeypatch.setattr(native, "mfma_fp4", lambda: None)


def test_a_real_kernel_computes_the_same_bits_with_the_c_on_and_off(
    f4gemm_dir: Path, monkeypatch
) -> None:
    entry = next(e for e in read_manifest(f4gemm_dir) if e.name.endswith("_BpreShuffle_32x128"))
    request = GemmRequest(33, 256, 512, keep_padded_d=True)
    outputs = []
    for native_on in (True, False):
        if not native_on:
            _without_c(monkeypatch)
        device = EmulatorDevice()
        try:
            result = run_gemm(device, entry, f4gemm_dir / entry.co_name, request)
        finally:
            device.close()
        assert result.verification.passed
        outputs.append(result.d_padded_bits)
    assert np.array_equal(*outputs)


def test_the_safety_sweep_rows_are_the_same_with_the_c_on_and_off(
    f4gemm_dir: Path, monkeypatch
) -> None:
    """The sweep's poisoned edges send NaN scales and NaN C through the MFMA: both C paths
    run, and every row (verdicts, errors, counts) is the numpy path's."""
    manifest = read_manifest(f4gemm_dir)
    keys = ArtifactKeys("test-aiter", "test-toolchain", "emulator")
    kernels = ["f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"]
    function = _function("default")
    paths: list[int] = []

    def recording(*args):
        paths.append(function(*args))
        return paths[-1]

    monkeypatch.setattr(native, "mfma_fp4", lambda: recording)
    with_c = sweep(manifest, keys, kernels=kernels)
    _without_c(monkeypatch)
    without_c = sweep(manifest, keys, kernels=kernels)
    assert set(paths) == {0, 1}

    def comparable(rows) -> str:  # as text: a NaN field equals itself
        timeless = [{k: v for k, v in row.items() if k != "seconds"} for row in rows]
        return json.dumps(timeless, sort_keys=True, default=str)

    assert comparable(with_c) == comparable(without_c)
