"""Timing that survives MI355X noise: the measurement protocol, per-row statistics, and the
judgement of a throughput change against the noise.

**Protocol** (`f4pipe.host.benchprotocol.Protocol`, config `bench:`; every bench row records
it). Warm-up by count and by time (clocks and caches settle: at least `warmup` launches and
`warmup_ms` of them); then `repeats` x `launches` timed launches, each between its own event
pair, so the spread is measured, not averaged away. Cold mode rotates through enough distinct
copies of the operands that their total exceeds the L2s plus the Infinity Cache (`rotate_bytes`,
default 288 MiB > 32 MiB + 256 MiB), as aiter's tuner does; hot mode reuses one set and is named
as such. splitK's memset of D stays inside each timed launch, as in the seed driver.

**Statistics** (`summarize`): the median (robust to the outliers a throttling GPU produces),
the minimum, the quartiles and IQR, and a distribution-free 95 % confidence interval of the
median: the order statistics whose ranks the binomial(n, 1/2) distribution puts at 2.5 % and
97.5 % (no resampling, so a row's interval is exactly reproducible; with 100 samples, the 40th
and 61st smallest). Outliers are counted by Tukey's rule (outside 1.5 IQR of the
quartiles) and kept: they are part of what the device did, and the median already resists
them. aiter's tuner removes outliers and averages; asv reports the median and an interval the
same way as here.

**Judgement** (`judge`): a change between two rows is reported only when both hold:
1. their confidence intervals do not overlap, and
2. the medians differ by more than the threshold: by default the larger of `FLOOR_PCT` and
   `SPREAD_FACTOR` x the larger relative IQR of the two rows. The floor covers what one run's
   samples cannot see (the clock state of another day: aiter's own re-timings of one kernel
   differ by a median 1.8 %); the spread term keeps a noisy device from reporting its noise.
With 100 samples per row this reports no change in 1,000 pairs of identical rows whose launch
noise has a p90 of 20 %, and finds a true 10 % change in every pair at 2 % noise
(tests/test_benchstats.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Confidence of the median's interval.
CONFIDENCE = 0.95
#: Smallest change `judge` reports, in percent (run-to-run clock and cache states).
FLOOR_PCT = 3.0
#: Threshold per unit of relative IQR (the larger of the two rows').
SPREAD_FACTOR = 1.0


@dataclass(frozen=True)
class Summary:
    """One row's launch times (microseconds)."""

    n: int
    median: float
    minimum: float
    q1: float
    q3: float
    ci_low: float
    ci_high: float
    outliers: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def spread_pct(self) -> float:
        """IQR relative to the median, in percent."""
        return 100.0 * self.iqr / self.median if self.median > 0 else float("inf")


def median_interval(sorted_x: np.ndarray) -> tuple[float, float]:
    """The distribution-free CONFIDENCE interval of the median of sorted samples."""
    from scipy.stats import binom

    n = sorted_x.size
    if n < 6:  # too few for a 95 % interval inside the data: the range
        return float(sorted_x[0]), float(sorted_x[-1])
    # 1-based rank k of the lower bound: the largest with P(Binomial(n, 1/2) <= k-1) <= 2.5 %
    low = max(int(binom.ppf((1 - CONFIDENCE) / 2, n, 0.5)) - 1, 0)  # 0-based: k - 1
    return float(sorted_x[low]), float(sorted_x[n - 1 - low])


def summarize(samples) -> Summary:
    """Statistics of one row's per-launch times; ValueError on no or non-finite samples."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    if x.size == 0 or not np.isfinite(x).all():
        raise ValueError("launch times must be finite and at least one")
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    fence = 1.5 * (q3 - q1)
    outliers = int(((x < q1 - fence) | (x > q3 + fence)).sum())
    lo, hi = median_interval(np.sort(x))
    return Summary(
        n=int(x.size),
        median=float(med),
        minimum=float(x.min()),
        q1=float(q1),
        q3=float(q3),
        ci_low=float(lo),
        ci_high=float(hi),
        outliers=outliers,
    )


@dataclass(frozen=True)
class Judgement:
    """B against A: `change` is "slower", "faster" or "" (not told apart from noise)."""

    change: str
    pct: float  # (B / A - 1) x 100 of the medians (time: positive is slower)
    threshold_pct: float
    separated: bool  # the confidence intervals do not overlap

    def render(self) -> str:
        if not self.change:
            why = "intervals overlap" if not self.separated else "below the threshold"
            return f"{self.pct:+.1f} % (within noise: {why}; threshold {self.threshold_pct:.1f} %)"
        return f"{self.pct:+.1f} % {self.change.upper()} (threshold {self.threshold_pct:.1f} %)"


def threshold_pct(a: Summary, b: Summary, floor_pct: float = FLOOR_PCT) -> float:
    return max(floor_pct, SPREAD_FACTOR * max(a.spread_pct, b.spread_pct))


def judge(a: Summary, b: Summary, floor_pct: float = FLOOR_PCT) -> Judgement:
    """Whether B's time differs from A's beyond the noise (see the module docstring)."""
    pct = 100.0 * (b.median / a.median - 1.0)
    limit = threshold_pct(a, b, floor_pct)
    separated = b.ci_low > a.ci_high or b.ci_high < a.ci_low
    change = ""
    if separated and abs(pct) > limit:
        change = "slower" if pct > 0 else "faster"
    return Judgement(change, pct, limit, separated)
