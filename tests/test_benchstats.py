"""The bench statistics and compare's judgement (f4pipe.host.benchstats) on synthetic launch times
with known noise and known shifts."""

from __future__ import annotations

import numpy as np
import pytest

from f4pipe.host.benchprotocol import Protocol
from f4pipe.host.benchstats import judge, summarize

SAMPLES = Protocol().samples  # 5 x 20 launches per row


def noisy(rng: np.random.Generator, median_us: float, p90_pct: float, n: int = SAMPLES):
    """Launch times whose relative deviation from `median_us` has a p90 of `p90_pct`
    (lognormal: |exp(s Z) - 1| <= p90 for 90 % of launches, Z standard normal)."""
    s = np.log1p(p90_pct / 100) / 1.6449  # P(|Z| < 1.6449) = 0.90
    return median_us * np.exp(s * rng.standard_normal(n))


def test_summary_statistics_of_a_known_series():
    x = np.array([10.0, 11.0, 12.0, 13.0, 100.0])
    s = summarize(x)
    assert (s.n, s.median, s.minimum, s.q1, s.q3) == (5, 12.0, 10.0, 11.0, 13.0)
    assert s.outliers == 1  # 100 is beyond q3 + 1.5 IQR = 16
    assert s.ci_low <= s.median <= s.ci_high
    assert (s.ci_low, s.ci_high) == (10.0, 100.0)  # 5 samples: the interval is their range


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_no_statistics_of_nothing_or_non_finite_times(bad):
    with pytest.raises(ValueError):
        summarize(bad)


def test_no_false_change_in_1000_identical_pairs_at_20_percent_p90_noise():
    rng = np.random.default_rng(1)
    changed = 0
    for _ in range(1000):
        a = summarize(noisy(rng, 100.0, 20.0))
        b = summarize(noisy(rng, 100.0, 20.0))
        changed += bool(judge(a, b).change)
    assert changed == 0


def test_a_true_10_percent_regression_is_found_at_2_percent_noise():
    rng = np.random.default_rng(2)
    found = 0
    for _ in range(1000):
        a = summarize(noisy(rng, 100.0, 2.0))
        b = summarize(noisy(rng, 110.0, 2.0))
        j = judge(a, b)
        found += j.change == "slower"
    assert found >= 950


def test_a_change_below_the_floor_is_not_reported_even_when_intervals_separate():
    rng = np.random.default_rng(3)
    a = summarize(noisy(rng, 100.0, 0.1))
    b = summarize(noisy(rng, 102.0, 0.1))
    j = judge(a, b)
    assert j.separated and j.change == "" and "below the threshold" in j.render()
    assert judge(a, b, floor_pct=1.0).change == "slower"


def test_a_faster_b_is_reported_as_faster():
    rng = np.random.default_rng(4)
    j = judge(summarize(noisy(rng, 100.0, 2.0)), summarize(noisy(rng, 80.0, 2.0)))
    assert j.change == "faster" and j.pct < -15


def test_the_median_interval_of_100_samples_is_their_40th_and_61st():
    x = np.arange(1.0, 101.0)
    s = summarize(x[::-1])
    assert (s.ci_low, s.ci_high) == (40.0, 61.0)


def test_the_protocol_says_how_a_row_was_timed():
    text = Protocol().describe()
    assert "5x20 launches, one event pair each" in text and "cold" in text
    assert "hot" in Protocol(cold=False).describe()
    with pytest.raises(ValueError):
        Protocol(repeats=0)


def test_clock_columns_mark_a_row_whose_clock_fell_during_it():
    from f4pipe.devices.devinfo import ClockSample, clock_fields

    before = ClockSample(2100.0, 1900.0, 900.0, 70.0, 1400.0)
    drooped = ClockSample(1700.0, 1900.0, 1380.0, 88.0, 1400.0)
    steady = ClockSample(2050.0, 1900.0, 1000.0, 75.0, 1400.0)
    fields = clock_fields(before, drooped, "")
    assert fields["throttled"] is True  # -19 %
    assert (fields["power_before_w"], fields["power_after_w"]) == (900.0, 1380.0)
    assert (fields["temp_before_c"], fields["temp_after_c"]) == (70.0, 88.0)
    assert clock_fields(before, steady, "")["throttled"] is False  # -2.4 %
    none = clock_fields(None, None, "amdsmi is not installed")
    assert none["sclk_before_mhz"] is None and none["throttled"] is None
    assert none["clocks_note"] == "amdsmi is not installed"


def test_without_amdsmi_the_sampler_says_why():
    import importlib.util

    from f4pipe.devices.devinfo import ClockSampler

    sampler = ClockSampler(0)
    if importlib.util.find_spec("amdsmi") is None:
        assert sampler.sample() is None and "amdsmi is not installed" in sampler.note
    assert "shim" in ClockSampler(None).note


def test_the_device_fingerprint_tells_gpus_apart():
    from f4pipe.devices.devinfo import fingerprint, version_text

    a = fingerprint("AMD Instinct MI355X", "gfx950:sramecc+:xnack-", "0000:0c:00")
    assert a == fingerprint("AMD Instinct MI355X", "gfx950:sramecc+:xnack-", "0000:0c:00")
    assert a != fingerprint("AMD Instinct MI355X", "gfx950:sramecc+:xnack-", "0000:1c:00")
    assert version_text(60_443_483) == "6.4.43483"  # HIP's packed major.minor.patch
