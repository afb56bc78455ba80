"""``anekit.float16.to_float16`` gives numpy's float16 cast bit for bit, through the C
extension and through its numpy fallback, and the compiler's weight conversion uses it."""

from __future__ import annotations

import numpy as np
import pytest

from anekit import float16
from anekit.codegen.builder import cast_array
from anekit.ir.dtypes import FP16_MAX


@pytest.fixture(params=["c", "numpy"])
def path(request, monkeypatch):
    if request.param == "numpy":
        monkeypatch.setattr(float16, "ACCELERATED", False)
    return request.param


def _numpy_cast(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, dtype=np.float32).astype(np.float16)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit, except that any NaN matches any NaN."""
    nan = np.isnan(b)
    return bool(np.array_equal(np.isnan(a), nan)) and bool(
        np.array_equal(a[~nan].view(np.uint16), b[~nan].view(np.uint16))
    )


def test_the_c_conversion_is_built_here() -> None:
    # make test builds the extension; a silent numpy fallback would hide a broken build
    assert float16.ACCELERATED


def test_random_bit_patterns_convert_like_numpy(path: str) -> None:
    bits = np.random.default_rng(0).integers(0, 2**32, 1_000_003, dtype=np.uint32)
    values = bits.view(np.float32)  # NaNs, infinities, subnormals and both signs included
    got = float16.to_float16(values)
    assert got.dtype == np.float16 and got.shape == values.shape
    assert _same_bits(got, _numpy_cast(values))


def test_every_tie_and_its_neighbours_converts_like_numpy(path: str) -> None:
    # each fp16 value's midpoint to the next, one float32 ulp either side, over all exponents
    # (normal, subnormal, and the overflow boundary at 65520)
    halves = np.arange(0, 0x7C00, dtype=np.uint32).astype(np.uint16).view(np.float16)
    low = halves.astype(np.float32)
    with np.errstate(over="ignore"):
        high = np.nextafter(halves, np.float16(np.inf)).astype(np.float32)
    high[np.isinf(high)] = 65536.0  # past 65504 the next step would be 2**16: the tie is 65520
    mid = (low + (high - low) / 2).astype(np.float32)
    near = np.concatenate([mid, np.nextafter(mid, 0), np.nextafter(mid, np.inf)])
    values = np.concatenate([near, -near])
    assert 65520.0 in values and np.isfinite(values).all()
    assert _same_bits(float16.to_float16(values), _numpy_cast(values))


def test_shapes_and_non_contiguous_input(path: str) -> None:
    values = np.random.default_rng(1).standard_normal((7, 5, 3)).astype(np.float64)
    view = values.transpose(2, 0, 1)[:, ::2]
    got = float16.to_float16(view)
    assert got.shape == view.shape and got.flags.c_contiguous
    # float64 goes through float32 first, as cast_array always converted
    assert _same_bits(got, _numpy_cast(view.astype(np.float32)))
    assert float16.to_float16(np.zeros((0, 4), np.float32)).shape == (0, 4)
    assert float16.to_float16(np.float32(1.5)).shape == ()


def test_compiler_weights_saturate_and_round_like_numpy(path: str) -> None:
    values = np.array([1e5, -7e4, 65519.0, 65520.0, np.inf, -np.inf, np.nan, 1e-8, 0.1],
                      np.float32)  # fmt: skip
    got = cast_array(values, "fp16")
    assert got.dtype == np.float16
    # finite values beyond fp16's range saturate (Orion section 7); the rest round as numpy
    clipped = np.where(np.isfinite(values), np.clip(values, -FP16_MAX, FP16_MAX), values)
    assert _same_bits(got, _numpy_cast(clipped))
    assert got[0] == FP16_MAX and got[1] == -FP16_MAX and got[3] == FP16_MAX
    assert np.isposinf(got[4]) and np.isneginf(got[5]) and np.isnan(got[6])
