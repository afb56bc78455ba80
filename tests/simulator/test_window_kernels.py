"""The C window kernels (sim/window_kernels.py, ``_native``) against the numpy code they
replace, bit for bit (the direct convolution against the C GEMM of numpy's im2col
matrix): the im2col gather and col2im scatter of picking convolutions over
strides, dilations, paddings, groups and spatial ranks 1 to 3, and clip/relu's clamp, on
values full of signed zeros, subnormals, infinities and NaNs with payloads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from anekit.simulator import fp16, gemm, pieces, window_kernels
from anekit.simulator.ops import activation, conv, elementwise, pooling

# NaN, infinities and overflow are part of the drawn values: numpy's warnings about them
# are expected (the simulator's run loop silences them the same way)
pytestmark = [
    pytest.mark.skipif(window_kernels._native is None, reason="no C module"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]


def settings(**kwargs):  # noqa: ANN201 - every property runs with and without the split
    return hypothesis_settings(suppress_health_check=[HealthCheck.function_scoped_fixture],
                               **kwargs)  # fmt: skip


@pytest.fixture(autouse=True, params=["one call", "two halves"])
def _split(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test runs with one C call, and with every kernel split into two halves on two
    threads (whatever this machine's CPU count)."""
    if request.param == "two halves":
        monkeypatch.setattr(gemm, "THREADS", 2)
        monkeypatch.setattr(window_kernels, "SPLIT_MIN", 0)
        monkeypatch.setattr(pieces, "spare_cpu", lambda threads: True)  # whatever the load
    else:
        monkeypatch.setattr(gemm, "THREADS", 1)

NASTY = np.array(
    [0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 6e-8, 65504.0, -65504.0, 1.0, -1.0],
    np.float32,
)
NANS = np.array([0x7FC00000, 0xFFC00001, 0x7FC12345, 0x7F800001], np.uint32).view(np.float32)


def _values(shape: tuple[int, ...], seed: int, special: bool) -> np.ndarray:
    """Random fp32 bit patterns mixed with zeros of both signs; ``special`` keeps the
    infinities and NaNs the patterns hold (and adds some), otherwise they become 1."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = x * np.float32(1)  # a fresh writeable float32 array
    flat = x.reshape(-1)
    picks = rng.random(flat.size)
    flat[picks < 0.2] = 0.0
    flat[(picks >= 0.2) & (picks < 0.4)] = -0.0
    some = (picks >= 0.4) & (picks < 0.5)
    flat[some] = rng.choice(NASTY, size=int(np.sum(some)))
    if special:
        flat[: len(NANS)] = NANS[: flat.size]
    else:
        flat[~np.isfinite(flat)] = 1.0
    return x


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(
        np.ascontiguousarray(a).view(np.uint32), np.ascontiguousarray(b).view(np.uint32)
    )


def _same_sums(a: np.ndarray, b: np.ndarray) -> bool:
    """The same bits, except that where both are NaN the payloads may differ: which NaN a
    sum of two NaNs keeps, numpy leaves to its loops (the first operand's in its vector
    body, the second's in some tails), the C loop keeps the accumulator's."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    same = a.view(np.uint32) == b.view(np.uint32)
    return a.shape == b.shape and bool(np.all(same | (np.isnan(a) & np.isnan(b))))


def _window_picks(channels: int, kernel: tuple[int, ...]) -> np.ndarray:
    """[channels * K, 1, *kernel]: output c * K + t picks window position t of channel c."""
    taps = math.prod(kernel)
    w = np.zeros((channels * taps, 1, *kernel), np.float32)
    for c in range(channels):
        for t, index in enumerate(np.ndindex(*kernel)):
            w[(c * taps + t, 0, *index)] = 1.0
    return w


def _numpy(monkeypatch: pytest.MonkeyPatch, fn, **kwargs) -> np.ndarray:  # noqa: ANN001
    with monkeypatch.context() as m:
        m.setattr(window_kernels, "_native", None)
        return fn(**kwargs)


geometry = st.integers(1, 3).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.tuples(*[st.integers(1, 3)] * n),  # kernel
        st.tuples(*[st.integers(1, 3)] * n),  # strides
        st.tuples(*[st.integers(1, 2)] * n),  # dilations
        st.tuples(*[st.integers(0, 2)] * (2 * n)),  # pads
        st.tuples(*[st.integers(4, 20)] * n),  # sizes: rows of up to 16 values and longer
    )
)


