"""K % 256 != 0: the K-tail rule (f4pipe.aiter.shaperules) against the emulator
at the three shapes the issue names, under every padding, with the instructions that explain
each verdict; the K-tail sweep classes; `predict` and the cycle model's trace at such a K."""

from __future__ import annotations

import numpy as np
import pytest

from f4pipe.aiter.heuristic import select_kernel
from f4pipe.aiter.shaperules import (
    EDGE_K_TAIL,
    EDGE_K_TAIL_ROW,
    K_PADDINGS,
    SCALE_PADDINGS,
    is_safe,
    k_tail_violation,
    violations,
)
from f4pipe.cli import EXIT_FAILED, EXIT_OK, main
from f4pipe.core.errors import ConfigError
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.emu import EmulatorDevice
from f4pipe.host.gemm import GemmRequest, run_gemm
from f4pipe.host.verify import bad_mask
from f4pipe.pipeline.edgesweep import (
    EdgeShape,
    k_tail_shapes,
    reference_for,
    store_evidence,
    sweep_kernel,
)

PREFIX = "f4gemm_bf16_per1x32Fp4_"
KEYS = ArtifactKeys("test-aiter", "test-toolchain", "emulator")
PADDINGS = [(s, k) for s in SCALE_PADDINGS for k in K_PADDINGS]


def _emulate(manifest, kernel: str, m: int, n: int, k: int, scale_pad: str, k_pad: str):
    entry = manifest.get(kernel)
    request = GemmRequest(m, n, k, edge_policy="unsafe", scale_pad=scale_pad, k_pad=k_pad)
    device = EmulatorDevice()
    try:
        return entry, run_gemm(device, entry, manifest.co_path(entry), request)
    finally:
        device.close()


def test_the_instructions_that_decide_every_k_tail_verdict(manifest) -> None:
    """Every kernel's K loop steps 256 until the counter reaches K (so ceil(K/256) blocks run,
    the last one past K), and no A, B or scale load is bounded by K (the emulated verdicts of
    the splitK kernels, where K taints a bound through the chunk offset, show the same)."""
    for entry in manifest:
        evidence = store_evidence(manifest.co_path(entry), entry.symbol)
        assert evidence.k_loop and all("(counter += 0x100)" in x for x in evidence.k_loop)
        # K reaches the bounds only in the splitK kernels, with the chunk a split starts at
        assert "K" not in evidence.load_bound_fields or entry.splitk, entry.name
        assert {"stride_A0", "stride_B0"} <= set(evidence.load_bound_fields), entry.name


# What the rule says at each shape, and why (the violation's words): the tail past K meets
# E8M0 1.0 and the next row's data, or 0xFF (NaN) in uninitialised scale padding.
EXPLAINED = {"driver": "next row's data", "arbitrary": "0xFF (E8M0 NaN)"}


@pytest.mark.parametrize(("scale_pad", "k_pad"), PADDINGS)
@pytest.mark.parametrize(
    ("m", "n", "safe_with_driver"),
    [(1, 5120, True), (33, 256, False)],
    ids=["M=1 N=5120", "M=33 N=256"],
)
def test_32x128_at_k_2176_under_each_padding(
    manifest, m, n, safe_with_driver, scale_pad, k_pad
) -> None:
    """M=1: the tile's only row reads past its end into nothing (num_records = stride x the
    tile's valid rows), so E8M0 1.0 is harmless; M=33: rows 0..30 read the next row past K."""
    kernel = PREFIX + "BpreShuffle_32x128"
    entry, result = _emulate(manifest, kernel, m, n, 2176, scale_pad, k_pad)
    want_safe = scale_pad != "arbitrary" and (
        scale_pad == "zeros" or k_pad == "zeros" or safe_with_driver
    )
    assert result.passed is want_safe and result.races == 0
    assert is_safe(entry, m, n, 2176, scale_pad=scale_pad, k_pad=k_pad) is want_safe
    found = k_tail_violation(entry, m, n, 2176, scale_pad, k_pad)
    if not want_safe:
        assert found is not None and EXPLAINED[scale_pad] in found.message
        assert found.edge_class == (EDGE_K_TAIL_ROW if m == 1 else EDGE_K_TAIL)
        assert "reads 128 elements past K and scale columns 68..71" in found.message
    if scale_pad == "driver" and k_pad == "none" and not safe_with_driver:
        ref = reference_for(EdgeShape("k", m, n, 2176))
        bad_rows = np.unique(np.argwhere(bad_mask(result.d, ref, 1))[:, 0])
        # the last valid row of each tile (31, and 32 alone in tile 1) reads zeros past K
        assert 31 not in bad_rows and 32 not in bad_rows and len(bad_rows) > 0


@pytest.mark.parametrize(("scale_pad", "k_pad"), PADDINGS)
def test_the_heuristics_kernel_at_issue_4176s_shape(manifest, scale_pad, k_pad) -> None:
    """M = N = 512, K = 1664 (aiter issue 4176): the heuristic weighs tiles without the K tail
    (it reads the same padding whichever tile runs); its kernel is then wrong with the driver's
    1.0 or uninitialised scale padding and right with zero scales or zero-padded rows."""
    choice = select_kernel(manifest, 512, 512, k=1664)
    entry, result = _emulate(manifest, choice.entry.name, 512, 512, 1664, scale_pad, k_pad)
    want_safe = scale_pad == "zeros" or (scale_pad == "driver" and k_pad == "zeros")
    assert result.passed is want_safe
    assert is_safe(entry, 512, 512, 1664, scale_pad=scale_pad, k_pad=k_pad) is want_safe


