"""Reductions, normalizations and pooling against onnxruntime, coremltools and torch.

Same tolerances as the linear tests: inputs are fp16 numbers; fp32 programs agree with the
oracle to a relative 1e-5 of the output's magnitude; fp16 programs return the fp32 result
rounded once (half an fp16 ulp, plus 1e-5 of the magnitude for fp32 evaluation order).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.ir.ort_oracle import run_ort
from tests.simulator.milops import coreml, run_mil
from tests.simulator.test_ops_linear import assert_fp16_rounded, assert_fp32_close, check

RNG = np.random.default_rng(13)


def fp16_values(shape: tuple[int, ...], low: float = -3, high: float = 3) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(np.float16).astype(np.float32)


# --- reductions ---------------------------------------------------------------------------------

REDUCE_ORT = {
    "reduce_sum": "ReduceSum",
    "reduce_mean": "ReduceMean",
    "reduce_max": "ReduceMax",
    "reduce_min": "ReduceMin",
    "reduce_prod": "ReduceProd",
    "reduce_l1_norm": "ReduceL1",
    "reduce_l2_norm": "ReduceL2",
    "reduce_log_sum": "ReduceLogSum",
    "reduce_log_sum_exp": "ReduceLogSumExp",
    "reduce_sum_square": "ReduceSumSquare",
}


@pytest.mark.parametrize("op", sorted(REDUCE_ORT))
@pytest.mark.parametrize("axes, keep", [((1,), True), ((0, 2), False), (None, False)])
def test_reductions_against_onnxruntime(op: str, axes, keep: bool) -> None:
    low = 0.5 if op in ("reduce_log_sum", "reduce_prod") else -3
    x = fp16_values((3, 4, 5), low, 1.5 if op == "reduce_prod" else 3)
    onnx_inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
    (ref,) = run_ort(REDUCE_ORT[op], onnx_inputs, keepdims=int(keep))
    consts = {"keep_dims": keep, **({"axes": np.array(axes, np.int32)} if axes else {})}
    check(op, {"x": x}, consts, ref)


def _numpy_mean(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    """np.mean's float32 mean: the pairwise sum, divided by an intp count (in float64)."""
    count = int(np.prod([x.shape[a] for a in axes]))
    total = np.add.reduce(x, axis=axes, dtype=np.float32, keepdims=keep)
    return np.asarray(np.true_divide(total, np.intp(count), casting="unsafe", dtype=np.float64)
                      .astype(np.float32))  # fmt: skip