@settings(max_examples=60, deadline=None)
@given(geometry, st.integers(1, 3), st.booleans(), st.booleans(), st.integers(0, 10**6))
def test_window_gather_gives_numpys_bits(geo, groups, special, strided, seed) -> None:
    n, kernel, strides, dilations, pads, sizes = geo
    pad_sum = [pads[2 * i] + pads[2 * i + 1] for i in range(n)]
    fits = zip(sizes, pad_sum, kernel, dilations, strict=True)
    if any(s + p < (k - 1) * d + 1 for s, p, k, d in fits):
        return  # the window does not fit: both raise (checked elsewhere)
    x = _values((2, groups * 2, *sizes), seed, special)
    if strided:  # a transposed layout: batch innermost
        x = np.ascontiguousarray(np.moveaxis(x, 0, -1))
        x = np.moveaxis(x, -1, 0)
    kwargs = {"x": x, "weight": _window_picks(groups * 2, kernel), "groups": np.int32(groups * 2),
              "strides": np.array(strides, np.int32), "dilations": np.array(dilations, np.int32),
              "pad_type": "custom", "pad": np.array(pads, np.int32)}  # fmt: skip
    fast = conv.conv(**kwargs)
    slow = _numpy(pytest.MonkeyPatch(), conv.conv, **kwargs)
    assert _same_bits(fast, slow)


def _im2col_product(x: np.ndarray, weight: np.ndarray, groups: int, bias: np.ndarray,
                    strides, dilations, pads) -> np.ndarray:  # noqa: ANN001
    """The reference of the direct kernel: numpy's im2col matrix (0 + each window value),
    multiplied by the C GEMM group by group, plus the bias."""
    n = x.ndim - 2
    padded = np.pad(x, ((0, 0), (0, 0), *[(pads[2 * i], pads[2 * i + 1]) for i in range(n)]))
    view = conv.windows(padded, weight.shape[2:], strides, dilations)  # [N, C, *O, *K]
    sizes = view.shape[2 : 2 + n]
    order = (0, 1, *range(2 + n, 2 + 2 * n), *range(2, 2 + n))
    cols = (np.float32(0) + view.transpose(order)).reshape(len(x), groups, -1, math.prod(sizes))
    w = weight.reshape(groups, weight.shape[0] // groups, -1)
    out = np.empty((len(x), *w.shape[:2], cols.shape[-1]), np.float32)
    for b, j in np.ndindex(len(x), groups):
        a, c = np.ascontiguousarray(w[j]), np.ascontiguousarray(cols[b, j])
        window_kernels._native.gemm(a, c, out[b, j], a.shape[0], a.shape[1], c.shape[1], 1)
    return out.reshape(len(x), -1, *sizes) + bias.reshape(-1, *(1,) * n)


@settings(max_examples=80, deadline=None)
@given(geometry, st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.booleans(),
       st.booleans(), st.integers(0, 10**6))  # fmt: skip
def test_conv_with_real_weights_sums_as_the_gemm_of_the_im2col_matrix(
    geo, groups, per_group, outputs, special, strided, seed
) -> None:
    """A 1-D or 2-D convolution with real weights runs the direct C kernel (no im2col
    matrix): every output has the bits of the C GEMM's product of numpy's im2col matrix,
    signed zeros included (a channel of -0 inputs times weights of both signs still sums
    to +0), NaN payloads aside; depthwise ones (one input and one output per group) load
    their taps without a panel, to the same bits. 3-D convolutions, and every machine
    without the kernel, multiply the windows the C gather laid out with numpy's product
    (1x1 convolutions multiply the input itself): numpy's own bits."""
    n, kernel, strides, dilations, pads, sizes = geo
    pad_sum = [pads[2 * i] + pads[2 * i + 1] for i in range(n)]
    fits = zip(sizes, pad_sum, kernel, dilations, strict=True)
    if any(s + p < (k - 1) * d + 1 for s, p, k, d in fits):
        return
    channels = groups * per_group
    x = _values((2, channels, *sizes), seed, special)
    x[:, 0] = -0.0  # every product of this channel is a signed zero
    if strided:
        x = np.ascontiguousarray(np.moveaxis(x, 0, -1))
        x = np.moveaxis(x, -1, 0)
    rng = np.random.default_rng(seed + 1)
    weight = rng.standard_normal((groups * outputs, per_group, *kernel)).astype(np.float32)
    weight[rng.random(weight.shape) < 0.2] = -0.0
    if special:
        weight.reshape(-1)[: min(2, weight.size)] = [np.inf, np.nan][: min(2, weight.size)]  # padding taps add w * 0
    bias = rng.standard_normal(groups * outputs).astype(np.float32)
    kwargs = {"x": x, "weight": weight, "groups": np.int32(groups), "bias": bias,
              "strides": np.array(strides, np.int32), "dilations": np.array(dilations, np.int32),
              "pad_type": "custom", "pad": np.array(pads, np.int32)}  # fmt: skip
    fast = conv.conv(**kwargs)
    pointwise = groups == 1 and all(k == 1 for k in kernel) and all(s == 1 for s in strides)
    if window_kernels.direct_available() and n < 3 and not pointwise:
        assert _same_sums(fast, _im2col_product(x, weight, groups, bias, strides, dilations, pads))
    else:  # NaN weights meet NaN inputs: numpy's loops keep either payload
        assert _same_sums(fast, _numpy(pytest.MonkeyPatch(), conv.conv, **kwargs))


@settings(max_examples=60, deadline=None)
@given(geometry, st.integers(1, 2), st.booleans(),
       st.sampled_from(["contiguous", "channels last", "batch inside channels"]),
       st.integers(0, 10**6))  # fmt: skip
def test_col2im_scatter_gives_numpys_bits(geo, groups, special, layout, seed) -> None:
    n, kernel, strides, dilations, _, sizes = geo
    channels = groups * 2
    w = _window_picks(channels, kernel)  # [C * K, 1, *K] read as [C_in, C_out / g, *K]
    x = _values((3, channels * math.prod(kernel), *sizes), seed, special)
    if layout == "channels last":
        x = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)
    elif layout == "batch inside channels":  # what a step's weight-gradient product leaves
        x = np.swapaxes(np.ascontiguousarray(np.swapaxes(x, 0, 1)), 0, 1)
    kwargs = {"x": x, "weight": w.reshape(channels * math.prod(kernel), 1, *kernel),
              "groups": np.int32(channels), "strides": np.array(strides, np.int32),
              "dilations": np.array(dilations, np.int32)}  # fmt: skip
    fast = conv.conv_transpose(**kwargs)
    slow = _numpy(pytest.MonkeyPatch(), conv.conv_transpose, **kwargs)
    assert _same_sums(fast, slow)
    if not special:
        assert _same_bits(fast, slow)


