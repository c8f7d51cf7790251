"""Candidate mechanisms of the cycle model, each refitted and judged out of sample as the
research/README.md's "Mechanisms measured" table judges them (`f4research variants
[--variant NAME ...] [--json]`; about a minute per variant once the simulations are cached, so
it is not part of `nox -s bench`).

A variant is another closed form over the same fit.Design (the same simulated workgroup
cycles): (constants, design, rows) -> predicted us. Each is scored on the calibration's own rows
only (the held-back rows check the adopted model; choosing by them would fit to them):

- in sample: the constants refitted on all 800 rows; median / p90 % error per M range, and the
  seed's 4 shapes;
- out of sample: k-fold over (N, K) and leave one kernel out, refitted without the held-out rows;
- top 3: where aiter's recorded kernel falls among the kernels safe at its shape that its tuner
  raced and that read B as it does (predict_accuracy.ranking's rules), in sample and with each
  row's kernels predicted by constants fitted without the row's (N, K) fold;
- the clock the variant gives the loads of Gluon's two kernels, against the clocks their main
  loops ran at over the tutorial's refreshes (predict_accuracy.held_back_clocks: the implied
  clock corrected by the variant's own share of such a launch outside the loop), and how far
  it lies outside their span (predict_accuracy.outside_loop_clock_span);
- held back: aiter's later timings at the 658 shapes the calibration never saw
  (fit.held_back_rows), predicted with the constants fitted on all 800 rows, as
  research/f4research/heldback.py scores the committed model: error per M range, and where the
  recorded kernel ranks at the shapes whose tuner had every kernel. A check, as Gluon's clocks
  are: a variant is chosen on the calibration's rows, and one these measurements contradict is
  not adopted; none is tuned until they agree.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from f4pipe.aiter.manifest import read_manifest
from f4pipe.aiter.shaperules import is_safe
from f4pipe.perf import fit, model
from f4pipe.perf.costs import COST, Calibration, load_calibration
from f4pipe.perf.history import load_history
from f4pipe.perf.predict import Predictor
from f4research.accuracy import (
    GLUON_PROBE,
    GLUON_SHAPE,
    WITHIN,
    held_back_clocks,
    outside_loop_clock_span,
    whole_over_loop,
)


def round_cost(us_per_round: float) -> fit.PredictDesign:
    """A fixed time per round of workgroups (dispatch and drain a CU's simulation lacks)."""

    def predict(cal, d, idx=slice(None)):
        rounds = np.ceil(d.workgroups[idx] / COST["num_cu"])
        return fit.predict_design(cal, d, idx) + rounds * us_per_round

    return predict


def workgroup_clocks(clocks: float) -> fit.PredictDesign:
    """Fixed clocks added to every workgroup's simulated time."""

    def predict(cal, d, idx=slice(None)):
        return fit.design_time(cal, d, idx, fit.design_cycles(cal, d, idx) + clocks)

    return predict


def memory_power(mfma_part: float) -> fit.PredictDesign:
    """A busy CU's variable load part MFMA activity, part memory traffic (bytes per clock
    over its L2 rate)."""

    def predict(cal, d, idx=slice(None)):
        cyc = fit.design_cycles(cal, d, idx)
        clocks = np.maximum(cyc, 1.0)
        activity = d.mfma_busy[idx] / clocks
        per_clock = d.l2[idx] / d.workgroups[idx] / clocks
        traffic = np.clip(per_clock / cal.cu_vmem_bytes_per_clk, 0.0, 1.0)
        mixed = mfma_part * activity + (1 - mfma_part) * traffic
        return fit.design_time(cal, d, idx, cyc, mixed * cyc)

    return predict


def mix_by_slower_path(cal, d, idx=slice(None)):
    """A CU's rate for its mix of L2- and HBM-served bytes set by the slower path alone, not
    by clocks per byte added."""
    share = d.share[idx]
    bpc = 1.0 / np.maximum(1.0 / cal.cu_vmem_bytes_per_clk, share / cal.cu_hbm_bytes_per_clk)
    return fit.design_time(cal, d, idx, fit.design_cycles(cal, d, idx, bpc))


def rate_in_gbps(reference_ghz: float) -> fit.PredictDesign:
    """A CU's memory rate fixed in GB/s: its bytes per clock scale by reference / the row's
    clock (the clock from the rate-independent first pass)."""

    def predict(cal, d, idx=slice(None)):
        wg = d.workgroups[idx]
        bpc = model.effective_bytes_per_clk(cal, d.share[idx])
        activity = d.mfma_busy[idx] / np.maximum(fit.design_cycles(cal, d, idx, bpc), 1.0)
        full, _rest, full_clock, last_clock = model.round_clocks(cal, wg, activity)
        clock = np.where(full > 0, full_clock, last_clock)
        sim = model.SIM_BYTES_PER_CLK
        scaled = np.clip(bpc * reference_ghz / clock, sim[0], sim[-1])
        return fit.design_time(cal, d, idx, fit.design_cycles(cal, d, idx, scaled))

    return predict


def store_rate(bytes_per_clk: float) -> fit.PredictDesign:
    """A workgroup's D stores leave its CU at a fixed `bytes_per_clk` rather than at a share
    of its L2 read rate (model.store_clocks): each of its D bytes costs the difference from
    the read rate, after its main loop. At the read rate it is f4pipe-cu-7, which charged D
    like any load."""

    def predict(cal, d, idx=slice(None)):
        slower = max(0.0, 1.0 / bytes_per_clk - 1.0 / cal.cu_vmem_bytes_per_clk)
        cyc = fit.simulated_cycles(cal, d, idx) + d.d_bytes[idx] * slower
        return fit.design_time(cal, d, idx, cyc)

    return predict


def light_l2(cap: float) -> fit.PredictDesign:
    """An XCD's L2 read channels shared by its busy CUs: a CU's L2 rate is the fitted one
    with all 32 busy, more with fewer (the rate times 32 over the busy CUs per XCD, up to
    `cap` B/clk; rows of under 160 workgroups)."""

    def predict(cal, d, idx=slice(None)):
        per_xcd = np.minimum(d.workgroups[idx], COST["num_cu"]) / COST["num_xcd"]
        rate = cal.cu_vmem_bytes_per_clk
        read = np.clip(rate * 32 / np.maximum(per_xcd, 1.0), rate, max(cap, rate))
        bpc = model.effective_bytes_per_clk(replace(cal, cu_vmem_bytes_per_clk=read), d.share[idx])
        cyc = fit.simulated_cycles(cal, d, idx, bpc) + model.store_clocks(cal, d.d_bytes[idx])
        return fit.design_time(cal, d, idx, cyc)

    return predict


@dataclass(frozen=True)
class Variant:
    what: str  # what it changes
    predict: fit.PredictDesign
    l2_rates: tuple[float, ...] = fit.VMEM_BPC_GRID  # the fit's grid of a CU's L2 rates


#: research/README.md's table has the figures of each.
VARIANTS: dict[str, Variant] = {
    "adopted": Variant("the committed model", fit.predict_design),
    "round_cost_2.5us": Variant("2.5 us per round of workgroups", round_cost(2.5)),
    "workgroup_4000clk": Variant("4,000 clk added to every workgroup", workgroup_clocks(4000.0)),
    "memory_power_0.7": Variant(
        "a CU's variable load 0.7 MFMA activity, 0.3 traffic", memory_power(0.7)
    ),
    "mix_slower_path": Variant("the L2/HBM mix set by its slower path", mix_by_slower_path),
    "rate_gbps": Variant("a CU's memory rate in GB/s (at 1.4 GHz as fitted)", rate_in_gbps(1.4)),
    "stores_at_read_rate": Variant(
        "f4pipe-cu-7: D stores at a CU's L2 read rate, as any load",
        store_rate(float("inf")),
    ),
    "store_rate_16": Variant("D stores at 16 B/clk per CU", store_rate(16.0)),
    # where the fit goes when the store rate (12 to 24 B/clk) and a CU's L2 rate (32 to 44,
    # every 2) are both on its grid: the lowest store rate, at 34 B/clk from the L2
    "store_rate_12_l2_34": Variant(
        "D stores at 12 B/clk per CU, L2-served bytes at 34", store_rate(12.0), (34.0,)
    ),
    "light_l2_64": Variant(
        "a CU's L2 rate up to 64 B/clk with under 20 busy CUs per XCD", light_l2(64.0)
    ),
}


@dataclass
class Pairs:
    """Rows with every kernel: the design, and what ranking needs."""

    rows: pd.DataFrame
    names: list[str]
    design: fit.Design  # row-major: row i, kernel j at i * len(names) + j
    recorded: np.ndarray  # the recorded kernel's column per row
    candidates: list[list[int] | None]  # the columns ranked per row (None: not ranked)
    probe: fit.Design | None = None  # aiter's 256x256 at Gluon's shape and at half its K
    held_back: Pairs | None = None  # aiter's later rows at shapes the calibration never saw

    def recorded_design(self) -> fit.Design:
        return take(self.design, np.arange(len(self.rows)) * len(self.names) + self.recorded)

    def predict_every(self, cal: Calibration, predict: fit.PredictDesign) -> np.ndarray:
        """Predicted us, rows x kernels."""
        return predict(cal, self.design, slice(None)).reshape(len(self.rows), len(self.names))

    def recorded_of(self, every: np.ndarray) -> np.ndarray:
        """Each row's recorded kernel's column of `every` (rows x kernels)."""
        return every[np.arange(len(self.rows)), self.recorded]


def take(d: fit.Design, idx: np.ndarray) -> fit.Design:
    out = fit.Design(
        workgroups=d.workgroups[idx],
        l2=d.l2[idx],
        hbm=d.hbm[idx],
        cycles={lat: table[idx] for lat, table in d.cycles.items()},
        mfma_busy=d.mfma_busy[idx],
        d_bytes=d.d_bytes[idx],
    )
    return out


def build_pairs() -> Pairs:
    f4gemm_dir = fit.default_f4gemm_dir()
    manifest = read_manifest(f4gemm_dir)
    predictor = Predictor(manifest, load_calibration())
    rows = fit.measured_rows(f4gemm_dir, manifest)
    history = load_history()

    def raced(r) -> frozenset[str] | None:  # the seed's rows are not ranked
        if r.source != "aiter":
            return NOT_RANKED
        return history.raced(r.m, r.n, r.k, r.kernel, r.us)

    pairs = every_kernel(predictor, rows, raced)
    m, n, k = GLUON_SHAPE
    probe_rows = pd.DataFrame({"m": [m, m], "n": [n, n], "k": [k, k // 2]})
    pairs.probe = fit.design(predictor, probe_rows, [GLUON_PROBE] * 2, fit.LATENCY_GRID)
    held = fit.held_back_rows()
    held = held[~held["shape_in_calibration"]].reset_index(drop=True)
    held["warm"] = False
    # no history knows these rows: where the tuner had every kernel, every kernel competes
    pairs.held_back = every_kernel(
        predictor, held, lambda r: None if r.every_kernel_raced else NOT_RANKED
    )
    return pairs


#: `raced(row)` of a row that is not ranked (a seed row, or one whose tuner lacked some kernels
#: and no history says which).
NOT_RANKED: frozenset[str] = frozenset()


def every_kernel(predictor: Predictor, rows: pd.DataFrame, raced) -> Pairs:
    """`rows` (m, n, k, kernel, us, warm) with every kernel of the manifest. `raced(row)`: the
    kernels the row's tuner raced, None for all of them, NOT_RANKED."""
    manifest = predictor.manifest
    names = [e.name for e in manifest]
    column = {name: j for j, name in enumerate(names)}
    every = rows.loc[rows.index.repeat(len(names))].reset_index(drop=True)
    design = fit.design(predictor, every, names * len(rows), fit.LATENCY_GRID)
    candidates: list[list[int] | None] = []
    for r in rows.itertuples():
        had = raced(r)
        if had is NOT_RANKED:
            candidates.append(None)
            continue
        same = manifest.same_b_layout(manifest.get(r.kernel))
        candidates.append(
            [
                column[e.name]
                for e in same
                if is_safe(e, r.m, r.n, r.k) and (had is None or e.name in had)
            ]
        )
    recorded = np.array([column[k] for k in rows["kernel"]])
    return Pairs(rows, names, design, recorded, candidates)


def gluon_clocks(cal: Calibration, predict: fit.PredictDesign, probe: fit.Design) -> list[dict]:
    """predict_accuracy.held_back_clocks under the variant: the loops' clocks from the
    variant's own time for the probe kernel at Gluon's K and K / 2."""
    at_k, at_half = predict(cal, probe, slice(None))
    return held_back_clocks(cal, whole_over_loop(float(at_k), float(at_half)))


def ranking_pcts(pairs: Pairs, pred: np.ndarray) -> dict[str, float]:
    """Over the ranked rows: the share (%) whose recorded kernel is the predicted best of its
    candidates, within 5 % of it, and in the predicted top 3 (a recorded kernel that is not a
    candidate is a miss in each)."""
    best = within = top3 = total = 0
    for i, cand in enumerate(pairs.candidates):
        if cand is None:
            continue
        total += 1
        ranked = sorted(((pairs.names[j], pred[i, j]) for j in cand), key=lambda x: x[1])
        rank, gap = fit.recorded_rank(ranked, pairs.names[pairs.recorded[i]])
        best += rank == 1
        within += gap <= WITHIN
        top3 += rank is not None and rank <= 3
    return {
        name: round(100 * count / total, 2)
        for name, count in (("best", best), ("within_5", within), ("top3", top3))
    }


def top3_pct(pairs: Pairs, pred: np.ndarray) -> float:
    return ranking_pcts(pairs, pred)["top3"]


def held_back_score(cal: Calibration, predict: fit.PredictDesign, held: Pairs) -> dict:
    """Error and ranking on the held-back rows under constants fitted on the calibration."""
    every = held.predict_every(cal, predict)
    return {
        "error": fit.by_range(held.recorded_of(every), held.rows),
        "ranking": ranking_pcts(held, every),
    }


def score(pairs: Pairs, variant: Variant) -> dict:
    predict, l2_rates = variant.predict, variant.l2_rates
    rows = pairs.rows
    meas = rows["us"].to_numpy()
    recorded = pairs.recorded_design()
    cal, cost = fit.fit_constants(recorded, meas, np.arange(len(rows)), predict, l2_rates)
    every = pairs.predict_every(cal, predict)
    mine = pairs.recorded_of(every)
    folds = fit.nk_folds(rows)
    kfold_every = np.zeros_like(every)
    for g in np.unique(folds):
        held = folds == g
        fold_cal, _ = fit.fit_constants(recorded, meas, np.nonzero(~held)[0], predict, l2_rates)
        kfold_every[held] = pairs.predict_every(fold_cal, predict)[held]
    kfold = pairs.recorded_of(kfold_every)
    loko = fit.cross_validated(recorded, rows, rows["kernel"].to_numpy(), predict, l2_rates)
    seed = (rows["source"] == "seed").to_numpy()
    gluon = gluon_clocks(cal, predict, pairs.probe)
    return {
        "fit_cost": round(cost, 3),
        "constants": {k: round(float(v), 4) for k, v in cal.__dict__.items()},
        "in_sample": fit.by_range(mine, rows),
        "kfold_nk": fit.by_range(kfold, rows),
        "leave_one_kernel_out": fit.by_range(loko, rows),
        "top3_pct_in_sample": top3_pct(pairs, every),
        "top3_pct_kfold": top3_pct(pairs, kfold_every),
        "seed_error_pct": [round(float(x), 1) for x in (mine[seed] / meas[seed] - 1) * 100],
        "gluon_loop_clock_error_pct": {
            f"{c['kernel']}, {c['refresh']}": c["loop_error_pct"] for c in gluon
        },
        "gluon_outside_span_pct": outside_loop_clock_span(gluon),
        "held_back": held_back_score(cal, predict, pairs.held_back),
    }


def print_row(name: str, what: str, r: dict) -> None:
    def cell(measure: str) -> str:
        return "  ".join(
            f"{r[measure][g]['median_pct']:.1f}/{r[measure][g]['p90_pct']:.1f}"
            for g in ("all", "M<=64", "65-512", ">512")
        )

    print(f"{name} ({what}); the fit's cost {r['fit_cost']}")
    for measure in ("in_sample", "kfold_nk", "leave_one_kernel_out"):
        print(f"  {measure:<22} {cell(measure)}   (median/p90 %: all, M<=64, 65-512, >512)")
    print(
        f"  top 3 {r['top3_pct_in_sample']} % in sample, {r['top3_pct_kfold']} % k-fold; seeds "
        f"{r['seed_error_pct']} %; the clock outside the span of Gluon's loops' clocks "
        f"{list(r['gluon_outside_span_pct'].values())} %"
    )
    held = r["held_back"]
    errors = "  ".join(
        f"{held['error'][g]['median_pct']:.1f}/{held['error'][g]['p90_pct']:.1f}"
        for g in ("all", "M<=64", "65-512", ">512")
    )
    rank = held["ranking"]
    print(
        f"  held back (new shapes) {errors}; best {rank['best']} %, within 5 % "
        f"{rank['within_5']} %, top 3 {rank['top3']} %"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--variant",
        action="append",
        choices=sorted(VARIANTS),
        help="only this variant (repeatable; default: all)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    t0 = time.process_time()
    pairs = build_pairs()
    report: dict[str, dict] = {}
    for name in args.variant or list(VARIANTS):
        variant = VARIANTS[name]
        report[name] = {"what": variant.what, **score(pairs, variant)}
        if not args.json:
            print_row(name, variant.what, report[name])
    if args.json:
        print(json.dumps(report, default=float))
    else:
        print(f"cost: {time.process_time() - t0:.0f} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
