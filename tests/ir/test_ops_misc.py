"""Indexing, ordering and scan kernels against onnxruntime beyond the ONNX node cases:
batch_dims, reductions on repeated indices, ties, integer dtypes, both sequence layouts."""

from __future__ import annotations

import numpy as np
import pytest

from anekit.ir.registry import InferError, KernelError, infer_types
from tests.ir.ort_oracle import run_ir, run_ort, types

pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(9)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8, np.int8])
@pytest.mark.parametrize("largest", [0, 1])
def test_topk_with_ties_matches_onnxruntime(dtype, largest) -> None:
    x = RNG.integers(0, 4, (3, 4, 7)).astype(dtype)  # many ties
    k = np.asarray([4], dtype=np.int64)
    if dtype in (np.uint8, np.int8):  # onnxruntime's TopK lacks 8-bit kernels: check by sorting
        values, idx = run_ir("topk", [x], k=4, axis=-1, largest=bool(largest))
        order = np.argsort(-x.astype(np.int64) if largest else x, axis=-1, kind="stable")[..., :4]
        np.testing.assert_array_equal(idx, order)
        np.testing.assert_array_equal(values, np.take_along_axis(x, order, -1))
        return
    refs = run_ort("TopK", [x, k], 2, axis=1, largest=largest)
    outs = run_ir("topk", [x], k=4, axis=1, largest=bool(largest))
    for out, ref in zip(outs, refs, strict=True):
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_matches_onnxruntime(dtype, exclusive, reverse) -> None:
    x = RNG.integers(-50, 50, (3, 5, 4)).astype(dtype)
    axis = np.asarray(1, dtype=np.int64)
    (ref,) = run_ort("CumSum", [x, axis], exclusive=exclusive, reverse=reverse)
    (y,) = run_ir("cumsum", [x], axis=1, exclusive=bool(exclusive), reverse=bool(reverse))
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, ref)


def test_cumprod_of_integers_wraps_in_their_own_dtype() -> None:
    x = np.full((1, 40), 3, dtype=np.int32)
    (y,) = run_ir("cumprod", [x], axis=1)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.cumprod(x, axis=1, dtype=np.int32))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_matches_onnxruntime(axis) -> None:
    idx = np.asarray([[0, -1, 4], [7, -6, 2]], dtype=np.float32)  # floats, negatives, out of range
    values = np.asarray([-2, 5], dtype=np.int64)
    (ref,) = run_ort("OneHot", [idx, np.asarray(5, np.int64), values], axis=axis)
    (y,) = run_ir("one_hot", [idx, values], depth=5, axis=axis)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("batch_dims", [0, 1, 2])
def test_gather_nd_matches_onnxruntime(batch_dims) -> None:
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    depth = 2 if batch_dims < 2 else 1
    bshape = x.shape[:batch_dims]
    hi = np.asarray(x.shape[batch_dims : batch_dims + depth])
    idx = RNG.integers(-hi, hi, bshape + (3, depth)).astype(np.int64)
    (ref,) = run_ort("GatherND", [x, idx], batch_dims=batch_dims)
    (y,) = run_ir("gather_nd", [x, idx], batch_dims=batch_dims)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 2, -2])