def test_the_k_tail_sweep_agrees_with_the_rule(manifest) -> None:
    entry = manifest.get(PREFIX + "BpreShuffle_32x128")
    shapes = k_tail_shapes(entry)
    assert len(shapes) == 2 * len(PADDINGS) and {s.m for s in shapes} == {1, 2}
    rows = sweep_kernel(entry, manifest.co_path(entry), KEYS, shapes=shapes)
    assert all(r["agrees"] for r in rows), [r for r in rows if not r["agrees"]]
    unsafe = {(r["m"], r["scale_pad"], r["k_pad"]) for r in rows if r["verdict"] != "safe"}
    assert unsafe == {
        (1, "arbitrary", "none"),
        (1, "arbitrary", "zeros"),
        (2, "arbitrary", "none"),
        (2, "arbitrary", "zeros"),
        (2, "driver", "none"),
    }
    pads = [r for r in rows if r["policy"] == "pad"]
    assert pads and all(r["verdict"] == "safe" for r in pads)
    assert all("(not K)" in r["static_load_bound"] for r in rows)


def test_gemm_answers_at_k_2176(f4gemm_dir, monkeypatch, capsys) -> None:
    monkeypatch.setenv("AITER_ASM_DIR", str(f4gemm_dir))
    base = ["gemm", "--device", "emulator", "--kernel", PREFIX + "BpreShuffle_32x128"]
    base += ["-m", "33", "-n", "256", "-k", "2176", "--iters", "0"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "next row's data" in err and "K loop adds 256" in err and "--k-padding" not in err
    assert main([*base, "--pad-output"]) == EXIT_OK
    assert "A and B rows padded with zeros" in capsys.readouterr().out
    assert main([*base, "--scale-padding", "zeros"]) == EXIT_OK
    assert main([*base, "--unsafe"]) == EXIT_FAILED
    with pytest.raises(ConfigError, match="scale padding 'ones'"):
        GemmRequest(1, 16, 64, scale_pad="ones")


def test_predict_at_k_2176_replays_the_kernels_ceil_k_blocks(f4gemm_dir, manifest, capsys):
    """The kernel runs ceil(K/256) blocks: its executed path at K = 2176 is the one at 2304
    (same instructions, bytes and LDS cycles), which is the K the model replays."""
    from f4pipe.perf.trace import record_workgroup

    entry = manifest.get(PREFIX + "BpreShuffle_32x128")
    tail = record_workgroup(entry, manifest.co_path(entry), 2176)
    whole = record_workgroup(entry, manifest.co_path(entry), 2304)
    for a, b in zip(tail.waves, whole.waves, strict=True):
        assert np.array_equal(a.pcs, b.pcs) and np.array_equal(a.vmem_bytes, b.vmem_bytes)
        assert np.array_equal(a.lds_cycles, b.lds_cycles)
    argv = ["predict", "--co-dir", str(f4gemm_dir), "-m", "1", "-n", "5120", "-k", "2176"]
    assert main([*argv, "--kernel", entry.name]) == EXIT_OK
    assert "BpreShuffle_32x128" in capsys.readouterr().out
    assert not violations(entry, 1, 5120, 2176)


def test_audit_answers_a_tuned_row_at_k_2176(manifest, tmp_path) -> None:
    """A tuned row at K = 2176 (such rows exist in aiter's model tables) is audited, not
    refused: unsafe under the driver's padding at M = 33, with every padding's answer, and
    emulated with the tail kept (K = 256 + 2176 % 256)."""
    from conftest import DEFAULT_SOURCE

    from f4pipe.aiter.tuned import read_tuned
    from f4pipe.fetch import extract_wheel_file
    from f4pipe.pipeline.audit import audit_tuned

    tuned = extract_wheel_file(DEFAULT_SOURCE, tmp_path / "tuned.csv")
    df = read_tuned(tuned).drop(columns=["line"])
    entry = manifest.get(PREFIX + "BpreShuffle_32x128")
    row = df[df["kernelName"].str.startswith("_ZN")].iloc[[0]].copy()
    row[["M", "N", "K", "splitK"]] = [33, 256, 2176, 0]
    row["kernelName"] = entry.symbol
    small = tmp_path / "k2176.csv"
    row.to_csv(small, index=False)
    (audited,) = audit_tuned(small, manifest, KEYS)
    assert audited["status"] == "unsafe" and audited["edge_classes"] == EDGE_K_TAIL
    assert "scale padding zeros, K padding none: safe" in audited["reason"]
    # first, under the padding the fetched wheel's own e8m0_shuffle writes
    assert (
        "K=2176 (K % 256 = 128): uninitialised scale padding (this release's e8m0_shuffle) "
        "[aiter/utility/fp4_utils.py:72]: wrong; " in audited["reason"]
    )
    assert "scale padding driver, K padding none: wrong" in audited["reason"]
    assert audited["emulated"] == "wrong" and audited["emu_k"] == 256 + 2176 % 256
