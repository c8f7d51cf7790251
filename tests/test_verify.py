"""The verification criteria (f4pipe.host.verify), on hand-made outputs."""

from __future__ import annotations

import numpy as np
import pytest

from f4pipe.core.errors import InputError
from f4pipe.host.verify import RTOL, atol_for, verify_output


def test_criteria_boundaries():
    ref = np.array([[1000.0, 100.0, 0.0, -500.0]])
    atol = 2e-4 * 1000.0
    assert atol_for(1000.0, 1) == atol and atol_for(1000.0, 2) == 2e-2 * 1000.0
    inside = 0.99 * (atol + RTOL * 1000.0)
    ok = ref + np.array([[inside, 0.0, 0.99 * atol, 0.0]])
    v = verify_output(ok, ref, gdz=1)
    assert v.passed and v.bad == 0
    # max_rel_err only over |ref| > atol: the zero element (error 0.99*atol) does not count.
    assert v.max_rel_err == pytest.approx(inside / 1000.0, rel=1e-12)
    assert v.max_abs_err == pytest.approx(inside, rel=1e-12)
    assert v.err_frac == v.max_abs_err / 1000.0
    outside = ref + np.array([[1.01 * (atol + RTOL * 1000.0), 0.0, 0.0, 0.0]])
    assert verify_output(outside, ref, gdz=1).bad == 1
    bad = ref.copy()
    bad[0, 2] = atol * 1.5
    v = verify_output(bad, ref, gdz=1)
    assert not v.passed and v.bad == 1
    assert verify_output(bad, ref, gdz=4).passed  # splitK tolerance is 2 % of max|ref|


def test_nan_is_bad():
    ref = np.ones((2, 2))
    got = ref.copy()
    got[1, 1] = np.nan
    v = verify_output(got, ref, gdz=1)
    assert not v.passed and v.bad == 1 and v.max_abs_err == np.inf


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_reference_is_refused(bad_value: float):
    ref = np.ones((2, 3))
    ref[1, 2] = bad_value
    with pytest.raises(InputError, match="non-finite"):
        verify_output(np.ones((2, 3)), ref, gdz=1)


def test_nan_counts_in_the_relative_error_only_where_the_reference_is_significant():
    ref = np.array([[1000.0, 0.0, 10.0]])  # atol 0.2: the zero is not significant
    got = ref + np.array([[1.0, 0.0, 0.0]])
    got[0, 1] = np.nan
    v = verify_output(got, ref, gdz=1)
    assert v.bad == 1 and v.max_abs_err == np.inf
    assert v.max_rel_err == pytest.approx(1.0 / 1000.0, rel=1e-12)
    got[0, 2] = np.nan
    assert verify_output(got, ref, gdz=1).max_rel_err == np.inf


def test_an_empty_output_passes_with_no_error():
    v = verify_output(np.zeros((0, 4)), np.zeros((0, 4)), gdz=1)
    assert v.passed and (v.bad, v.max_abs_err, v.max_rel_err, v.max_abs_ref) == (0, 0.0, 0.0, 0.0)
