"""The acceptance metric for real models: max error relative to the reference's magnitude, or cosine.

An output agrees with its reference when its largest absolute error is at most
1e-4 of the reference's largest magnitude, or when their cosine similarity is at least
0.99999. Both numbers are always reported, so a failure shows how far off it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_RELATIVE_ERROR = 1e-4
MIN_COSINE = 0.99999


@dataclass(frozen=True)
class Agreement:
    """How close an output is to its reference."""

    max_relative_error: float  # max |actual - expected| / max |expected|
    cosine: float

    @property
    def ok(self) -> bool:
        return self.max_relative_error <= MAX_RELATIVE_ERROR or self.cosine >= MIN_COSINE

    def __str__(self) -> str:
        return f"max relative error {self.max_relative_error:.3g}, cosine {self.cosine:.9f}"


def agreement(actual: np.ndarray, expected: np.ndarray) -> Agreement:
    """Compare in float64. Non-finite values must sit at the same places with the same values."""
    a = np.asarray(actual)
    e = np.asarray(expected)
    if a.shape != e.shape:
        raise AssertionError(f"shape {list(a.shape)} differs from the reference's {list(e.shape)}")
    if e.dtype.kind == "b" or a.dtype.kind == "b":
        a, e = a.astype(np.int8), e.astype(np.int8)
    a = a.astype(np.float64)
    e = e.astype(np.float64)
    finite = np.isfinite(e)
    same_specials = np.array_equal(a[~finite], e[~finite], equal_nan=True)
    if not same_specials or not np.isfinite(a[finite]).all():
        return Agreement(float("inf"), 0.0)
    a, e = a[finite], e[finite]
    scale = float(np.abs(e).max(initial=0.0))
    error = float(np.abs(a - e).max(initial=0.0))
    if error == 0.0:
        return Agreement(0.0, 1.0)
    relative = error / scale if scale > 0 else float("inf")
    norms = float(np.linalg.norm(a) * np.linalg.norm(e))
    cosine = float(np.dot(a.ravel(), e.ravel()) / norms) if norms > 0 else 0.0
    return Agreement(relative, cosine)


def assert_close_to_reference(
    actual: np.ndarray, expected: np.ndarray, what: str = "output"
) -> Agreement:
    """Fail unless ``actual`` meets the acceptance metric against ``expected``."""
    result = agreement(actual, expected)
    if not result.ok:
        raise AssertionError(
            f"{what}: {result} (needs max relative error <= {MAX_RELATIVE_ERROR:g} "
            f"or cosine >= {MIN_COSINE})"
        )
    return result
