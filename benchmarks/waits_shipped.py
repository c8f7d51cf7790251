"""`f4pipe waits --verify` over every shipped kernel: how many s_waitcnt are stricter than
needed, which loosenings the emulator confirms, and what the cycle model predicts they save.

Prints one line per kernel and the totals the README quotes. Each loosening is launched
alone at `try`'s quick shapes (a full tile plus a one-row edge tile, K = 1024); savings are
the cycle model's workgroup cycles at K = 2048, PREDICTED, one loosening at a time.
"""

from __future__ import annotations

import time

from f4pipe.emu.program import Program
from f4pipe.emu.waits import advise, verify_loosening
from f4pipe.manifest import read_manifest
from f4pipe.perf.fit import default_f4gemm_dir
from f4pipe.perf.predict import KernelProfile, wait_change_cycles
from f4pipe.trykernel import open_devices, quick_cases


def main() -> None:
    manifest = read_manifest(default_f4gemm_dir())
    (device,) = open_devices("emulator", True)
    totals = {"waits": 0, "static": 0, "confirmed": 0, "saved_clk": 0.0}
    start_cpu, start = time.process_time(), time.perf_counter()
    try:
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
                f"{entry.name.split('Fp4_', 1)[-1]:24s} {len(advice):4d} waits, {stricter:3d} "
                f"looser for registers, {len(looser):3d} confirmed looser by emulation; "
                f"PREDICTED saving {sum(saved):7.0f} clk per workgroup at K=2048"
                + (f" (best {max(saved):.0f})" if saved else "")
            )
    finally:
        device.close()
    print(
        f"all {len(manifest)} kernels: {totals['waits']} s_waitcnt, {totals['static']} looser "
        f"for registers, {totals['confirmed']} confirmed looser on the emulator, PREDICTED "
        f"saving {totals['saved_clk']:.0f} clk per workgroup in all; "
        f"{time.process_time() - start_cpu:.0f} CPU-s, {time.perf_counter() - start:.0f} s wall"
    )


if __name__ == "__main__":
    main()