@settings(max_examples=40, deadline=None)
@given(geometry, st.booleans(), st.integers(0, 10**6))
def test_tap_scatter_of_any_products_gives_the_accumulation_loops_bits(geo, strided, seed) -> None:
    # the GEMM path's products (NaNs with payloads, infinities) through the C scatter
    n, kernel, strides, dilations, _, sizes = geo
    cols = _values((2, 1, 3, *kernel, *sizes), seed, True)
    if strided:  # reversed rows: the C loop's plain (not AVX-512) rows
        cols = cols[:, :, ::-1, ..., ::-1]
    full = [(d - 1) * s + (k - 1) * dl + 1
            for d, s, k, dl in zip(sizes, strides, kernel, dilations, strict=True)]  # fmt: skip
    want = conv._accumulate_taps(cols, strides, dilations, full)
    done = window_kernels.scatter(cols, strides, dilations, full)
    assert done is not None
    got, finite = done
    assert _same_sums(got, want)
    assert finite == bool(np.all(np.isfinite(cols)))


@settings(max_examples=60, deadline=None)
@given(geometry, st.booleans(), st.integers(0, 10**6))
def test_max_pool_gives_numpys_bits(geo, strided, seed) -> None:
    _, kernel, strides, _, pads, sizes = geo
    x = _values((2, 3, *sizes), seed, True)
    if strided:  # batch innermost
        x = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 0, -1)), -1, 0)
    kwargs = {"x": x, "kernel_sizes": np.array(kernel, np.int32), "pad_type": "custom",
              "strides": np.array(strides, np.int32), "pad": np.array(pads, np.int32)}  # fmt: skip
    fast = pooling.max_pool(**kwargs)
    slow = _numpy(pytest.MonkeyPatch(), pooling.max_pool, **kwargs)
    assert _same_bits(fast, slow)


