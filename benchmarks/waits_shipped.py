"""`f4pipe waits` over every shipped kernel: how many s_waitcnt are stricter than needed,
which loosenings the emulator confirms, and what the cycle model predicts they save.

Default: each loosening alone (`waits --verify`), launched at `try`'s quick shapes (a full tile
plus a one-row edge tile, K = 1024); savings are the cycle model's workgroup cycles at
K = 2048, PREDICTED, one loosening at a time.

`--loosen`: what `waits --apply --loosen` does, kernel by kernel: every wait relaxed in turn
on top of the ones before (quick shapes), then the fully loosened kernel checked statically
(0 findings) and launched once at the thorough shapes (the seed's every-kernel shape and
every shape of the safety sweep); the PREDICTED saving is all loosenings together. Results
go to `--out` (JSON, one entry per kernel, resumable: kernels already there are skipped).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from f4pipe.aiter.manifest import read_manifest
from f4pipe.analysis.hazards import analyse
from f4pipe.analysis.waits import advise, repairs
from f4pipe.codeobj.program import Program
from f4pipe.core.fsio import write_text
from f4pipe.edits.trykernel import open_devices, quick_cases, thorough_cases
from f4pipe.edits.waitcheck import first_problem, loosen_in_turn, verify_loosening
from f4pipe.perf.fit import default_f4gemm_dir
from f4pipe.perf.predict import wait_change_cycles
from f4pipe.perf.profile import KernelProfile


def short(name: str) -> str:
    return name.split("Fp4_", 1)[-1]


def each_alone(manifest, device) -> None:
    totals = {"waits": 0, "static": 0, "confirmed": 0, "saved_clk": 0.0}
    start_cpu, start = time.process_time(), time.perf_counter()
    for entry in manifest:
        co = manifest.co_path(entry)
        advice = advise(Program.load(co, entry.symbol))
        verified = verify_loosening(entry, co, advice, device, quick_cases(entry))
        looser = [v for v in verified if v.confirmed != v.actual]
        profile = KernelProfile(entry, co)
        saved = []
        for v in looser:
            before, after = wait_change_cycles(profile, {v.pc: v.confirmed})
            saved.append(before - after)
        stricter = sum(a.stricter for a in advice)
        totals["waits"] += len(advice)
        totals["static"] += stricter
        totals["confirmed"] += len(looser)
        totals["saved_clk"] += sum(saved)
        print(
            f"{short(entry.name):24s} {len(advice):4d} waits, {stricter:3d} "
            f"looser statically, {len(looser):3d} confirmed looser by emulation; "
            f"PREDICTED saving {sum(saved):7.0f} clk per workgroup at K=2048"
            + (f" (best {max(saved):.0f})" if saved else "")
        )
    print(
        f"all {len(manifest)} kernels: {totals['waits']} s_waitcnt, {totals['static']} looser "
        f"statically, {totals['confirmed']} confirmed looser on the emulator, PREDICTED "
        f"saving {totals['saved_clk']:.0f} clk per workgroup in all; "
        f"{time.process_time() - start_cpu:.0f} CPU-s, {time.perf_counter() - start:.0f} s wall"
    )


def loosen_one(entry, co: Path, device) -> dict:
    """One kernel through `waits --apply --loosen`, checked at the thorough shapes."""
    start_cpu = time.process_time()
    program = Program.load(co, entry.symbol)
    missing = repairs(program)
    with tempfile.TemporaryDirectory(prefix="f4pipe-loosen-") as tmp:
        limits, loosened = loosen_in_turn(entry, co, device, quick_cases(entry), Path(tmp))
        findings = analyse(Program.load(loosened, entry.symbol)).count
        problem = first_problem(device, entry, loosened, thorough_cases(entry))
    before, after = wait_change_cycles(KernelProfile(entry, co), limits)
    return {
        "kernel": entry.name,
        "waits": len(advise(program)),
        "missing": len(missing),
        "loosened": len(limits),
        "static_findings": findings,
        "thorough_shapes": len(thorough_cases(entry)),
        "thorough_problem": problem,
        "predicted_clk_before": round(before),
        "predicted_clk_after": round(after),
        "cpu_s": round(time.process_time() - start_cpu),
    }


def loosen_all(manifest, device, out: Path, only: list[str]) -> None:
    done = json.loads(out.read_text()) if out.is_file() else {}
    for entry in manifest:
        if entry.name in done or (only and not any(s in entry.name for s in only)):
            continue
        r = loosen_one(entry, manifest.co_path(entry), device)
        done[entry.name] = r
        write_text(out, json.dumps(done, indent=1) + "\n")
        print(
            f"{short(entry.name):24s} {r['waits']:3d} waits, {r['missing']} missing, "
            f"{r['loosened']:2d} loosened, {r['static_findings']} static findings, "
            f"{r['thorough_shapes']} thorough shapes: "
            f"{r['thorough_problem'] or 'clean'}; PREDICTED {r['predicted_clk_before']} -> "
            f"{r['predicted_clk_after']} clk per workgroup at K=2048; {r['cpu_s']} CPU-s",
            flush=True,
        )
    rows = list(done.values())
    print(
        f"{len(rows)} of {len(manifest)} kernels: "
        f"{sum(r['missing'] for r in rows)} missing waits, "
        f"{sum(r['loosened'] for r in rows)} waits loosened, "
        f"{sum(bool(r['thorough_problem']) or r['static_findings'] > 0 for r in rows)} "
        f"loosened kernels failing; PREDICTED saving "
        f"{sum(r['predicted_clk_before'] - r['predicted_clk_after'] for r in rows)} clk per "
        "workgroup at K=2048 in all"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loosen", action="store_true", help="every wait loosened in turn")
    parser.add_argument("--out", type=Path, default=Path("waits-loosened.json"))
    parser.add_argument("--kernels", nargs="*", default=[], help="names containing these")
    args = parser.parse_args()
    manifest = read_manifest(default_f4gemm_dir())
    (device,) = open_devices("emulator", True)
    try:
        if args.loosen:
            loosen_all(manifest, device, args.out, args.kernels)
        else:
            each_alone(manifest, device)
    finally:
        device.close()


if __name__ == "__main__":
    main()