def test_scatter_elements_matches_onnxruntime(reduction, axis) -> None:
    x = RNG.standard_normal((4, 5, 6)).astype(np.float32)
    shape = (3, 4, 5)
    dim = x.shape[axis]
    if reduction == "none":  # distinct targets per slice: repeated ones are undefined
        idx = np.argsort(RNG.random(shape[: axis % 3] + (dim,) + shape[axis % 3 + 1 :]), axis=axis)
        idx = np.take(idx, np.arange(shape[axis]), axis=axis)
    else:
        idx = RNG.integers(-dim, dim, shape)
    upd = RNG.standard_normal(shape).astype(np.float32)
    (ref,) = run_ort("ScatterElements", [x, idx, upd], axis=axis, reduction=reduction)
    (y,) = run_ir("scatter_elements", [x, idx, upd], axis=axis, reduction=reduction)
    np.testing.assert_allclose(y, ref, rtol=1e-6)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_matches_onnxruntime(reduction) -> None:
    x = RNG.integers(-9, 9, (4, 3, 5)).astype(np.int64)
    n = 3 if reduction == "none" else 6
    flat = RNG.permutation(12)[:n] if reduction == "none" else RNG.integers(0, 12, n)
    idx = np.stack([flat // 3, flat % 3], axis=-1).reshape(n, 2) - np.asarray([4, 0])
    upd = RNG.integers(-9, 9, (n, 5)).astype(np.int64)
    (ref,) = run_ort("ScatterND", [x, idx, upd], reduction=reduction)
    (y,) = run_ir("scatter_nd", [x, idx, upd], reduction=reduction)
    np.testing.assert_array_equal(y, ref)


def test_out_of_range_indices_are_errors() -> None:
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(KernelError, match="out of range"):
        run_ir("gather_nd", [x, np.asarray([[2, 0]], np.int64)])
    with pytest.raises(KernelError, match="out of range"):
        run_ir("scatter_nd", [x, np.asarray([[0, 3]], np.int64), np.ones(1, np.float32)])


def test_hardmax_takes_the_first_maximum() -> None:
    x = np.asarray([[1, 3, 3, 0], [2, 2, 2, 2]], dtype=np.float32)
    (ref,) = run_ort("Hardmax", [x], axis=1)
    (y,) = run_ir("hardmax", [x], axis=1)
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(y, [[0, 1, 0, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_shrink_matches_onnxruntime(dtype) -> None:
    x = np.arange(-5, 6).astype(dtype)
    (ref,) = run_ort("Shrink", [x], lambd=1.5, bias=2.0)
    (y,) = run_ir("shrink", [x], lambd=1.5, bias=2.0)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize(("batch_axis", "time_axis"), [(1, 0), (0, 1)])
def test_reverse_sequence_matches_onnxruntime(batch_axis, time_axis) -> None:
    shape = (5, 3, 2) if time_axis == 0 else (3, 5, 2)
    x = RNG.standard_normal(shape).astype(np.float32)
    lens = np.asarray([5, 1, 3], dtype=np.int64)
    (ref,) = run_ort("ReverseSequence", [x, lens], batch_axis=batch_axis, time_axis=time_axis)
    (y,) = run_ir("reverse_sequence", [x, lens], batch_axis=batch_axis, time_axis=time_axis)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize(
    ("op", "shapes", "dtypes", "attrs", "message"),
    [
        ("topk", [(3, 4)], ["fp32"], {"k": 5, "axis": 1}, "outside \\[0, 4\\]"),
        ("gather_nd", [(2, 3), (2, 3)], ["fp32", "int64"], {}, "address 3 axes"),
        ("gather_nd", [(2, 3), (3, 1)], ["fp32", "int64"], {"batch_dims": 1}, "first 1 dims"),
        ("gather_nd", [(2, 3), (2, 1)], ["fp32", "fp32"], {}, "int32 or int64"),
        (
            "scatter_nd",
            [(4, 4), (2, 1), (2, 3)],
            ["fp32", "int64", "fp32"],
            {},
            "expected \\[2, 4\\]",
        ),
        ("scatter_elements", [(4, 4), (2, 1), (2, 2)], ["fp32", "int64", "fp32"], {}, "must match"),
        ("one_hot", [(3,), (3,)], ["int64", "fp32"], {"depth": 4}, "\\[off, on\\]"),
        ("cumsum", [(3,)], ["bool"], {"axis": 0}, "numeric"),
        ("reverse_sequence", [(4, 2), (3,)], ["fp32", "int64"], {}, "int32/int64 \\[2\\]"),
    ],
)
def test_inference_errors_name_the_problem(op, shapes, dtypes, attrs, message) -> None:
    ts = [types(s, dtype=d)[0] for s, d in zip(shapes, dtypes, strict=True)]
    with pytest.raises(InferError, match=message):
        infer_types(op, ts, attrs)
