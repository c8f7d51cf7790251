"""The cycle model's one table of latencies and throughputs, and its calibrated constants.

What an instruction *is* for timing (unit, counter, MFMA passes, s_nop wait states, s_waitcnt
limits) comes from the emulator's own decode (f4pipe.arch.effects): this module adds only how
long things take. Each row names its source; a row marked "assumed" is this model's choice
where no public source gives the figure, and docs/model-card.md ("What it models") lists
those. Sources:

- ISA: AMD Instinct CDNA4 ISA reference guide (MFMA passes: Table 28 and section 7.1.5;
  s_waitcnt counters: section 4.4; LDS DMA: section 9.1.9).
- WP: AMD CDNA4 architecture whitepaper (CUs, LDS banks, L2, Infinity Cache, HBM).
- GT: AMD's gfx950 Gluon GEMM tutorials (ROCm/gfx950-gluon-tutorials, docs/lds_throughput.md,
  tcp_bound_tile_model.md): microbenchmarked LDS throughput and latency, VMEM round trips.
- LLVM: llvm/lib/Target/AMDGPU/SISchedule.td and GCNHazardRecognizer.cpp (gfx950 paths).

Calibrated constants (Calibration) are the few global numbers no source pins down for these
kernels on a loaded MI355X (sustained clock, loaded memory latency, bandwidths, launch
overhead, how much a workgroup's time varies from CU to CU). They live in calibration.json
beside this file with the rows they were fitted on and the command that fitted them
(`python -m f4pipe.perf.fit`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

from f4pipe.arch.gfx950 import NUM_CU

#: Where the fitted constants live (one file; `python -m f4pipe.perf.fit` rewrites it).
CALIBRATION_PATH = Path(__file__).with_name("calibration.json")
#: The M ranges the accuracy is reported in: (name, lowest M, highest M).
M_RANGES = (("M<=64", 1, 64), ("65-512", 65, 512), (">512", 513, 1 << 31))
#: The accuracy figures users are shown: out-of-sample, k-fold over (N, K).
ERROR_BAND = "kfold_nk"
#: ... and on aiter's later timings of the same code objects, never fitted on (fit.HELDBACK_PATH).
HELD_BACK = "held_back"
#: aiter's re-timings of one kernel at one shape in later revisions differ by a median 1.8 %
#: (its git history): the resolution of a measurement, which `f4pipe predict` holds its gaps
#: against and the model's evaluation turns into a noise level.
RETIMING_MEDIAN_PCT = 1.8
#: calibration.json's per-kernel out-of-sample error (k-fold over (N, K), each kernel's rows).
PER_KERNEL = "per_kernel_kfold"
#: The error to expect of a kernel aiter never timed: each kernel predicted by a fit without it.
UNTIMED_KERNEL_BAND = "leave_one_kernel_out"


@dataclass(frozen=True)
class Cost:
    """One row of the timing table."""

    name: str
    value: float
    unit: str
    source: str


#: The timing table. Values are in engine clocks unless `unit` says otherwise.
TABLE: tuple[Cost, ...] = (
    Cost(
        "issue_cycles",
        4,
        "clk per instruction per wave",
        "ISA section 4 / LLVM SISchedule.td: a SIMD executes a wave64 VALU op over 4 clocks "
        "(16 lanes per clock) and considers a wave for issue once per 4-clock cadence; one "
        "wave per SIMD (all f4gemm kernels) therefore issues at most one instruction per 4 clk",
    ),
    Cost(
        "wait_state_cycles",
        4,
        "clk per wait state",
        "LLVM GCNHazardRecognizer counts wait states in issue slots (an s_nop N fills N+1, any "
        "other instruction 1; f4pipe.arch.effects.Effects.wait_states); one slot = issue_cycles",
    ),
    Cost(
        "mfma_pass_cycles",
        4,
        "clk per MFMA pass",
        "ISA Table 28 / 7.1.5: v_mfma_scale_f32_16x16x128_f8f6f4 with FP4 operands is 4 passes "
        "= 16 clk, the MFMA pipe of its SIMD busy for all of them (passes from "
        "f4pipe.arch.effects.mfma_passes); 65,536 FLOP / 16 clk x 4 SIMDs = 16,384 FLOP/clk/CU "
        "= WP Table 1",
    ),
    Cost(
        "mfma_writeback_cycles",
        4,
        "clk after the last pass",
        "assumed: one issue slot after the last pass before a dependent instruction may read the "
        "result (the kernels' own s_nop wait states cover the ISA minimum)",
    ),
    Cost(
        "lds_latency",
        64,
        "clk from service to data",
        "GT lds_throughput.md: first data of ds_read_b128 after about 50-70 clk; LLVM calls LDS "
        "latency 'between 2 and 64'",
    ),
    Cost(
        "lds_pair_bytes_per_clk",
        128,
        "B/clk per SIMD pair",
        "GT lds_throughput.md: each SIMD pair has a 128 B/clk path to LDS (one ds_read_b128 per "
        "16 clk per SIMD with all 4 busy)",
    ),
    Cost(
        "lds_bank_bytes_per_clk",
        256,
        "B/clk per CU",
        "WP: 64 banks x 4 B; bank conflicts from the lanes' real addresses (trace.lds_bank_cycles)",
    ),
    Cost(
        "smem_latency",
        200,
        "clk",
        "assumed: scalar loads hit the scalar cache after the first wave; LLVM's 5 is a "
        "placeholder its file calls inaccurate. Only the kernels' prologues load scalars",
    ),
    Cost(
        "barrier_cycles",
        16,
        "clk after the last wave arrives",
        "assumed: s_barrier releases within a few issue slots (LLVM's 500 is marked 'guessed')",
    ),
    Cost(
        "num_cu",
        NUM_CU,
        "CUs",
        "WP: 8 XCDs x 32 CUs; aiter's table is cu_num 256",
    ),
    Cost("num_xcd", 8, "XCDs", "WP; workgroups go to XCDs round-robin (ROCm docs, MI300/MI355)"),
    Cost("l2_bytes_per_xcd", 4 << 20, "B", "WP: 4 MiB L2 per XCD"),
    Cost(
        "l2_write_share",
        0.5,
        "of the bytes per clk the L2 reads",
        "WP: each of an XCD's 16 L2 channels reads 128 B and writes 64 B per clk. A round's "
        "workgroups store D together at their end, so D leaves a CU at half the rate its "
        "loads arrive (model.store_clocks)",
    ),
    Cost("mall_bytes", 256 << 20, "B", "WP: 256 MiB Infinity Cache"),
)

COST: dict[str, float] = {c.name: c.value for c in TABLE}


@dataclass(frozen=True)
class Calibration:
    """The model's fitted global constants (none per kernel, none per shape)."""

    clock_ghz: float  # sustained engine clock with every CU busy and its MFMA pipes saturated
    clock_light_ghz: float  # ... with (almost) no load; linear in the load between (round_clocks)
    vmem_latency: float  # clk, loaded round trip of a buffer load (L2 / Infinity Cache)
    cu_vmem_bytes_per_clk: float  # a CU's vector-memory path for bytes the L2 (or MALL) serves
    cu_hbm_bytes_per_clk: float  # ... for bytes HBM serves (cold streams queue in the fabric)
    hbm_tbps: float  # bytes from HBM (first touch; past the MALL, each round's tiles), TB/s
    l2_tbps: float  # bytes every workgroup's buffer accesses move, through the L2s, TB/s
    launch_us: float  # launch and drain overhead per kernel, us
    overlap_p: float  # p of the p-norm that joins compute and memory time (large = max)
    power_fixed_share: float  # a busy CU's load that does not follow its MFMA pipes' activity
    workgroup_spread: float  # relative spread (sigma) of a workgroup's time from CU to CU