@pytest.mark.parametrize(
    "shape, axes",
    [((3, 200, 2, 96), (2, 3)), ((600, 5), (1,)), ((7, 1), (1,)), ((2, 5, 1, 1), (2, 3)),
     ((4, 8), (1,)), ((3, 128), (1,)), ((3, 129), (1,)), ((2, 3, 4, 5), (1, 2, 3)),
     ((1, 3, 160, 121), (3, 2)), ((5000,), (0,)), ((2, 3), (0, 1))],
)  # fmt: skip
def test_a_mean_over_trailing_axes_in_c_gives_numpys_bits(shape, axes, monkeypatch) -> None:
    """reduce_mean over the last axes of a C-contiguous float32 value (a global average
    pool) is summed in C (_native.mean_rows) in numpy's pairwise order: numpy's bits, with
    signed zeros, NaN, infinities and values that cancel; and the same without the C."""
    from anekit.simulator import fp16
    from anekit.simulator.ops import reduction

    if fp16._converter("mean_rows") is None:
        pytest.skip("the C extension is not built")
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 3e4], shape)).astype(np.float32)
    flat = x.reshape(-1)
    flat[::7] = -0.0
    if flat.size > 40:
        flat[[3, 11, 19]] = [np.nan, np.inf, -np.inf]
    for keep in (True, False):
        want = _numpy_mean(x, axes, keep)
        nan = np.isnan(want)
        direct = np.empty(want.shape, np.float32)
        fp16._native.mean_rows(x, direct)  # the C sums on their own
        got = reduction._mean(x, axes, keep)
        assert got.shape == want.shape and got.dtype == np.float32
        for value in (direct, got):
            np.testing.assert_array_equal(np.isnan(value), nan)
            np.testing.assert_array_equal(value.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
        monkeypatch.setattr(fp16, "_native", None)
        unbuilt = reduction._mean(x, axes, keep)
        monkeypatch.undo()
        np.testing.assert_array_equal(unbuilt.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    x = np.full((4, 8), -0.0, np.float32)  # all -0: numpy's reduction starts from +0
    out = np.empty((4, 1), np.float32)
    fp16._native.mean_rows(x, out)
    assert not np.signbit(out).any()
    with pytest.raises(ValueError, match="nonempty rows"):
        fp16._native.mean_rows(np.zeros((4, 3), np.float32), np.empty(5, np.float32))


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_l2_norm"])
def test_int32_reductions_against_coremltools(op: str) -> None:
    x = RNG.integers(-9, 10, (3, 4)).astype(np.int32)
    if op == "reduce_l2_norm":
        x = np.abs(x)
    ref = coreml(op, x=x, axes=[1])
    (got,) = run_mil(op, {"x": x}, {"axes": np.array([1], np.int32)}, ref.astype(np.int32))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("op, onnx_op", [("reduce_argmax", "ArgMax"), ("reduce_argmin", "ArgMin")])
@pytest.mark.parametrize("keep", [False, True])
def test_arg_reductions_against_onnxruntime(op: str, onnx_op: str, keep: bool) -> None:
    x = RNG.integers(-3, 3, (4, 6)).astype(np.float32)  # ties: the first index wins
    (ref,) = run_ort(onnx_op, [x], axis=1, keepdims=int(keep))
    (got,) = run_mil(op, {"x": x}, {"axis": 1, "keep_dims": keep}, ref.astype(np.int32))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref)
    (got16,) = run_mil(op, {"x": x}, {"axis": -1, "keep_dims": keep, "output_dtype": "uint16"},
                       ref.astype(np.uint16), dtype="fp16")  # fmt: skip
    assert got16.dtype == np.uint16
    np.testing.assert_array_equal(got16, ref)


# --- normalization ----------------------------------------------------------------------------


@pytest.mark.parametrize("axes", [(-1,), (1,), (1, 2, 3)])
def test_layer_norm_against_onnxruntime(axes) -> None:
    x = fp16_values((2, 8, 3, 16))
    shape = [x.shape[a] for a in sorted(a % 4 for a in axes)]
    gamma, beta = fp16_values(tuple(shape), 0.5, 2), fp16_values(tuple(shape))
    if list(sorted(a % 4 for a in axes)) == list(range(4 - len(axes), 4)):
        (ref,) = run_ort("LayerNormalization", [x, gamma, beta], axis=-len(axes), epsilon=1e-5)
    else:  # not the trailing axes: move them to the end for onnxruntime
        moved = np.moveaxis(x, 1, -1)
        (out,) = run_ort("LayerNormalization", [moved, gamma, beta], axis=-1, epsilon=1e-5)
        ref = np.moveaxis(out, -1, 1)
    consts = {"axes": np.array(axes, np.int32), "gamma": gamma, "beta": beta, "epsilon": 1e-5}
    check("layer_norm", {"x": x}, consts, np.ascontiguousarray(ref))


def test_layer_norm_defaults_against_onnxruntime() -> None:
    # the defaults: every axis, no gamma or beta, epsilon 1e-5 (coremltools' own builder
    # cannot materialise its range() default, so onnxruntime is the oracle here)
    x = fp16_values((3, 5))
    (ref,) = run_ort("LayerNormalization", [x, np.ones((3, 5), np.float32)], axis=0)
    check("layer_norm", {"x": x}, {}, ref)


def test_batch_norm_against_onnxruntime() -> None:
    x = fp16_values((2, 4, 5, 3))
    mean, var = fp16_values((4,)), fp16_values((4,), 0.5, 2)
    gamma, beta = fp16_values((4,)), fp16_values((4,))
    (ref,) = run_ort("BatchNormalization", [x, gamma, beta, mean, var], epsilon=1e-3)
    consts = {"mean": mean, "variance": var, "gamma": gamma, "beta": beta, "epsilon": 1e-3}
    check("batch_norm", {"x": x}, consts, ref)


def test_instance_norm_against_onnxruntime() -> None:
    x = fp16_values((2, 3, 6, 5))
    gamma, beta = fp16_values((3,)), fp16_values((3,))
    (ref,) = run_ort("InstanceNormalization", [x, gamma, beta], epsilon=1e-5)
    check("instance_norm", {"x": x}, {"gamma": gamma, "beta": beta}, ref)


def test_l2_norm_against_coremltools() -> None:
    x = fp16_values((2, 3, 4, 5))
    ref = coreml("l2_norm", x=x, epsilon=1e-6)
    check("l2_norm", {"x": x}, {"epsilon": 1e-6}, ref.astype(np.float32))


def lrn_formula(x: np.ndarray, size: int, alpha: float, beta: float, k: float) -> np.ndarray:
    """ONNX's LRN in float64: the window is [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    x64 = x.astype(np.float64)
    out = np.empty_like(x64)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1], c + (size - 1) - (size - 1) // 2 + 1)
        total = (x64[:, lo:hi] ** 2).sum(axis=1)
        out[:, c] = x64[:, c] / (k + alpha / size * total) ** beta
    return out


@pytest.mark.parametrize("size", [2, 4])
def test_local_response_norm_even_sizes_against_formula(size: int) -> None:
    x = fp16_values((1, 7, 3, 4))
    ref = lrn_formula(x, size, 1e-2, 0.75, 2.0).astype(np.float32)
    consts = {"size": size, "alpha": 1e-2, "beta": 0.75, "k": 2.0}
    (got32,) = run_mil("local_response_norm", {"x": x}, consts, ref)
    assert_fp32_close(got32, ref)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_local_response_norm_against_onnxruntime(size: int) -> None:
    x = fp16_values((1, 7, 3, 4))
    (ref,) = run_ort("LRN", [x], size=size, alpha=1e-2, beta=0.75, bias=2.0)
    consts = {"size": size, "alpha": 1e-2, "beta": 0.75, "k": 2.0}
    (got32,) = run_mil("local_response_norm", {"x": x}, consts, ref)
    assert_fp32_close(got32, ref)
    # consts rounded to fp16 change the result a little; compare with fp16-rounded params
    (ref16,) = run_ort("LRN", [x], size=size, alpha=float(np.float16(1e-2)), beta=0.75, bias=2.0)
    (got16,) = run_mil("local_response_norm", {"x": x}, consts, ref, dtype="fp16")
    assert_fp16_rounded(got16, ref16)


# --- pooling ------------------------------------------------------------------------------------

POOL_CASES = [
    # x shape, kernel, strides, pad_type, pad
    ((1, 3, 8, 9), (2, 2), (2, 2), "valid", None),
    ((2, 2, 7, 7), (3, 3), (2, 2), "custom", (1, 1, 0, 2)),
    ((1, 2, 7, 10), (3, 2), (2, 3), "same", None),
    ((1, 2, 7, 10), (3, 2), (2, 3), "same_lower", None),
    ((1, 3, 12), (4,), (3,), "custom", (2, 1)),
    ((1, 2, 5, 6, 7), (2, 3, 2), (1, 2, 2), "valid", None),
]


def _onnx_pool_attrs(kernel, strides, pad_type, pad) -> dict:
    attrs: dict = {"kernel_shape": list(kernel), "strides": list(strides)}
    if pad_type == "custom":
        attrs["pads"] = list(pad[0::2]) + list(pad[1::2])
    elif pad_type != "valid":
        attrs["auto_pad"] = "SAME_UPPER" if pad_type == "same" else "SAME_LOWER"
    return attrs


def _pool_consts(kernel, strides, pad_type, pad) -> dict:
    return {
        "kernel_sizes": np.array(kernel, np.int32),
        "strides": np.array(strides, np.int32),
        "pad_type": pad_type,
        **({"pad": np.array(pad, np.int32)} if pad is not None else {}),
    }


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[0]}-{c[3]}")
def test_max_pool_against_onnxruntime(case) -> None:
    xs, kernel, strides, pad_type, pad = case
    x = fp16_values(xs)
    (ref,) = run_ort("MaxPool", [x], **_onnx_pool_attrs(kernel, strides, pad_type, pad))
    (got,) = run_mil("max_pool", {"x": x}, _pool_consts(kernel, strides, pad_type, pad), ref,
                     dtype="fp16")  # fmt: skip
    np.testing.assert_array_equal(got, ref.astype(np.float16))


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[0]}-{c[3]}")
@pytest.mark.parametrize("exclude", [False, True])
def test_avg_pool_against_onnxruntime(case, exclude: bool) -> None:
    xs, kernel, strides, pad_type, pad = case
    x = fp16_values(xs)
    attrs = _onnx_pool_attrs(kernel, strides, pad_type, pad)
    (ref,) = run_ort("AveragePool", [x], count_include_pad=int(not exclude), **attrs)
    consts = {
        **_pool_consts(kernel, strides, pad_type, pad),
        "exclude_padding_from_average": exclude,
    }
    check("avg_pool", {"x": x}, consts, ref)


def test_l2_pool_against_onnxruntime() -> None:
    x = fp16_values((1, 3, 6, 7))
    (ref,) = run_ort("LpPool", [x], kernel_shape=[2, 3], strides=[2, 2], p=2, pads=[1, 0, 1, 0])
    consts = _pool_consts((2, 3), (2, 2), "custom", (1, 1, 0, 0))
    check("l2_pool", {"x": x}, consts, ref)


@pytest.mark.parametrize("size, kernel, stride, pad", [(7, 2, 2, 0), (8, 3, 2, 1), (9, 3, 3, 1)])
@pytest.mark.parametrize("op", ["avg_pool", "max_pool"])
def test_ceil_mode_against_torch(size: int, kernel: int, stride: int, pad: int, op: str) -> None:
    torch = pytest.importorskip("torch")
    x = fp16_values((1, 2, size, size))
    fn = torch.nn.functional.avg_pool2d if op == "avg_pool" else torch.nn.functional.max_pool2d
    ref = fn(torch.from_numpy(x), kernel, stride, pad, ceil_mode=True).numpy()
    consts = {
        **_pool_consts((kernel, kernel), (stride, stride), "custom", (pad,) * 4),
        "ceil_mode": True,
    }
    check(op, {"x": x}, consts, ref)


def test_max_pool_propagates_nan_and_keeps_infinities() -> None:
    # one elementwise maximum per kernel position: a NaN anywhere in a window still wins,
    # as in a reduction over the window, and -inf/+inf come through unchanged
    from anekit.simulator.ops.pooling import max_pool

    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 2:, 2:] = -np.inf
    x[0, 1, 0, 0] = np.inf
    got = max_pool(x, np.array([2, 2]), "custom", np.array([2, 2]), np.zeros(4, np.int32))
    want = x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5))
    assert np.isnan(got[0, 0, 0, 0]) and np.isnan(want[0, 0, 0, 0])
    np.testing.assert_array_equal(got, want)
    assert got[0, 1, 1, 1] == -np.inf and got[0, 1, 0, 0] == np.inf
