"""f4pipe.pipeline.parallel: a stage's runs on forked workers give the serial loop's results, in
order."""

from __future__ import annotations

import os
import time

import pytest

from f4pipe.aiter.manifest import read_manifest
from f4pipe.core.layout import EMULATOR_DEVICE_ID
from f4pipe.core.schemas import ArtifactKeys
from f4pipe.devices.opendevice import open_device
from f4pipe.host.matrices import Case
from f4pipe.pipeline.parallel import map_ordered, workers_for
from f4pipe.pipeline.stages import StageSettings, verify_stage

KEYS = ArtifactKeys("aiter-test", "llvm-test", "none")


def pid_and_square(x: int) -> tuple[int, int]:
    time.sleep(0.05)  # long enough that the second worker takes items too
    return os.getpid(), x * x


def test_workers_return_the_loops_results_in_order_from_other_processes(capsys) -> None:
    items = list(range(12))
    results = map_ordered(pid_and_square, items, workers=2, label="squares")
    assert [square for _, square in results] == [x * x for x in items]
    pids = {pid for pid, _ in results}
    assert os.getpid() not in pids and len(pids) == 2
    assert "squares: 12/12" in capsys.readouterr().err


def test_one_worker_runs_in_this_process() -> None:
    assert {pid for pid, _ in map_ordered(pid_and_square, [1, 2, 3])} == {os.getpid()}


def test_a_closure_runs_on_workers_and_its_error_is_raised_here() -> None:
    offset = 10

    def fails_on_three(x: int) -> int:
        if x == 3:
            raise ValueError(f"item {x}")
        return x + offset

    assert map_ordered(lambda x: x + offset, [1, 2], workers=2) == [11, 12]
    with pytest.raises(ValueError, match="item 3"):
        map_ordered(fails_on_three, [1, 2, 3, 4], workers=2)


def test_only_the_emulator_gets_workers() -> None:
    assert workers_for(EMULATOR_DEVICE_ID, 4) == 4
    assert workers_for("AMD_Instinct_MI355X-gfx950", 4) == 1  # never fork a HIP process
    assert workers_for(None, 4) == 1


def test_a_verify_stage_on_two_workers_writes_the_serial_rows(f4gemm_dir) -> None:
    manifest = read_manifest(f4gemm_dir)
    cases = [
        Case(32, 256, 256, kernel="f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"),
        Case(48, 256, 512, kernel="f4gemm_bf16_per1x32Fp4_BpreShuffle_64x256"),
        Case(32, 128, 256, kernel="f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"),
    ]
    device = open_device("emulator")

    def rows(workers: int) -> list[dict]:
        settings = StageSettings(KEYS, workers=workers)
        return [
            {k: v for k, v in row.items() if k != "seconds"}
            for row in verify_stage(device, manifest, cases, settings)
        ]

    serial, forked = rows(1), rows(2)
    assert [r["status"] for r in serial] == ["passed"] * 3
    assert forked == serial