@dataclass(frozen=True)
class CalibrationFile:
    """calibration.json: the constants, what they were fitted on, and how."""

    calibration: Calibration
    calibration_id: str
    fitted_on: dict[str, Any]
    command: str
    accuracy: dict[str, Any]

    def error_band(
        self, m: int | None = None, measure: str = ERROR_BAND
    ) -> tuple[float | None, float | None]:
        """(median, p90) absolute % error measured out-of-sample for M's range, or over all
        rows when M is None; (None, None) for an uncalibrated model. `measure`: ERROR_BAND
        (k-fold over the calibration's own rows) or HELD_BACK (aiter's later tuning sessions
        at shapes the calibration never saw: the larger, and the one to expect of a session
        other than the one the calibration was timed in)."""
        acc = self.accuracy.get(measure, {})
        name = "all"
        if m is not None:
            name = next((r for r, lo, hi in M_RANGES if lo <= m <= hi), "all")
        row = acc.get(name, {})
        return row.get("median_pct"), row.get("p90_pct")

    def kernel_error(self, kernel: str) -> dict[str, Any]:
        """The out-of-sample error of `kernel`'s own timed rows (k-fold: median, p90, rows);
        for a kernel aiter never timed, the band of a kernel the fit has not seen (leave one
        kernel out, all rows) with rows 0; measure names which. Empty when uncalibrated."""
        own = self.accuracy.get(PER_KERNEL, {}).get(kernel)
        if own is not None:
            return {"measure": ERROR_BAND, **own}
        band = self.accuracy.get(UNTIMED_KERNEL_BAND, {}).get("all")
        if band is None:
            return {}
        return {"measure": UNTIMED_KERNEL_BAND, **band, "rows": 0}

    def to_json(self) -> dict[str, Any]:
        return {
            "calibration_id": self.calibration_id,
            "constants": asdict(self.calibration),
            "fitted_on": self.fitted_on,
            "command": self.command,
            "accuracy": self.accuracy,
        }


#: Before any fit: figures from the sources (about 1.36 GHz sustained under full FP4 load, the
#: 2.4 GHz peak not quite held at light load; GT's ~1,000 clk round trip; one 128 B L1 line per
#: clk per CU, and for HBM a 256th of 8 TB/s at ~70 % and 1.36 GHz; 8 TB/s peak HBM at ~70 %).
DEFAULT_CALIBRATION = Calibration(
    clock_ghz=1.36,
    clock_light_ghz=2.1,
    vmem_latency=1000.0,
    cu_vmem_bytes_per_clk=128.0,
    cu_hbm_bytes_per_clk=16.0,
    hbm_tbps=5.6,
    l2_tbps=12.0,
    launch_us=4.0,
    overlap_p=4.0,
    power_fixed_share=0.5,  # no source: between a load set by busy CUs alone (1) or MFMAs (0)
    workgroup_spread=0.01,  # no source: a start for the fit
)


@cache
def load_calibration(path: Path = CALIBRATION_PATH) -> CalibrationFile:
    """The committed calibration (the defaults, labelled uncalibrated, if none is there)."""
    if not path.is_file():
        return CalibrationFile(DEFAULT_CALIBRATION, "uncalibrated", {}, "", {})
    raw = json.loads(path.read_text())
    if set(raw["constants"]) != {f.name for f in fields(Calibration)}:
        # fitted for another version of the model: its constants mean other things
        return CalibrationFile(DEFAULT_CALIBRATION, "uncalibrated", {}, "", {})
    return CalibrationFile(
        calibration=Calibration(**raw["constants"]),
        calibration_id=raw["calibration_id"],
        fitted_on=raw.get("fitted_on", {}),
        command=raw.get("command", ""),
        accuracy=raw.get("accuracy", {}),
    )
