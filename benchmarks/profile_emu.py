"""Where the time goes, by part of the emulator and of `f4pipe try` (`nox -s bench`).

Three workloads, each in this process with timers wrapped around the parts (exclusive time:
a part's own seconds, without the parts it calls), plus the start-up imports measured in fresh
child processes:

- `try`: one `f4pipe try` of an s_nop edit (the edit loop of benchmarks/bench_try.py), per tile;
- `verify`: the first cases of the seed matrix on the emulator (the main job's verify stage);
- `safety`: the shape-edge sweep of a few kernels (the main job's largest stage).

The parts: the emulator's step loop (dispatch: picking the waves, the handler call, pc and
budget bookkeeping), MFMA arithmetic, the memory model (buffer and LDS instructions, the race
log), the other ALU instructions, the timing model's run-time bookkeeping (counters, wait-state
windows, LDS visibility), the static hazard pass, the cycle model, assembling and checking the
edit, and everything else (operands, reference, verification, launch set-up). Timers read
this thread's CPU clock (thread_time, so other engineers' jobs on a shared machine do not
count) and cost about a microsecond per wrapped call, so the parts add up to a little more
than an unwrapped run's CPU; each workload's wall and process CPU seconds are printed beside
them. Wall seconds are noisy on a shared machine; CPU is the figure to compare. BLAS runs on
one thread, as under the command line (f4pipe.cli.BLAS_THREADS). docs/performance.md has the
summary table and the commit it was measured at.

Run: `python benchmarks/profile_emu.py [--workload try|verify|safety] [--tile 32x128]
[--cases N] [--kernels N]`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import f4pipe.cli  # noqa: F401  (first: the command line's BLAS thread default, before numpy)

#: The child processes' import sets: what a command pays before it works.
IMPORTS = {
    "command line (f4pipe.cli)": "import f4pipe.cli",
    "emulator (f4pipe.emu.device)": "import f4pipe.emu.device",
    "try's modules": "import f4pipe.edits.trykernel, f4pipe.emu.device, f4pipe.analysis.hazards",
    "ml_dtypes (fp4 encoding only)": "import ml_dtypes",
}
#: The label the try workload inserts an s_nop after, per tile (first label of the main loop).
TRY_TILES = {"32x128": "label_0064", "256x256": "label_0068"}
KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_{tile}"


class PartTimers:
    """Exclusive seconds per part: entering a part pauses the one it was called from."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[Any]] = []  # [part, started, seconds of parts it called]

    def wrap(self, part: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            self._stack.append([part, time.thread_time(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                _, started, inner = self._stack.pop()
                spent = time.thread_time() - started
                self.seconds[part] += spent - inner
                self.calls[part] += 1
                if self._stack:
                    self._stack[-1][2] += spent

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    def run(self, part: str, fn: Callable, *args, **kwargs) -> tuple[Any, float, float]:
        """fn(*args) as `part` (what no inner timer claims): (result, wall s, CPU s)."""
        wall, cpu = time.perf_counter(), time.process_time()
        result = self.wrap(part, fn)(*args, **kwargs)
        return result, time.perf_counter() - wall, time.process_time() - cpu


def patch_everywhere(original: Callable, replacement: Callable) -> None:
    """Replace a function in every loaded module that imported it by name."""
    for module in list(sys.modules.values()):
        for name, value in list(getattr(module, "__dict__", {}).items()):
            if value is original:
                setattr(module, name, replacement)


def install(timers: PartTimers) -> None:
    """Wrap the emulator's parts (the handlers by module, the step loop, the timing model)."""
    import f4pipe.analysis.hazards as hazards
    import f4pipe.edits as edits
    import f4pipe.emu.engine as engine
    import f4pipe.perf.predict as predict
    from f4pipe.analysis.timingrun import TimingRun
    from f4pipe.emu.memory import _WriteLog

    parts = {
        "f4pipe.emu.ops_mfma": "MFMA arithmetic",
        "f4pipe.emu.ops_memory": "memory model (buffer, LDS, races)",
        "f4pipe.emu.ops_scalar": "scalar ALU and control",
        "f4pipe.emu.ops_vector": "vector ALU",
    }
    engine.HANDLERS = {
        name: timers.wrap(parts[fn.__module__], fn) for name, fn in engine.HANDLERS.items()
    }
    engine.Executor.run = timers.wrap("step loop (dispatch)", engine.Executor.run)
    bookkeeping = "timing and race bookkeeping"
    for cls, method in ((TimingRun, "before"), (TimingRun, "lds_read"), (TimingRun, "lds_write")):
        setattr(cls, method, timers.wrap(bookkeeping, getattr(cls, method)))
    _WriteLog.record = timers.wrap(bookkeeping, _WriteLog.record)
    for fn, part in (
        (hazards.analyse, "static hazard pass"),
        (hazards.timing_model, "static hazard pass"),
        (predict.predicted_change, "cycle model (prediction)"),
        (edits.prepare_edit, "assemble, diff, checks"),
    ):
        patch_everywhere(fn, timers.wrap(part, fn))


def report(title: str, timers: PartTimers, wall: float, cpu: float) -> None:
    total = sum(timers.seconds.values())
    print(f"\n{title}: {wall:.2f} s wall, {cpu:.2f} s CPU (parts sum to {total:.2f} s)")
    for part, seconds in sorted(timers.seconds.items(), key=lambda kv: -kv[1]):
        share = 100 * seconds / total if total else 0.0
        print(f"  {part:<38} {seconds:7.2f} s {share:5.1f} %  {timers.calls[part]:>8} calls")


def import_seconds(statement: str, runs: int = 3) -> float:
    """Best CPU seconds (user + sys) of a fresh interpreter running `statement`, minus an
    empty interpreter's."""

    def child(code: str) -> float:
        probe = f"import resource\n{code}\nr = resource.getrusage(resource.RUSAGE_SELF)\n"
        probe += "print(r.ru_utime + r.ru_stime)"
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        return float(out.stdout.strip())

    empty = min(child("pass") for _ in range(runs))
    return min(child(statement) for _ in range(runs)) - empty


def f4gemm_dir() -> Path:
    from f4pipe.core.cache import cache_root
    from f4pipe.fetch import PypiSource, fetch_aiter

    return fetch_aiter(PypiSource(), cache_root() / "test-resources").f4gemm_dir


def try_workload(tile: str, timers: PartTimers, scratch: Path) -> str:
    from f4pipe.codeobj.co2asm import co2asm
    from f4pipe.codeobj.toolchain import find_toolchain
    from f4pipe.edits.trykernel import try_edit

    toolchain = find_toolchain()
    kernel = KERNEL.format(tile=tile)
    asm = co2asm(f4gemm_dir() / f"{kernel}.co", toolchain)
    label = TRY_TILES[tile]
    edit = scratch / f"nop_{tile}.s"
    edit.write_text(asm.replace(f"{label}:\n", f"{label}:\n\ts_nop 0\n", 1))
    result, wall, cpu = timers.run(
        "everything else", try_edit, edit, f4gemm_dir(), toolchain, device="emulator"
    )
    report(f"try {tile} (s_nop edit)", timers, wall, cpu)
    return result.verdict_line()


def verify_workload(cases: int, timers: PartTimers) -> str:
    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.core.schemas import ArtifactKeys
    from f4pipe.emu import EmulatorDevice
    from f4pipe.host.matrices import get_matrix
    from f4pipe.pipeline.stages import StageSettings, verify_stage

    manifest = read_manifest(f4gemm_dir())
    settings = StageSettings(keys=ArtifactKeys("bench-aiter", "bench-toolchain", "emulator"))
    matrix = get_matrix("seed")[:cases]
    rows, wall, cpu = timers.run(
        "everything else", verify_stage, EmulatorDevice(), manifest, matrix, settings
    )
    report(f"verify, the seed matrix's first {cases} case(s)", timers, wall, cpu)
    return f"{len(rows)} rows, {sum(bool(r['passed']) for r in rows)} passed"


def safety_workload(kernels: int, timers: PartTimers) -> str:
    from f4pipe.aiter.manifest import read_manifest
    from f4pipe.core.schemas import ArtifactKeys
    from f4pipe.pipeline.edgesweep import sweep

    manifest = read_manifest(f4gemm_dir())
    names = [e.name for e in manifest][:kernels]
    keys = ArtifactKeys("bench-aiter", "bench-toolchain", "emulator")
    rows, wall, cpu = timers.run("everything else", sweep, manifest, keys, kernels=names)
    report(f"safety sweep of {kernels} kernel(s)", timers, wall, cpu)
    return f"{len(rows)} rows"


def main() -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=("try", "verify", "safety"))
    parser.add_argument("--tile", action="append", choices=sorted(TRY_TILES))
    parser.add_argument("--cases", type=int, default=12, help="verify: the first N seed cases")
    parser.add_argument("--kernels", type=int, default=3, help="safety: the first N kernels")
    args = parser.parse_args()
    print("start-up imports (CPU s of a fresh interpreter, an empty one's subtracted):")
    for label, statement in IMPORTS.items():
        print(f"  {label:<38} {import_seconds(statement):7.2f} s")
    timers = PartTimers()
    install(timers)
    with tempfile.TemporaryDirectory(prefix="f4pipe-profile-") as scratch:
        for workload in args.workload or ("try", "verify", "safety"):
            if workload == "try":
                for tile in args.tile or sorted(TRY_TILES):
                    timers.__init__()
                    print("  " + try_workload(tile, timers, Path(scratch)))
            elif workload == "verify":
                timers.__init__()
                print("  " + verify_workload(args.cases, timers))
            else:
                timers.__init__()
                print("  " + safety_workload(args.kernels, timers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
