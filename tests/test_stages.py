"""The verify / splitk / bench stages: rows, schemas, skipped-not-pretended, and their CLI."""

from __future__ import annotations

import ctypes.util

import pytest
from hostmodel import HostModelDevice

import f4pipe.devices.opendevice as device_module
from f4pipe.cli import main
from f4pipe.core.schemas import BENCH, SPLITK, VERIFY, ArtifactKeys, read_table, table_from_rows
from f4pipe.host.matrices import MATRICES, Case, get_matrix, kernels_that_may_run, parse_case
from f4pipe.perf.costs import load_calibration
from f4pipe.pipeline.stages import (
    BENCH_NOT_HARDWARE_REASON,
    PREDICTED,
    PREDICTED_NOTE,
    StageSettings,
    bench_stage,
    plan_runs,
    splitk_stage,
    verify_stage,
)

KEYS = ArtifactKeys("aiter-test", "llvm-test", "none")
NO_RUNTIME = ctypes.util.find_library("amdhip64") is None


def test_seed_matrix_is_the_51_checks_run_once_each(manifest):
    """The seed driver's 51 checks are 50 distinct runs on a 256-CU part: its heuristic pick
    at M=300 N=2048 K=1024 is also among every kernel's there. Each runs, and counts, once."""
    rows = verify_stage(None, manifest, get_matrix("seed"), StageSettings(KEYS))
    assert len(rows) == 50
    runs = [(r["kernel"], r["log2_k_split"], r["m"], r["n"], r["k"]) for r in rows]
    assert len(set(runs)) == len(runs)
    heuristic_pick = next(r for r in rows if (r["m"], r["n"], r["k"]) == (300, 2048, 1024))
    assert heuristic_pick["kernel"].endswith("BpreShuffle_96x640")
    assert {r["status"] for r in rows} == {"skipped"} and {r["reason"] for r in rows} == {
        "no gfx950 device"
    }
    table_from_rows(rows, VERIFY)  # matches the schema
    assert sum(r["log2_k_split"] > 0 for r in rows) == 8


def test_verify_rows_on_a_device(manifest):
    settings = StageSettings(
        KEYS, variant="rebuilt", kernel="f4gemm_bf16_per1x32Fp4_BpreShuffle_64x256"
    )
    rows = verify_stage(HostModelDevice(), manifest, get_matrix("smoke"), settings)
    (row,) = rows
    assert row["status"] == "passed" and row["variant"] == "rebuilt"
    assert row["device_id"] == "hostmodel" and row["kernel"].endswith("64x256")
    assert row["max_rel_err"] <= 2.0**-8 and row["seed_a"] == 1234 and row["seed_b"] == 5678
    table_from_rows(rows, VERIFY)


def test_failures_and_errors_are_rows(manifest):
    rows = verify_stage(
        HostModelDevice(honour_b_shuffle=False),
        manifest,
        [Case(32, 256, 256, kernel="f4gemm_bf16_per1x32Fp4_BpreShuffle_32x256")],
        StageSettings(KEYS),
    )
    assert rows[0]["status"] == "failed" and rows[0]["bad"] > 0


def test_splitk_rows(manifest):
    rows = splitk_stage(
        HostModelDevice(), manifest, get_matrix("smoke-splitk"), StageSettings(KEYS)
    )
    assert [(r["k_num"], r["gdz"]) for r in rows] == [
        (1, 1),
        (1, 1),
        (2, 2),
        (2, 2),
        (4, 4),
        (4, 4),
    ]
    assert all(r["status"] == "passed" for r in rows)
    table_from_rows(rows, SPLITK)


def test_bench_never_pretends(manifest):
    """Without hardware, bench rows are "predicted": us / tflops stay null, the cycle model's
    us_pred is there, labelled with the model and calibration, and the reason says both."""
    cases = get_matrix("throughput")
    rows = bench_stage(HostModelDevice(), manifest, cases, StageSettings(KEYS))
    assert {r["reason"] for r in rows} == {f"{BENCH_NOT_HARDWARE_REASON}; {PREDICTED_NOTE}"}
    assert all(r["us"] is None and r["tflops"] is None and r["status"] == PREDICTED for r in rows)
    assert all(r["us_pred"] > 0 and r["tflops_pred"] > 0 and r["bound"] for r in rows)
    assert {r["calibration_id"] for r in rows} == {load_calibration().calibration_id}
    rows = bench_stage(None, manifest, cases, StageSettings(KEYS))
    assert {r["reason"] for r in rows} == {f"no gfx950 device; {PREDICTED_NOTE}"}
    table = table_from_rows(rows, BENCH)
    assert table.num_rows == 4 and table.column("us").null_count == 4


def test_matrices():
    assert set(MATRICES) >= {"seed", "splitk", "throughput", "smoke"}
    assert parse_case("256,1024,4096,2") == Case(256, 1024, 4096, 2)
    with pytest.raises(Exception, match="M,N,K"):
        parse_case("1,2")


@pytest.mark.parametrize("num_cu", [256, 80])
def test_the_workflow_spawns_a_job_for_every_kernel_a_matrix_may_run(manifest, num_cu):
    """kernels_that_may_run (the workflow's per-kernel jobs) covers every run plan_runs makes,
    whatever the device's CU count, and names exactly the planned kernels where no case is
    left to the heuristic: the splitk matrix spawns jobs for the splitK kernels only."""
    for name, cases in MATRICES.items():
        may_run = kernels_that_may_run(cases, manifest)
        planned = {e.name for e, _, _ in plan_runs(manifest, cases, StageSettings(KEYS), num_cu)}
        assert planned <= set(may_run), name
        if all(c.kernel is not None for c in cases):
            assert planned == set(may_run), name
    splitk = kernels_that_may_run(get_matrix("splitk"), manifest)
    assert splitk == [e.name for e in manifest if e.splitk] and 0 < len(splitk) < len(manifest)
    assert kernels_that_may_run(get_matrix("heuristic"), manifest) == [e.name for e in manifest]


@pytest.mark.skipif(not NO_RUNTIME, reason="a HIP runtime is present")
def test_stage_cli_without_device(f4gemm_dir, tmp_path, capsys):
    out = tmp_path / "bench.parquet"
    common = ["--co-dir", str(f4gemm_dir), "--aiter-id", "a", "--toolchain-id", "t"]
    assert main(["bench", *common, "--device", "hip", "-o", str(out)]) == 0
    table = read_table(out, BENCH)
    assert table.num_rows == 4
    assert all(r.startswith("no gfx950 device") for r in table.column("reason").to_pylist())
    assert table.column("us_pred").null_count == 0
    assert "no HIP runtime" in capsys.readouterr().err


def test_stage_cli_on_model(f4gemm_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(device_module, "open_device", lambda kind, **_: HostModelDevice())
    out = tmp_path / "verify.parquet"
    args = ["verify", "--co-dir", str(f4gemm_dir), "--aiter-id", "a", "--toolchain-id", "t"]
    assert main([*args, "--shape", "32,256,512", "--variant", "rebuilt", "-o", str(out)]) == 0
    table = read_table(out, VERIFY).to_pylist()
    assert len(table) == 1 and table[0]["status"] == "passed" and table[0]["aiter_id"] == "a"
