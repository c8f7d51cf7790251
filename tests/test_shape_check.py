"""One shape check (f4pipe.aiter.shaperules.check_shape): every entry point refuses a bad shape
with the same words, and an unsafe edge is refused in one place."""

from __future__ import annotations

import pytest
from hostmodel import HostModelDevice

import f4pipe.devices.opendevice as device_module
from f4pipe.aiter.heuristic import select_kernel
from f4pipe.aiter.shaperules import UnsafeShapeError, check_shape
from f4pipe.cli import main
from f4pipe.core.errors import ShapeError
from f4pipe.host.gemm import GemmRequest, run_gemm

PREFIX = "f4gemm_bf16_per1x32Fp4_"
SPLITK_KERNEL = PREFIX + "BpreShuffle_256x256"

#: (M, N, K, log2_k_split, the words of the refusal): one shape per dimension rule.
BAD_SHAPES = [
    (512, 1000, 2048, 0, "N=1000 is not a multiple of 16"),
    (512, 1024, 2000, 0, "K=2000 is not a multiple of 64"),
    (0, 1024, 2048, 0, "M, N, K must be positive"),
    (512, 1024, 2176, 1, "a split K that is not a multiple of 256 has not been examined"),
    (512, 1024, 2048, 17, "log2_k_split=17 out of range"),
    (512, 1024, 2 << 30, 0, "each must be at most 2147483647"),
]


def the_refusal(m: int, n: int, k: int, log2: int) -> str:
    with pytest.raises(ShapeError) as caught:
        check_shape(m, n, k, log2)
    return str(caught.value)


def cli_error(capsys, argv: list[str]) -> str:
    """The one-line error a command prints (exit 2), without its `f4pipe <cmd>: error: `."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.split(": error: ", 1)[1]


@pytest.mark.parametrize(("m", "n", "k", "log2", "words"), BAD_SHAPES)
def test_every_entry_point_refuses_a_bad_shape_in_the_same_words(
    m, n, k, log2, words, manifest, f4gemm_dir, capsys, monkeypatch
):
    expected = the_refusal(m, n, k, log2)
    assert words in expected
    shape = ["-m", str(m), "-n", str(n), "-k", str(k), "--splitk", str(log2)]
    co_dir = ["--co-dir", str(f4gemm_dir)]
    opened: list[str] = []
    monkeypatch.setattr(device_module, "open_device", lambda kind, **_: opened.append(kind))
    assert cli_error(capsys, ["gemm", *co_dir, *shape, "--device", "emulator"]) == expected
    assert not opened, "the gemm command opened a device for a shape it then refused"
    assert cli_error(capsys, ["predict", *co_dir, *shape]) == expected
    with pytest.raises(ShapeError) as by_heuristic:
        select_kernel(manifest, m, n, k=k, log2_k_split=log2)
    assert str(by_heuristic.value) == expected
    entry = manifest.get(SPLITK_KERNEL)
    with pytest.raises(ShapeError) as by_run:
        run_gemm(HostModelDevice(), entry, manifest.co_path(entry), GemmRequest(m, n, k, log2))
    assert str(by_run.value) == expected


def test_a_split_on_a_kernel_that_cannot_split_is_refused_alike(manifest, f4gemm_dir, capsys):
    entry = manifest.get(PREFIX + "BpreShuffle_32x128")
    with pytest.raises(ShapeError) as by_check:
        check_shape(32, 256, 1024, 1, entry=entry)
    expected = str(by_check.value)
    assert "is not a splitK kernel: it cannot split K" in expected
    with pytest.raises(ShapeError) as by_run:
        run_gemm(HostModelDevice(), entry, manifest.co_path(entry), GemmRequest(32, 256, 1024, 1))
    assert str(by_run.value) == expected
    argv = ["gemm", "--co-dir", str(f4gemm_dir), "--kernel", entry.name, "--device", "emulator"]
    assert cli_error(capsys, [*argv, "-m", "32", "-n", "256", "-k", "1024", "--splitk", "1"]) == (
        expected
    )


def test_an_unsafe_edge_is_refused_by_run_gemm_alone(manifest, f4gemm_dir, capsys, monkeypatch):
    """`f4pipe gemm --kernel` leaves the edge refusal to run_gemm: the same UnsafeShapeError,
    raised once, after the kernel is named (the heuristic's own picks meet the same check)."""
    entry = manifest.get(SPLITK_KERNEL)
    with pytest.raises(UnsafeShapeError) as by_check:
        check_shape(64, 288, 256, entry=entry)
    expected = str(by_check.value)
    assert "N=288 is not a multiple of 256" in expected and "--pad-output" in expected
    assert check_shape(64, 288, 256, entry=entry, edge_policy="pad")  # returned, not raised
    with pytest.raises(UnsafeShapeError) as by_run:
        run_gemm(HostModelDevice(), entry, manifest.co_path(entry), GemmRequest(64, 288, 256))
    assert str(by_run.value) == expected
    monkeypatch.setattr(device_module, "open_device", lambda kind, **_: HostModelDevice())
    argv = ["gemm", "--co-dir", str(f4gemm_dir), "--kernel", entry.name, "--iters", "0"]
    assert cli_error_after_output(capsys, [*argv, "-m", "64", "-n", "288", "-k", "256"]) == (
        expected
    )


def cli_error_after_output(capsys, argv: list[str]) -> str:
    """The error of a command that printed its device and kernel lines first (exit 2)."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "kernel: " + PREFIX in captured.out
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    return err.split(": error: ", 1)[1]
