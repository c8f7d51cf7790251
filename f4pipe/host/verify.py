"""The verification criteria (the seed driver's), defined once.

rtol = 2e-2; atol = 2e-4 * max|ref|, or 2e-2 * max|ref| when the launch splits K (gdz > 1),
because splitK reduces the K chunks with bf16 atomics and the error then scales with the
partial sums, not the final element (seed README, "splitK accumulates in bf16"). An element is
bad if |got - ref| > atol + rtol * |ref|; a run passes iff no element of the first M x N is bad.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from f4pipe.core.errors import InputError, ShapeError

RTOL = 2e-2
ATOL_FRACTION = 2e-4
ATOL_FRACTION_SPLITK = 2e-2


@dataclass(frozen=True)
class Verification:
    """How a kernel's output compares with the reference."""

    passed: bool
    bad: int  # elements outside atol + rtol*|ref|
    max_abs_err: float
    max_rel_err: float  # over elements with |ref| > atol
    err_frac: float  # max_abs_err / max|ref|
    max_abs_ref: float
    atol: float
    rtol: float


def atol_for(max_abs_ref: float, gdz: int) -> float:
    """The absolute tolerance for a launch with `gdz` K chunks."""
    return (ATOL_FRACTION_SPLITK if gdz > 1 else ATOL_FRACTION) * max_abs_ref


def _within(err: np.ndarray, abs_ref: np.ndarray, atol: float) -> np.ndarray:
    """The criterion itself: err <= atol + rtol * |ref|. NaN in got counts as bad: the
    comparison is False for NaN, so bad is "not within"."""
    limit = abs_ref * RTOL
    limit += atol
    return err <= limit


def bad_mask(got: np.ndarray, ref: np.ndarray, gdz: int) -> np.ndarray:
    """Boolean mask of the elements verify_output counts as bad (e.g. to name the first)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ShapeError(f"output shape {got.shape} differs from reference shape {ref.shape}")
    abs_ref = np.abs(ref)
    atol = atol_for(float(abs_ref.max()) if ref.size else 0.0, gdz)
    return ~_within(np.abs(got - ref), abs_ref, atol)


def verify_output(got: np.ndarray, ref: np.ndarray, gdz: int) -> Verification:
    """Compare `got` (the kernel's D, first M x N, as float64) with the reference.

    In as few passes over the arrays as the figures allow (the seed matrix's largest D has
    16.7 M elements): a NaN anywhere makes a maximum NaN, so one maximum finds a non-finite
    reference, and a NaN error counts as an infinite one in the maxima."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ShapeError(f"output shape {got.shape} differs from reference shape {ref.shape}")
    abs_ref = np.abs(ref)
    max_abs_ref = float(abs_ref.max()) if ref.size else 0.0
    if not math.isfinite(max_abs_ref):
        # a non-finite reference makes atol infinite and every element "pass": never a verdict
        raise InputError("the reference has non-finite values (alpha or operands out of range)")
    atol = atol_for(max_abs_ref, gdz)
    err = np.subtract(got, ref)
    np.abs(err, out=err)
    bad = err.size - int(np.count_nonzero(_within(err, abs_ref, atol)))
    max_abs_err = _max_or_inf(err)
    significant = abs_ref > atol
    max_rel_err = 0.0
    if significant.any():
        rel = np.divide(err, abs_ref, out=np.zeros_like(err), where=significant)
        max_rel_err = _max_or_inf(rel)
    return Verification(
        passed=bad == 0,
        bad=bad,
        max_abs_err=max_abs_err,
        max_rel_err=max_rel_err,
        err_frac=max_abs_err / max_abs_ref if max_abs_ref > 0 else 0.0,
        max_abs_ref=max_abs_ref,
        atol=atol,
        rtol=RTOL,
    )


def _max_or_inf(errors: np.ndarray) -> float:
    """The largest of non-negative errors (0 for none), a NaN among them counting as inf."""
    largest = float(errors.max()) if errors.size else 0.0
    return math.inf if math.isnan(largest) else largest
