"""Several launches of one kernel as one lockstep batch (f4pipe.emu.colaunch, run_gemms): the
same results, races, hazards and faults as the launches run one after another, in every
workgroup order, with the other order replaying the batch."""

from __future__ import annotations

import numpy as np
import pytest

from f4pipe.core.errors import EmulatorError
from f4pipe.emu import EmulatorDevice, LaunchFault, SharedRuns
from f4pipe.emu.memory import GlobalMemory, LaunchesFault
from f4pipe.host.gemm import run_gemm, run_gemms
from f4pipe.pipeline.edgesweep import EdgeShape, order_request

PREFIX = "f4gemm_bf16_per1x32Fp4_"
#: noBpreShuffle_256x256 faults at N % 32 == 16 and at the K tail with unpadded rows; the
#: others do not: one batch then holds launches that stop and launches that go on.
SHAPES = (
    EdgeShape("n%32=16", 256, 272, 512),
    EdgeShape("m%tile_m", 17, 512, 512),
    EdgeShape("k%256,m=1", 1, 256, 576, "zeros", "none"),
    EdgeShape("k%256,m=1", 1, 256, 576, "zeros", "zeros"),
    EdgeShape("k>256", 256, 256, 768),
)


def summary(result) -> tuple:
    """What the sweep reads from a run (or its fault)."""
    if isinstance(result, LaunchFault):  # with what it found up to the fault
        hazards = result.stats.hazards
        found = (hazards.count, hazards.advisories, hazards.summary()) if hazards else None
        return ("fault", str(result), result.stats.races.summary(), found)
    assert not isinstance(result, Exception)
    bits = result.d_padded_bits
    assert bits is not None
    return (
        "ran",
        bits.tobytes(),
        result.races,
        result.race_summary,
        result.hazards,
        result.hazard_summary,
    )


def one_by_one(device, entry, co_path, requests) -> list:
    out = []
    for request in requests:
        try:
            out.append(run_gemm(device, entry, co_path, request))
        except LaunchFault as fault:
            out.append(fault)
    return out


@pytest.mark.parametrize("kernel", ["noBpreShuffle_256x256", "BpreShuffle_32x128"])
def test_batched_launches_match_one_by_one_in_every_order(manifest, kernel) -> None:
    entry = manifest.get(PREFIX + kernel)
    co_path = manifest.co_path(entry)
    requests = [order_request(s, p) for s in SHAPES for p in ("unsafe", "pad")]
    shared = SharedRuns()
    for order in ("in-order", "reversed"):
        alone = EmulatorDevice(workgroup_order=order, isolate_workgroups=True)
        batched = EmulatorDevice(workgroup_order=order, isolate_workgroups=True, shared_runs=shared)
        direct = one_by_one(alone, entry, co_path, requests)
        want = [summary(r) for r in direct]
        results = run_gemms(batched, entry, co_path, requests)
        assert [summary(r) for r in results] == want
        assert batched.memory.layout() == alone.memory.layout() == ()  # everything freed
        if order == "reversed" and kernel.startswith("no"):  # what the first order ran to
            # a fault is replayed (a launch whose faulting workgroup differs runs some)
            steps = [r.stats.steps for r in results if isinstance(r, LaunchFault)]
            assert 0 in steps
            assert sum(steps) < sum(r.stats.steps for r in direct if isinstance(r, LaunchFault))
    if kernel.startswith("no"):
        assert any(w[0] == "fault" for w in want)
        assert any(w[0] == "ran" for w in want)


def test_partitioned_memory_refuses_another_launchs_allocation() -> None:
    memory = GlobalMemory()
    first, second = memory.alloc(64), memory.alloc(64)
    memory.partition({first: 0, second: 1})
    addr = np.array([first, second], dtype=np.int64)
    assert memory.read_dwords(addr, owners=np.array([0, 1])).tolist() == [0, 0]
    with pytest.raises(LaunchesFault) as caught:
        memory.read_dwords(addr, owners=np.array([1, 1]))
    assert caught.value.launches == {1}
    with pytest.raises(LaunchesFault) as caught:  # past the end: a fault, named before it lands
        memory.write_dwords(addr + 64, np.zeros(2, np.uint32), owners=np.array([0, 1]))
    assert caught.value.launches == {0, 1}
    memory.partition(None)
    with pytest.raises(EmulatorError):
        memory.read_dwords(addr + 64)


def test_hidden_allocations_fault_as_if_freed() -> None:
    memory = GlobalMemory()
    first, second = memory.alloc(64), memory.alloc(64)
    memory.hide_all_but({second})
    assert memory.layout() == ((second, 64),)
    with pytest.raises(EmulatorError, match="below every allocation"):
        memory.read_dwords(np.array([first], dtype=np.int64))
    memory.show_all()
    assert memory.layout() == ((first, 64), (second, 64))