def test_max_pool_keeps_numpys_signed_zero_and_nan_choices() -> None:
    # maximum(-0, +0) is +0, maximum(+0, -0) is -0; the first of two NaNs wins
    x = np.zeros((1, 1, 1, 6), np.float32)
    x[0, 0, 0, :] = [-0.0, 0.0, 0.0, -0.0, 0.0, 0.0]
    x.view(np.uint32)[0, 0, 0, 4:] = [0x7FC00001, 0x7FC00002]
    out = window_kernels.window_max(x, (1, 2), (1, 2))
    assert out is not None
    assert out.view(np.uint32).tolist() == [[[[0x00000000, 0x80000000, 0x7FC00001]]]]


def test_gather_reports_non_finite_reads_only() -> None:
    x = np.ones((1, 1, 6), np.float32)
    assert window_kernels.gather(x, (2,), (2,), (1,), (0,), (3,)) is not None
    x[0, 0, 3] = np.nan  # read by the second window
    assert window_kernels.gather(x, (2,), (2,), (1,), (0,), (3,)) is None
    x = np.ones((1, 1, 7), np.float32)
    x[0, 0, 6] = np.inf  # past the last window: never read, the copy is the GEMM's sum
    out = window_kernels.gather(x, (2,), (2,), (1,), (0,), (3,))
    assert out is not None and np.all(out == 1)


def test_gather_pads_with_positive_zero_and_adds_zero_to_negative_zero() -> None:
    x = np.full((1, 1, 3, 3), -0.0, np.float32)
    out = window_kernels.gather(x, (3, 3), (1, 1), (1, 1), (1, 1), (3, 3))
    assert out is not None and out.shape == (1, 1, 3, 3, 3, 3)
    assert np.all(out == 0) and not np.any(np.signbit(out))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.sampled_from([(0.0, 1.0), (-0.0, 0.0), (-65504.0, 65504.0),
                                             (-np.inf, 0.5), (0.0, np.inf), (-0.0, -0.0)]),
       st.integers(0, 10**6))  # fmt: skip
def test_clamp_gives_numpys_maximum_and_minimum_bits(size, bounds, seed) -> None:
    x = _values((size,), seed, True)
    lo, hi = (np.array(v, np.float32) for v in bounds)
    want = np.minimum(np.maximum(x, lo), hi)
    assert _same_bits(elementwise._clip(x, lo, hi), want)
    assert _same_bits(window_kernels.clamp(x, float(lo), float(hi)), want)
    assert _same_bits(activation.relu(x), np.maximum(x, np.float32(0)))


def test_clamp_leaves_nan_bounds_and_strided_inputs_to_numpy() -> None:
    x = np.arange(8, dtype=np.float32)
    assert window_kernels.clamp(x, math.nan, 1.0) is None
    assert window_kernels.clamp(x[::2], 0.0, 1.0) is None
    assert window_kernels.clamp(x.astype(np.float64), 0.0, 1.0) is None


def test_bad_shapes_raise_value_errors() -> None:
    native = window_kernels._native
    x = np.zeros((2, 1, 1, 4, 4), np.float32)
    with pytest.raises(ValueError, match="does not fit"):
        native.window_gather(x, np.empty((3, 1, 1, 2, 2, 1, 3, 3), np.float32),
                             (1, 2, 2), (1, 1, 1), (1, 1, 1), (0, 0, 0))  # fmt: skip
    with pytest.raises(ValueError, match="float32"):
        native.window_gather(x.astype(np.float64), np.empty((2, 1, 1, 2, 2, 1, 3, 3), np.float32),
                             (1, 2, 2), (1, 1, 1), (1, 1, 1), (0, 0, 0))  # fmt: skip
    cols = np.zeros((2, 1, 1, 2, 2, 1, 3, 3), np.float32)
    with pytest.raises(ValueError, match="does not fit"):
        native.taps_scatter(cols, np.empty((2, 1, 1, 3, 3), np.float32), (1, 1, 1), (1, 1, 1))
    with pytest.raises(ValueError, match="at least"):
        native.taps_scatter(cols, np.empty((2, 1, 1, 4, 4), np.float32), (1, 0, 1), (1, 1, 1))


