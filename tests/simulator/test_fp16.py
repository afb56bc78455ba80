"""round_to_fp16 against numpy's IEEE float16 conversion (the oracle), and the overflow policy.

Every test runs twice: with the C rounding loop (``_native``) and with the numpy fallback.
"""

from __future__ import annotations

import numpy as np
import pytest

from anekit import float16
from anekit.ir.dtypes import FP16_MAX
from anekit.simulator import fp16
from anekit.simulator.fp16 import is_fp16_exact, round_to_fp16, widen_fp16

C_LOOP = fp16._native


@pytest.fixture(autouse=True, params=["c", "numpy"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numpy":
        monkeypatch.setattr(fp16, "_native", None)
        monkeypatch.setattr(float16, "ACCELERATED", False)  # narrow_into's conversion
    return request.param


def test_the_c_loop_is_built_here() -> None:
    # setup.py builds it where a C compiler is found (it is optional for users); CI has one,
    # so both paths are tested, and the simulator benchmarks measure the C one
    assert fp16.ACCELERATED and C_LOOP is not None, "run: pip install -e . (needs a C compiler)"


def test_c_loop_counts_what_it_leaves_to_numpy() -> None:
    values = np.array([1.0, 65519.0, 65520.0, -7e4, np.inf, np.nan, 3.0], np.float32)
    before = values.copy()
    assert C_LOOP.round_in_place(values) == 4
    assert same_bits(values[2:6], before[2:6])  # left as they were
    np.testing.assert_array_equal(values[[0, 1, 6]], [1.0, 65504.0, 3.0])


@pytest.mark.parametrize(
    "bad", [np.zeros(3, np.float64), np.zeros(3, np.int32), np.zeros((3, 4), np.float32)[:, ::2]]
)
def test_c_loop_refuses_other_buffers(bad: np.ndarray) -> None:
    with pytest.raises((TypeError, ValueError, BufferError)):
        C_LOOP.round_in_place(bad)
    readonly = np.zeros(3, np.float32)
    readonly.flags.writeable = False
    with pytest.raises((TypeError, ValueError, BufferError)):
        C_LOOP.round_in_place(readonly)


def numpy_round(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, np.float32).astype(np.float16).astype(np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit, except that any NaN matches any NaN."""
    nan = np.isnan(b)
    return bool(np.array_equal(np.isnan(a), nan)) and bool(
        np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32))
    )


def test_random_bit_patterns_round_like_numpy() -> None:
    bits = np.random.default_rng(1).integers(0, 2**32, size=1_000_000, dtype=np.uint64)
    values = bits.astype(np.uint32).view(np.float32)
    assert same_bits(round_to_fp16(values), numpy_round(values))


def test_a_sweep_of_every_exponent_rounds_like_numpy() -> None:
    # every 4099th float32 bit pattern (a prime stride, so every exponent and every low-bit
    # pattern is hit): about a million values of each sign, NaNs and infinities included
    bits = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    assert same_bits(round_to_fp16(values), numpy_round(values))


def test_every_tie_and_its_neighbours_rounds_like_numpy() -> None:
    # midpoints between consecutive fp16 values (all of them, normal and subnormal, both
    # signs), and the float32 values just above and below each: the hardest cases
    fp16 = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mids = ((fp16[:-1] + fp16[1:]) / 2).astype(np.float32)
    for values in (mids, -mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, 0)):
        assert same_bits(round_to_fp16(values), numpy_round(values))


def test_overflow_gives_infinity_not_saturation() -> None:
    values = np.array([65504, 65519.996, 65520, 70000, 1e30, -65520, np.inf, -np.inf], np.float32)
    got = round_to_fp16(values)
    np.testing.assert_array_equal(got, [FP16_MAX, FP16_MAX, np.inf, np.inf, np.inf, -np.inf,
                                        np.inf, -np.inf])  # fmt: skip


def test_nan_zero_and_subnormals() -> None:
    values = np.array([np.nan, 0.0, -0.0, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 1e-30], np.float32)
    got = round_to_fp16(values)
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:], [0.0, 0.0, 2.0**-24, 0.0, 2.0**-24, 0.0])
    assert np.signbit(got[2]) and not np.signbit(got[1])


def test_in_place_rounds_the_array_itself_and_copy_leaves_it() -> None:
    values = np.array([0.1, 1 / 3, 1e5], np.float32)
    original = values.copy()
    out = round_to_fp16(values)
    np.testing.assert_array_equal(values, original)
    same = round_to_fp16(values, in_place=True)
    assert same is values
    np.testing.assert_array_equal(values, out)
    assert is_fp16_exact(out) and not is_fp16_exact(original)


@pytest.mark.parametrize("shape", [(), (0,), (3, 1, 5), (300_000,)])
def test_shapes_and_non_contiguous_input(shape: tuple[int, ...]) -> None:
    values = np.random.default_rng(2).standard_normal(shape).astype(np.float32) * 1e3
    got = round_to_fp16(values)
    assert got.shape == values.shape
    assert same_bits(got, numpy_round(values))
    if values.ndim == 3:
        strided = values[:, :, ::2]
        assert same_bits(round_to_fp16(strided), numpy_round(strided))


def test_widening_every_fp16_value_is_exact() -> None:
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = widen_fp16(every.reshape(256, 256)[:, ::-1])  # non-contiguous too
    assert got.dtype == np.float32 and got.shape == (256, 256)
    assert same_bits(got, every.reshape(256, 256)[:, ::-1].astype(np.float32))


def test_widening_and_narrowing_every_fp16_value_contiguous_is_exact() -> None:
    # the C conversions take contiguous arrays (surfaces): every fp16 bit pattern round trips
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    wide = widen_fp16(every)
    assert same_bits(wide, every.astype(np.float32))
    back = np.empty(every.shape, np.float16)
    fp16.narrow_into(wide, back)
    nan = np.isnan(every)
    assert np.array_equal(back.view(np.uint16)[~nan], every.view(np.uint16)[~nan])
    assert np.isnan(back[nan]).all()


def test_narrowing_random_bit_patterns_matches_numpys_cast_bit_for_bit() -> None:
    # NaN payloads included: a block holding a NaN takes the scalar conversion, numpy's rule
    bits = np.random.default_rng(3).integers(0, 2**32, size=1_000_003, dtype=np.uint64)
    values = bits.astype(np.uint32).view(np.float32)
    got = np.empty(values.shape, np.float16)
    fp16.narrow_into(values, got)
    with np.errstate(over="ignore", invalid="ignore"):
        want = values.astype(np.float16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.skipif(C_LOOP is None, reason="needs the C extension")
def test_c_conversions_refuse_mismatched_buffers() -> None:
    with pytest.raises(ValueError, match="holds 3 values"):
        C_LOOP.to_fp16(np.zeros(3, np.float32), np.zeros(4, np.float16))
    with pytest.raises(ValueError, match="2-byte items"):
        C_LOOP.to_fp16(np.zeros(3, np.float32), np.zeros(3, np.float32))
    readonly = np.zeros(3, np.float32)
    readonly.flags.writeable = False
    with pytest.raises((TypeError, ValueError, BufferError)):
        C_LOOP.from_fp16(np.zeros(3, np.float16), readonly)


@pytest.mark.parametrize(
    "view",
    [
        lambda a: a.T,  # a transpose
        lambda a: a.reshape(64, 48, 1).transpose(1, 2, 0).reshape(1, 48, 1, 64),  # engine layout
        lambda a: a[::-1, ::3],  # negative and non-unit strides
        lambda a: a.reshape(8, 8, 48).transpose(2, 0, 1),  # 3-D: slice by slice
        lambda a: a.reshape(4, 16, 48).transpose(0, 2, 1)[:, None],  # a batch of transposes
        lambda a: a.reshape(2, 96, 16).transpose(1, 2, 0),  # 3-D, too many slices: numpy
    ],
)
def test_contiguous_copies_strided_views_bit_for_bit(view) -> None:
    bits = np.random.default_rng(4).integers(0, 2**32, size=64 * 48, dtype=np.uint64)
    base = bits.astype(np.uint32).view(np.float32).reshape(64, 48)
    v = view(base)
    got = fp16.contiguous(v)
    assert got.flags.c_contiguous and got.shape == v.shape
    assert np.array_equal(got.view(np.uint32), np.ascontiguousarray(v).view(np.uint32))
    assert same_bits(round_to_fp16(v), numpy_round(v))


@pytest.mark.parametrize("rows,cols", [(61, 37), (16, 8), (17, 9), (7, 100), (512, 512)])
@pytest.mark.parametrize(
    "view",
    [lambda a: a.T, lambda a: a[::-1].T, lambda a: a[3:, 5:].T, lambda a: a[:, ::2].T],
)  # fmt: skip
def test_transposes_copy_every_edge_bit_for_bit(rows: int, cols: int, view) -> None:
    # the C gather transposes 16 x 8 blocks in registers and copies the edges in tiles
    bits = np.random.default_rng(rows * cols).integers(0, 2**32, size=rows * cols, dtype=np.uint64)
    v = view(bits.astype(np.uint32).view(np.float32).reshape(rows, cols))
    got = fp16.contiguous(v)
    assert got.flags.c_contiguous and got.shape == v.shape
    assert np.array_equal(got.view(np.uint32), np.ascontiguousarray(v).view(np.uint32))


@pytest.mark.parametrize("op,ufunc", list(enumerate([np.add, np.subtract, np.multiply, np.divide])))
@pytest.mark.parametrize("size", [1, 7, 8, 13, 4099])
def test_fused_arithmetic_rounds_like_the_ufunc_and_the_rounding_pass(
    op: int, ufunc, size: int, implementation: str
) -> None:
    rng = np.random.default_rng(size * 4 + op)
    x = round_to_fp16(rng.standard_normal(size).astype(np.float32) * 50)
    y = round_to_fp16(rng.standard_normal(size).astype(np.float32) * 50)
    x[: size // 3] = -0.0  # signed zeros and tiny results (fp16 subnormals)
    if ufunc is np.divide:  # finite quotients below 65520 (the rest is the next test's)
        y = np.where(np.abs(y) < 1, np.float32(1), y)
        x[size // 2 :] = round_to_fp16(x[size // 2 :] * np.float32(1e-6))
    else:
        y[size // 2 :] = round_to_fp16(y[size // 2 :] * np.float32(1e-6))
    for a, b in ((x, y), (x, y[:1].copy()), (x[:1].copy(), y)):
        shape = np.broadcast_shapes(a.shape, b.shape)
        got = fp16.binary_rounded(op, a, b, shape)
        if implementation == "numpy":
            assert got is None  # no C extension: the caller takes numpy's path
            continue
        with np.errstate(all="ignore"):
            want = round_to_fp16(ufunc(a, b))
        assert got is not None and same_bits(got, want) and got.shape == want.shape


@pytest.mark.parametrize("x,y", [(60000.0, 6000.0), (1.0, 0.0), (np.nan, 1.0), (np.inf, 1.0)])
def test_fused_arithmetic_leaves_overflow_and_nan_to_numpy(x: float, y: float) -> None:
    a = np.full(40, x, np.float32)
    b = np.full(40, y, np.float32)
    with np.errstate(all="ignore"):
        assert fp16.binary_rounded(0 if x == 60000.0 else 3, a, b, (40,)) is None


def test_fused_arithmetic_takes_only_contiguous_float32_of_the_result_shape() -> None:
    a = np.ones((8, 8), np.float32)
    assert fp16.binary_rounded(0, a.T[:, ::2], a[:, :4], (8, 4)) is None  # strided
    assert fp16.binary_rounded(0, a, a[:1], (8, 8)) is None  # a broadcast row
    assert fp16.binary_rounded(0, a.astype(np.int32), a, (8, 8)) is None
