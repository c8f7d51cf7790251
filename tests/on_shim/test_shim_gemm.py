"""The hardware launcher (HipDevice through hip-python) end to end on f4pipe's HIP shim: the
same bits as the emulator, the seed driver's call sequence, the splitK and timing paths,
wrong launches refused by name, every release call checked, shim times never TFLOP/s."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hip import hip

from f4pipe.cli import main
from f4pipe.codeobj.co2asm import co2asm
from f4pipe.core.device import HIP_SHIM_DEVICE_ID
from f4pipe.core.errors import DeviceError
from f4pipe.core.schemas import BENCH, ArtifactKeys, read_table
from f4pipe.devices.hipdevice import HipDevice
from f4pipe.edits.trykernel import try_edit
from f4pipe.emu import EmulatorDevice
from f4pipe.host.gemm import WARMUP_LAUNCHES, GemmRequest, run_gemm
from f4pipe.host.kernarg import BufferLayout, gemm_kernarg, launch_geometry
from f4pipe.host.matrices import Case
from f4pipe.pipeline.stages import (
    SHIM_TIMED,
    StageSettings,
    bench_stage,
    splitk_stage,
    verify_stage,
)

M, N, K = 32, 256, 512
SPLITK_KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256"
SMALL_KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
LAUNCH = "hipModuleLaunchKernel(extra)"


def test_every_kernel_gives_the_emulators_bits(device, shim, manifest):
    """All 35 kernels, through hip-python and the shim, against EmulatorDevice directly."""
    emulator = EmulatorDevice()
    request = GemmRequest(M, N, K, edge_policy="pad")
    for entry in manifest:
        on_shim = run_gemm(device, entry, manifest.co_path(entry), request)
        emulated = run_gemm(emulator, entry, manifest.co_path(entry), request)
        assert on_shim.passed and on_shim.device_id == HIP_SHIM_DEVICE_ID, entry.name
        np.testing.assert_array_equal(on_shim.d, emulated.d, err_msg=entry.name)
    assert len(manifest) == 35


def test_splitk_timing_follows_the_seed_drivers_calls(device, shim, manifest):
    """Load data, get function, launch with `extra`, then warm-ups and two events around the
    timed launches, each splitK launch preceded by a memset of D inside the timed region."""
    entry = manifest.get(SPLITK_KERNEL)
    request = GemmRequest(M, N, 1024, log2_k_split=1, iters=2)
    result = run_gemm(device, entry, manifest.co_path(entry), request)
    assert result.passed and result.gdz == 2
    assert result.us is not None and result.us > 0
    assert result.tflops is None and not result.us_is_hardware
    calls = shim.call_log()
    assert calls[:2] == ["hipModuleLoadData", "hipModuleGetFunction"]
    first = calls.index(LAUNCH)
    assert calls[first - 1] == "hipMemset" and calls[first + 1] == "hipDeviceSynchronize"
    one = ["hipMemsetAsync", LAUNCH]
    start = calls.index("hipEventCreate")
    assert calls[start - 2 * WARMUP_LAUNCHES : start] == one * WARMUP_LAUNCHES
    assert calls[start : start + 3] == ["hipEventCreate", "hipEventCreate", "hipEventRecord"]
    timed = calls[start + 3 : start + 3 + 2 * request.iters]
    assert timed == one * request.iters
    assert calls[start + 3 + 2 * request.iters :][:5] == [
        "hipEventRecord",
        "hipEventSynchronize",
        "hipEventElapsedTime",
        "hipEventDestroy",
        "hipEventDestroy",
    ]
    assert calls.count(LAUNCH) == 1 + WARMUP_LAUNCHES + request.iters


def test_a_protocol_times_every_launch_alone_and_rotates_distinct_operand_copies(
    device, shim, manifest
):
    """R x N launches, each between its own event pair, the splitK memset of D inside it;
    warm-up first; cold mode uploads distinct copies of A, B and their scales and really
    launches on each in turn."""
    from f4pipe.host.benchprotocol import Protocol
    from f4pipe.host.kernarg import KERNARG_SIZE, unpack_kernarg

    entry = manifest.get(SPLITK_KERNEL)
    protocol = Protocol(warmup=2, warmup_ms=0, repeats=2, launches=3, cold=True, rotate_bytes=1)
    probe = run_gemm(
        device, entry, manifest.co_path(entry), GemmRequest(M, N, 1024, 1, protocol=protocol)
    )
    one_set = probe.rotation_bytes  # one copy: rotate_bytes=1 needs just the first set
    assert probe.rotation_copies == 1 and one_set > 0
    shim.clear_call_log()
    protocol = dataclasses.replace(protocol, rotate_bytes=3 * one_set)
    request = GemmRequest(M, N, 1024, log2_k_split=1, protocol=protocol)
    result = run_gemm(device, entry, manifest.co_path(entry), request)
    assert result.passed and result.launch_us.shape == (2, 3) and (result.launch_us > 0).all()
    assert result.us == float(np.median(result.launch_us))
    assert (result.rotation_copies, result.rotation_bytes) == (3, 3 * one_set)
    assert result.tflops is None  # shim times are host clock, never TFLOP/s
    calls = shim.call_log()
    # 1 verified launch, 2 warm-up, 2 x 3 timed
    assert calls.count(LAUNCH) == 1 + 2 + 6
    timed_start = [i for i, c in enumerate(calls) if c == "hipEventRecord"][2:]  # after warm-up
    pairs = [calls[i : i + 4] for i in timed_start[0::2]]
    assert len(pairs) == 6
    assert all(p == ["hipEventRecord", "hipMemsetAsync", LAUNCH, "hipEventRecord"] for p in pairs)
    pointers = [
        unpack_kernarg(launch.kernarg[:KERNARG_SIZE])["ptr_A"] for launch in shim.launches[1:]
    ]
    assert len(set(pointers)) == 3  # every copy used, in turn
    assert all(pointers[i] != pointers[i + 1] for i in range(len(pointers) - 1))


def loaded(device, manifest, name: str):
    """A kernel loaded on the shim with buffers and a kernarg block for M x N x K."""
    entry = manifest.get(name)
    kernel = device.load(manifest.co_path(entry), entry.symbol)
    geometry = launch_geometry(entry.tile_m, entry.tile_n, 256, 512, 1024)
    buf = device.alloc(1 << 20)
    blob = gemm_kernarg(
        layout=BufferLayout(256, 512, 1024),
        ptr_d=buf.addr,
        ptr_a=buf.addr,
        ptr_b=buf.addr,
        ptr_scale_a=buf.addr,
        ptr_scale_b=buf.addr,
        alpha=1.0,
        log2_k_split=0,
    )
    return kernel, geometry, blob


def test_kernarg_off_by_four_is_refused_by_the_shim(device, shim, manifest):
    kernel, geometry, blob = loaded(device, manifest, SPLITK_KERNEL)
    wrong = dataclasses.replace(kernel, kernarg_size=kernel.kernarg_size - 4)
    with pytest.raises(DeviceError) as info:
        device.launch(wrong, geometry.grid, geometry.block, blob)
    message = str(info.value)
    assert (
        f"hipModuleLaunchKernel({kernel.symbol} from {kernel.co_path.name}, grid=(2, 1, 1)"
        in message
    )
    assert "hipErrorInvalidValue" in message
    assert "kernarg block is 380 bytes; the kernel's .kernarg_segment_size is 384" in message


def test_grid_in_threads_is_refused_by_the_shim(device, shim, manifest):
    kernel, geometry, blob = loaded(device, manifest, SPLITK_KERNEL)
    threads = tuple(g * b for g, b in zip(geometry.grid, geometry.block, strict=True))
    with pytest.raises(DeviceError, match=r"counts work-items, not workgroups") as info:
        device.launch(kernel, threads, geometry.block, blob)
    assert f"grid={threads}" in str(info.value) and "needs (2, 1, 1) workgroups" in str(info.value)


def test_block_of_64_is_refused_by_the_shim(device, shim, manifest):
    kernel, geometry, blob = loaded(device, manifest, SPLITK_KERNEL)
    with pytest.raises(DeviceError) as info:
        device.launch(kernel, geometry.grid, (64, 1, 1), blob)
    assert "block (64, 1, 1); the kernel's .reqd_workgroup_size is (256, 1, 1)" in str(info.value)


def test_unknown_kernel_is_not_found(device, shim, manifest):
    entry = manifest.get(SMALL_KERNEL)
    with pytest.raises(DeviceError, match=r"hipErrorNotFound.*no kernel 'nope' in the module"):
        device.load(manifest.co_path(entry), "nope")


def test_failed_release_calls_are_errors(shim, manifest):
    """hipModuleUnload and hipEventDestroy results are checked, after every release ran."""
    other = HipDevice.open()
    entry = manifest.get(SMALL_KERNEL)
    kernel = other.load(manifest.co_path(entry), entry.symbol)
    assert hip.hipModuleUnload(kernel.module)[0] == hip.hipError_t.hipSuccess
    buf = other.alloc(64)
    with pytest.raises(DeviceError, match=r"hipModuleUnload failed: hipErrorInvalidHandle"):
        other.close()
    assert buf.addr and shim.live_allocations() == 0  # the free before it still ran


def test_stages_on_the_shim_mark_their_times(device, shim, manifest):
    settings = StageSettings(
        ArtifactKeys("aiter-test", "llvm-test", "none"), kernel=SPLITK_KERNEL, iters=1
    )
    verify = verify_stage(device, manifest, [Case(M, N, K, kernel=SPLITK_KERNEL)], settings)
    splitk = splitk_stage(device, manifest, [Case(M, N, 1024, 1, SPLITK_KERNEL)], settings)
    bench = bench_stage(device, manifest, [Case(M, N, K, kernel=SPLITK_KERNEL)], settings)
    assert [r["status"] for r in verify + splitk] == ["passed", "passed"]
    assert {r["device_id"] for r in verify + splitk + bench} == {HIP_SHIM_DEVICE_ID}
    (row,) = bench
    assert row["status"] == SHIM_TIMED and row["tflops"] is None and row["us"] > 0
    assert "not GPU time" in row["reason"]


def test_bench_stage_command_writes_marked_rows(shim, f4gemm_dir, tmp_path):
    out = tmp_path / "bench.parquet"
    common = ["--co-dir", str(f4gemm_dir), "--aiter-id", "a", "--toolchain-id", "t"]
    shape = ["--matrix", "smoke", "--kernel", SMALL_KERNEL, "--iters", "1"]  # M=32 N=256 K=512
    protocol = ["--repeats", "2", "--warmup", "1", "--warmup-ms", "0", "--rotate-mib", "1"]
    assert main(["bench", *common, *shape, *protocol, "--device", "hip", "-o", str(out)]) == 0
    (row,) = read_table(out, BENCH).to_pylist()
    assert row["device_id"] == HIP_SHIM_DEVICE_ID and row["status"] == SHIM_TIMED
    assert row["tflops"] is None and row["us"] > 0
    # the protocol is recorded, every launch kept, the statistics of exactly those launches
    assert row["protocol"].startswith("2x1 launches, one event pair each") and row["iters"] == 2
    assert len(row["launch_us"]) == 2 and row["us"] == float(np.median(row["launch_us"]))
    assert row["us_min"] == min(row["launch_us"]) and row["us_ci_low"] <= row["us"]
    assert row["rotation_copies"] >= 1 and row["rotation_bytes"] > 0
    # provenance: the device as HIP reports it; no clocks on the shim, and why
    assert row["gcn_arch"].startswith("gfx950") and row["cu_count"] == 256
    assert len(row["device_fingerprint"]) == 16 and row["hip_python_version"]
    assert row["hip_runtime"].count(".") == 2
    assert row["sclk_before_mhz"] is None and row["throttled"] is None
    assert "shim has no clocks" in row["clocks_note"]


def test_gemm_cli_on_the_shim(shim, f4gemm_dir, capsys):
    shape = ["-m", str(M), "-n", str(N), "-k", str(K)]
    options = ["--kernel", SMALL_KERNEL, "--device", "hip", "--iters", "1", "--json"]
    code = main(["gemm", "--co-dir", str(f4gemm_dir), *shape, *options])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"] is True
    assert out["device"] == HIP_SHIM_DEVICE_ID
    assert out["tflops"] is None and out["us_is_hardware"] is False and out["us"] > 0
    assert LAUNCH in shim.call_log()


def test_try_runs_on_the_emulator_and_the_shim(shim, tmp_path, toolchain, f4gemm_dir):
    asm = tmp_path / "nop.s"
    base = co2asm(f4gemm_dir / f"{SMALL_KERNEL}.co", toolchain)
    asm.write_text(base.replace("label_0064:\n", "label_0064:\n\ts_nop 4\n", 1))
    result = try_edit(asm, f4gemm_dir, toolchain, device="auto")
    assert result.passed, result.verdict_line()
    assert {r.device_id for r in result.runs} == {"emulator", HIP_SHIM_DEVICE_ID}
    assert all(r.identical for r in result.runs)