@pytest.mark.parametrize("perm", [(1, 0, 2), (2, 1, 0), (0, 2, 1)])
def test_reshape_of_a_transposed_layout_copies_the_values(perm) -> None:
    from anekit.simulator.ops import shape

    x = _values((6, 5, 7), 9, True).transpose(perm)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(window_kernels, "SPLIT_MIN", 0)
        got = shape.reshape(x, np.array([-1, 7 if perm[2] == 2 else x.shape[2]], np.int32))
    want = np.ascontiguousarray(x).reshape(got.shape)
    assert got.flags.c_contiguous and _same_bits(got, want)
    view = shape.reshape(x, np.array(x.shape[:2] + (x.shape[2], 1), np.int32))
    assert np.shares_memory(view, x)  # no copy where a view does


@pytest.mark.parametrize("stride,pad", [(1, 0), (2, 1), (3, 2)])
def test_conv_along_h_of_width_one_sums_as_the_gemm_of_the_im2col_matrix(
    stride: int, pad: int
) -> None:
    """A 1-D convolution written along H of a [N, C, H, 1] input (the direct kernel reads it
    along W, the same memory) and tiles with fewer than 16 outputs (a narrow block): the
    C GEMM's bits on the im2col matrix."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    rng = np.random.default_rng(stride)
    for shape, weight_shape in [((2, 7, 100, 1), (9, 7, 3, 1)), ((1, 3, 1, 11), (20, 3, 1, 4))]:
        x = rng.standard_normal(shape).astype(np.float32)
        weight = rng.standard_normal(weight_shape).astype(np.float32)
        bias = np.zeros(weight_shape[0], np.float32)
        pads = (pad, pad, 0, 0) if shape[3] == 1 else (0, 0, pad, pad)
        strides = (stride, 1) if shape[3] == 1 else (1, stride)
        got = conv.conv(x, weight, bias, np.array(strides, np.int32), "custom",
                        np.array(pads, np.int32))  # fmt: skip
        want = _im2col_product(x, weight, 1, bias, strides, (1, 1), pads)
        assert _same_bits(got, want)


@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("dilation", [1, 2])
def test_wide_depthwise_conv_sums_as_the_gemm_of_the_im2col_matrix(
    stride: int, dilation: int
) -> None:
    """Depthwise convolutions over rows of several 64-wide tiles (strides 1 and 2 load their
    taps from the input rows, 3 takes the panel): the C GEMM's bits on the im2col matrix."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    rng = np.random.default_rng(stride * 10 + dilation)
    x = rng.standard_normal((2, 3, 7, 203)).astype(np.float32)
    weight = rng.standard_normal((3, 1, 3, 5)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    pads = (1, 2, 3, 1)
    got = conv.conv(x, weight, bias, np.array([stride, stride], np.int32), "custom",
                    np.array(pads, np.int32), np.array([dilation, dilation], np.int32),
                    np.int32(3))  # fmt: skip
    want = _im2col_product(x, weight, 3, bias, (stride, stride), (dilation, dilation), pads)
    assert _same_bits(got, want)


def test_a_kernel_wider_than_64_taps_sums_as_the_gemm_of_the_im2col_matrix() -> None:
    """Taps past the 64 whose input ranges the direct kernel works out once per tile (a
    1-D filter bank over audio, an STFT as a convolution)."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 2, 1, 300)).astype(np.float32)
    weight = rng.standard_normal((5, 2, 1, 90)).astype(np.float32)
    bias = np.zeros(5, np.float32)
    pads = (0, 0, 40, 40)
    got = conv.conv(x, weight, bias, np.array([1, 3], np.int32), "custom",
                    np.array(pads, np.int32))  # fmt: skip
    want = _im2col_product(x, weight, 1, bias, (1, 3), (1, 1), pads)
    assert _same_bits(got, want)


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 8, 9])
@pytest.mark.parametrize("c_out", [1, 17, 129])
def test_narrow_rows_sum_as_the_gemm_of_the_im2col_matrix(width: int, c_out: int) -> None:
    """Output rows a few values wide (silero-vad's encoder: 129 channels over 4 positions)
    run conv_rows transposed, vectors along the output channels (masked past c_out, four
    positions at a time, K past the GEMM's 256-value blocks): the C GEMM's bits on the
    im2col matrix, signed zeros and infinities among the inputs."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    rng = np.random.default_rng(width * 1000 + c_out)
    x = rng.standard_normal((2, 100, 3, width + 2)).astype(np.float32)
    x.reshape(-1)[::29], x.reshape(-1)[11::301] = -0.0, np.inf
    weight = rng.standard_normal((c_out, 100, 2, 3)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    pads = (1, 0, 1, 1)
    direct = window_kernels.DirectConv(weight.reshape(c_out, -1), 1, (2, 3), (1, 1), (1, 1),
                                       (1, 1), x.shape, (3, width + 2))  # fmt: skip
    assert direct.narrow == (width + 2 <= window_kernels.NARROW)
    got = conv.conv(x, weight, bias, np.array([1, 1], np.int32), "custom",
                    np.array(pads, np.int32))  # fmt: skip
    want = _im2col_product(x, weight, 1, bias, (1, 1), (1, 1), pads)
    assert _same_sums(got, want)


@pytest.mark.parametrize("out_width", [1, 2, 3])
@pytest.mark.parametrize("c_out", [16, 100, 128, 129, 300])
def test_narrow_blocks_of_few_positions_sum_as_the_gemm_of_the_im2col_matrix(
    out_width: int, c_out: int
) -> None:
    """The transposed kernel's blocks of one to three positions (stride 2, padding at both
    ends of a row and above it: taps read in place, gathered and zero), up to eight
    channel vectors with a partial last one: the C GEMM's bits on the im2col matrix, signed
    zeros and infinities among the inputs and weights."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    rng = np.random.default_rng(out_width * 1000 + c_out)
    x = rng.standard_normal((2, 40, 2, 2 * out_width)).astype(np.float32)
    x.reshape(-1)[::23], x.reshape(-1)[5::97] = -0.0, np.inf
    weight = rng.standard_normal((c_out, 40, 2, 3)).astype(np.float32)
    weight.reshape(-1)[::31] = -0.0
    bias = rng.standard_normal(c_out).astype(np.float32)
    pads = (1, 0, 1, 1)
    direct = window_kernels.DirectConv(weight.reshape(c_out, -1), 1, (2, 3), (1, 2), (1, 1),
                                       (1, 1), x.shape, (2, out_width))  # fmt: skip
    assert direct.narrow
    got = conv.conv(x, weight, bias, np.array([1, 2], np.int32), "custom",
                    np.array(pads, np.int32))  # fmt: skip
    want = _im2col_product(x, weight, 1, bias, (1, 2), (1, 1), pads)
    assert got.shape == (2, c_out, 2, out_width)
    assert _same_sums(got, want)


@pytest.mark.parametrize("stride,dilation", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_depthwise_conv_of_many_rows_sums_as_the_gemm_of_the_im2col_matrix(
    stride: int, dilation: int
) -> None:
    """The depthwise kernel takes several output rows at once (each input row multiplied
    into every output row whose window holds it): heights that leave a last group of one
    to three rows, rows above and below the input (padding taps add w * 0, so an infinite
    weight makes them NaN), a tap row wider than 64 taps (its lanes worked out per row), all
    to the C GEMM's bits on the im2col matrix."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    rng = np.random.default_rng(stride * 10 + dilation)
    for height, kernel, pads in [(13, (5, 5), (2, 2, 2, 2)), (6, (3, 3), (3, 0, 1, 1)),
                                 (9, (2, 70), (1, 1, 35, 30))]:  # fmt: skip
        x = _values((2, 4, height, 150), int(rng.integers(1 << 30)), special=True)
        weight = rng.standard_normal((4, 1, *kernel)).astype(np.float32)
        weight[1, 0, 0, 0] = np.inf  # channel 1's padding taps give NaN
        bias = rng.standard_normal(4).astype(np.float32)
        got = conv.conv(x, weight, bias, np.array([stride, stride], np.int32), "custom",
                        np.array(pads, np.int32), np.array([dilation, dilation], np.int32),
                        np.int32(4))  # fmt: skip
        want = _im2col_product(x, weight, 4, bias, (stride, stride), (dilation, dilation), pads)
        assert _same_sums(got, want)


@pytest.mark.parametrize("dilation", [1, 2])
def test_dense_conv_reading_its_input_rows_in_place_sums_as_the_gemm(dilation: int) -> None:
    """With column stride 1 the direct kernel reads the taps of a tile that lie inside the
    input from the input's rows themselves (only tiles at the padded ends are gathered):
    wide rows of several tiles, rows above and below the input, signed zeros, infinities
    and NaNs, to the C GEMM's bits on the im2col matrix."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    rng = np.random.default_rng(dilation)
    x = _values((2, 5, 6, 203), 11 + dilation, special=True)
    x[:, 0] = -0.0
    weight = rng.standard_normal((13, 5, 3, 3)).astype(np.float32)
    weight[2, 1, 0, 0] = -np.inf
    bias = rng.standard_normal(13).astype(np.float32)
    pads = (1, 2, 2, 1)
    got = conv.conv(x, weight, bias, np.array([1, 1], np.int32), "custom",
                    np.array(pads, np.int32), np.array([dilation, dilation], np.int32))  # fmt: skip
    want = _im2col_product(x, weight, 1, bias, (1, 1), (dilation, dilation), pads)
    assert _same_sums(got, want)


@pytest.mark.parametrize("width,pads", [(203, (1, 1, 1, 1)), (608, (0, 1, 0, 1)), (35, (1, 0, 2, 0))])
def test_a_stride_two_stem_conv_sums_as_the_gemm(width: int, pads: tuple[int, ...]) -> None:
    """A dense conv of column stride 2 (a CNN's stem: 3 channels, 3x3) gathers its panel
    rows from the even inputs 16 at a time: full vectors, a partial tail, padding at either
    end, the last row of x read to its end, signed zeros, infinities and NaNs, to the C
    GEMM's bits on the im2col matrix."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    rng = np.random.default_rng(width)
    x = _values((2, 3, 7, width), width, special=True)
    weight = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    bias = np.zeros(16, np.float32)
    got = conv.conv(x, weight, bias, np.array([2, 2], np.int32), "custom",
                    np.array(pads, np.int32))  # fmt: skip
    want = _im2col_product(x, weight, 1, bias, (2, 2), (1, 1), pads)
    assert _same_sums(got, want)


def test_a_conv_of_one_output_row_splits_its_output_channels() -> None:
    """A 1-D convolution over one sequence has one output row: in pieces it is split by
    output channel (50 of them: a last piece of two), each piece the same sums."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 16, 300, 1)).astype(np.float32)
    weight = rng.standard_normal((50, 16, 5, 1)).astype(np.float32)
    bias = rng.standard_normal(50).astype(np.float32)
    got = conv.conv(x, weight, bias, np.array([1, 1], np.int32), "custom",
                    np.array([2, 2, 0, 0], np.int32))  # fmt: skip
    want = _im2col_product(x, weight, 1, bias, (1, 1), (1, 1), (2, 2, 0, 0))
    assert _same_bits(got, want)


def test_a_depthwise_convs_work_counts_only_the_kernel_rows_inside_x() -> None:
    """The work that decides a split in pieces counts the taps the depthwise kernel runs:
    a 5x5 over two rows, padded by two, reads x with 2 of its 5 rows at each output row;
    a dense conv (no rows skipped) counts every tap."""
    w = np.ones((8, 25), np.float32)
    shape, geometry = (3, 8, 2, 96), ((5, 5), (1, 1), (1, 1), (2, 2))
    depthwise = window_kernels.DirectConv(w, 8, *geometry, shape, (2, 96))
    dense = window_kernels.DirectConv(np.ones((8, 200), np.float32), 1, *geometry, shape,
                                      (2, 96))  # fmt: skip
    assert depthwise.work == 3 * 8 * 2 * 96 * 25 // 16 * 2 // 5
    assert dense.work == 3 * 8 * 2 * 96 * 200 // 16
    tall = window_kernels.DirectConv(w, 8, *geometry, (3, 8, 40, 96), (40, 96))
    assert tall.work == 3 * 8 * 40 * 96 * 25 // 16 * (40 * 5 - 6) // (40 * 5)


@pytest.mark.parametrize("groups,c,co,width,transposed", [
    (1, 6, 20, 70, False), (2, 6, 20, 70, False), (6, 6, 6, 70, False), (1, 6, 20, 5, True),
])  # fmt: skip
def test_conv_rows_rounds_the_outputs_of_its_call_as_round_to_fp16(
    groups, c, co, width, transposed
) -> None:
    """With round, the outputs a call computes (its rows and channels only) come back as
    round_to_fp16 would round them: past fp16's range, NaN and all."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    native = window_kernels._native
    rng = np.random.default_rng(co + width)
    x = rng.standard_normal((2, c, 5, width)).astype(np.float32)
    x[0, 0, 2, 3], x[1, :, 1] = np.nan, 3e4
    w = rng.standard_normal((co, c // groups * 9)).astype(np.float32)
    w = np.ascontiguousarray(w.T) if transposed else w
    geometry = (groups, (3, 3), (1, 1), (1, 1), (1, 1))
    plain = np.empty((2, co, 5, width), np.float32)
    native.conv_rows(x, w, plain, *geometry, 0, 10, 0, co, transposed)
    want = fp16.round_to_fp16(plain)
    assert np.isnan(want).any() and np.isinf(want).any()
    assert not _same_bits(want, plain)
    rounded = np.full_like(plain, 5.0)
    native.conv_rows(x, w, rounded, *geometry, 3, 7, 0, co, transposed, True)
    rows = rounded.transpose(0, 2, 1, 3).reshape(10, co, width)  # [N * OH, C_out, OW]
    wanted = want.transpose(0, 2, 1, 3).reshape(10, co, width)
    assert _same_bits(rows[3:7], wanted[3:7])
    assert np.all(rows[:3] == 5.0) and np.all(rows[7:] == 5.0)
    if not transposed:
        part = np.full_like(plain, 5.0)
        native.conv_rows(x, w, part, *geometry, 0, 10, 2, co - 2, False, True)
        assert _same_bits(part[:, 2 : co - 2], want[:, 2 : co - 2])
        assert np.all(part[:, :2] == 5.0) and np.all(part[:, co - 2 :] == 5.0)


def test_conv_rows_computes_the_channels_it_is_given() -> None:
    """Output channel ranges of one call cover exactly those channels (dense, grouped and
    depthwise), and together the whole call's bits; a range outside C_out is refused."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    native = window_kernels._native
    rng = np.random.default_rng(4)
    for groups, c, co in [(1, 6, 20), (2, 6, 20), (6, 6, 6)]:
        x = rng.standard_normal((2, c, 5, 70)).astype(np.float32)
        w = rng.standard_normal((co, c // groups * 9)).astype(np.float32)
        geometry = (groups, (3, 3), (1, 1), (1, 1), (1, 1))
        whole = np.empty((2, co, 5, 70), np.float32)
        native.conv_rows(x, w, whole, *geometry, 0, 10)
        parts = np.full((2, co, 5, 70), np.nan, np.float32)
        native.conv_rows(x, w, parts, *geometry, 0, 10, 0, 5)
        assert np.all(np.isnan(parts[:, 5:])) and _same_bits(parts[:, :5], whole[:, :5])
        native.conv_rows(x, w, parts, *geometry, 0, 10, 5, co)
        assert _same_bits(parts, whole)
    with pytest.raises(ValueError, match="do not fit"):
        native.conv_rows(x, w, whole, *geometry, 0, 10, 3, co + 1)


def test_narrow_rows_in_pieces_of_output_channels_sum_as_the_gemm_of_the_im2col_matrix() -> None:
    """One narrow output row with enough work for two threads: pieces of output channels
    (not 64-aligned), each the same FMA chains; and the transposed form takes one group."""
    if not window_kernels.direct_available():
        pytest.skip("no direct convolution kernel here")
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 600, 1, 6)).astype(np.float32)
    weight = rng.standard_normal((300, 600, 1, 3)).astype(np.float32)
    bias = rng.standard_normal(300).astype(np.float32)
    pads = (0, 0, 0, 0)
    direct = window_kernels.DirectConv(weight.reshape(300, -1), 1, (1, 3), (1, 1), (1, 1),
                                       (0, 0), x.shape, (1, 4))  # fmt: skip
    assert direct.narrow and direct.work >= window_kernels.SPLIT_MIN and direct.rows == 1
    for split in (False, True):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(window_kernels.pieces, "spare_cpu", lambda threads, s=split: s)
            got = conv.conv(x, weight, bias, np.array([1, 1], np.int32), "custom",
                            np.array(pads, np.int32))  # fmt: skip
        assert _same_bits(got, _im2col_product(x, weight, 1, bias, (1, 1), (1, 1), pads))
    out = np.empty((1, 4, 1, 4), np.float32)
    wt = np.zeros((2 * 3, 4), np.float32)
    with pytest.raises(ValueError, match="do not fit"):
        window_kernels._native.conv_rows(np.zeros((1, 4, 1, 6), np.float32), wt, out, 2, (1, 3),
                                         (1, 1), (1, 1), (0, 0), 0, 1, 0, 4, True)  # fmt: skip
