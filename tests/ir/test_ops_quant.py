"""Quantize/dequantize kernels and the ONNX integer matmuls against onnxruntime: per tensor,
per axis, blocked, int8 and uint8, rounding ties, saturation, an all-zero dynamic range."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from anekit.frontend.onnx import from_onnx
from anekit.ir.registry import InferError, infer_types
from tests.ir.ort_oracle import run_ir, run_ort, types

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(12)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("mode", ["tensor", "axis", "block"])
def test_quantize_dequantize_match_onnxruntime(dtype, mode) -> None:
    x = (RNG.standard_normal((2, 6, 4)) * 40).astype(np.float32)
    x[0, 0, :3] = [0.5, 1.5, -2.5]  # ties round to even
    if mode == "tensor":
        scale, zp, attrs = np.float32(0.37), np.asarray(3, dtype), {}
    elif mode == "axis":
        scale = RNG.uniform(0.1, 1, 6).astype(np.float32)
        zp = RNG.integers(0, 10, 6).astype(dtype)
        attrs = {"axis": 1}
    else:
        scale = RNG.uniform(0.1, 1, (2, 3, 4)).astype(np.float32)
        zp = RNG.integers(0, 10, (2, 3, 4)).astype(dtype)
        attrs = {"axis": 1, "block_size": 2}
    scale, zp = np.asarray(scale), np.asarray(zp)
    (q_ref,) = run_ort("QuantizeLinear", [x, scale, zp], opset=21, **attrs)
    (q,) = run_ir("quantize_linear", [x, scale, zp], dtype=np.dtype(dtype), **attrs)
    np.testing.assert_array_equal(q, q_ref)
    assert (q == np.iinfo(dtype).max).any() or (q == np.iinfo(dtype).min).any()  # saturated
    (d_ref,) = run_ort("DequantizeLinear", [q, scale, zp], opset=21, **attrs)
    (d,) = run_ir("dequantize_linear", [q, scale, zp], **attrs)
    np.testing.assert_allclose(d, d_ref, rtol=1e-6)


def _model(op: str, inputs: list[np.ndarray], n_out: int) -> onnx.ModelProto:
    names = [f"i{k}" for k in range(len(inputs))]
    outs = [f"o{k}" for k in range(n_out)]
    graph = helper.make_graph(
        [helper.make_node(op, names, outs)],
        "g",
        [
            helper.make_tensor_value_info(
                names[0], helper.np_dtype_to_tensor_dtype(inputs[0].dtype), inputs[0].shape
            )
        ],
        [helper.make_empty_tensor_value_info(o) for o in outs],
        initializer=[
            onnx.numpy_helper.from_array(np.asarray(a), n)
            for n, a in zip(names[1:], inputs[1:], strict=True)
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _both(op: str, inputs: list[np.ndarray], n_out: int = 1) -> tuple[list, list]:
    model = _model(op, inputs, n_out)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"i0": inputs[0]})
    got = from_onnx(model).run({"i0": inputs[0]})
    return list(got.values()), ref


@pytest.mark.parametrize(
    "x", [np.zeros((3, 4), np.float32), RNG.standard_normal((3, 4)).astype(np.float32) * 5]
)
def test_dynamic_quantize_linear_matches_onnxruntime(x) -> None:
    got, ref = _both("DynamicQuantizeLinear", [x], 3)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(g, r)


def test_matmul_integer_with_per_column_zero_points() -> None:
    a = RNG.integers(0, 255, (4, 6)).astype(np.uint8)
    b = RNG.integers(-128, 127, (6, 5)).astype(np.int8)
    b_zp = RNG.integers(-128, 127, 5).astype(np.int8)
    got, ref = _both("MatMulInteger", [a, b, np.asarray(7, np.uint8), b_zp])
    assert got[0].dtype == np.int32
    np.testing.assert_array_equal(got[0], ref[0])


def test_matmul_integer_per_row_zero_point_follows_the_spec() -> None:
    # onnxruntime takes only scalar zero points for A; the spec allows one per row
    a = RNG.integers(0, 255, (4, 6)).astype(np.uint8)
    b = RNG.integers(0, 255, (6, 5)).astype(np.uint8)
    a_zp = RNG.integers(0, 255, 4).astype(np.uint8)
    (got,) = from_onnx(_model("MatMulInteger", [a, b, a_zp], 1)).run({"i0": a}).values()
    expect = (a.astype(np.int64) - a_zp[:, None]) @ b.astype(np.int64)
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul_matches_onnxruntime(dtype) -> None:
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    a = RNG.integers(lo, hi, (2, 3, 8)).astype(dtype)
    b = RNG.integers(lo, hi, (8, 5)).astype(dtype)
    params = [
        np.float32(0.02), np.asarray(3, dtype), b, np.float32(0.03), np.asarray(-2 if lo else 2, dtype),
        np.float32(0.5), np.asarray(1, dtype),
    ]  # fmt: skip
    got, ref = _both("QLinearMatMul", [a, *[np.asarray(p) for p in params]])
    np.testing.assert_array_equal(got[0], ref[0])


@pytest.mark.parametrize(
    ("op", "shapes", "dtypes", "attrs", "message"),
    [
        ("quantize_linear", [(2, 6), (4,)], ["fp32", "fp32"], {"axis": 1}, "must be \\[6\\]"),
        (
            "quantize_linear",
            [(2, 6), (2, 2)],
            ["fp32", "fp32"],
            {"axis": 1, "block_size": 2},
            "must be \\[2, 3\\]",
        ),
        ("quantize_linear", [(2, 6), ()], ["fp32", "fp32"], {"dtype": "int32"}, "int8 or uint8"),
        ("dequantize_linear", [(2, 6), ()], ["fp32", "fp32"], {}, "int8, uint8 or int32"),
        (
            "dequantize_linear",
            [(2, 6), (), (2,)],
            ["int8", "fp32", "int8"],
            {},
            "zero point \\[2\\]",
        ),
    ],
)
def test_inference_errors_name_the_problem(op, shapes, dtypes, attrs, message) -> None:
    ts = [types(s, dtype=d)[0] for s, d in zip(shapes, dtypes, strict=True)]
    with pytest.raises(InferError, match=message):
        infer_types(op, ts, attrs)


def _conv_model(op: str, inputs: list[np.ndarray], **attrs) -> onnx.ModelProto:
    names = [f"i{k}" for k in range(len(inputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("i0", helper.np_dtype_to_tensor_dtype(inputs[0].dtype), inputs[0].shape)],
        [helper.make_empty_tensor_value_info("y")],
        initializer=[onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in zip(names[1:], inputs[1:], strict=True)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _ort_and_ours(model: onnx.ModelProto, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"i0": x})
    (got,) = from_onnx(model).run({"i0": x}).values()
    return got, ref


def test_conv_integer_matches_onnxruntime() -> None:
    x = RNG.integers(0, 255, (1, 4, 7, 6)).astype(np.uint8)
    w = RNG.integers(0, 255, (6, 2, 3, 3)).astype(np.uint8)
    model = _conv_model(
        "ConvInteger", [x, w, np.asarray(9, np.uint8), np.asarray(100, np.uint8)],
        pads=[1, 0, 1, 2], strides=[2, 1], group=2,
    )  # fmt: skip
    got, ref = _ort_and_ours(model, x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref)


def test_qlinear_conv_per_channel_with_bias_matches_onnxruntime() -> None:
    x = RNG.integers(0, 255, (2, 3, 6, 6)).astype(np.uint8)
    w = RNG.integers(-128, 127, (5, 3, 3, 3)).astype(np.int8)
    params = [
        x, np.float32(0.05), np.asarray(128, np.uint8), w,
        RNG.uniform(0.001, 0.01, 5).astype(np.float32), np.zeros(5, np.int8),
        np.float32(0.2), np.asarray(120, np.uint8), RNG.integers(-500, 500, 5).astype(np.int32),
    ]  # fmt: skip
    model = _conv_model("QLinearConv", [np.asarray(p) for p in params], pads=[1, 1, 1, 1])
    got, ref = _ort_and_ours(model, x)
    np.testing.assert_array_equal(got, ref)


def test_one_element_scale_and_scalar_zero_point_are_per_tensor() -> None:
    # onnxruntime's quantize_static writes bias dequantizers this way ([1] scale, [] zero point)
    q = RNG.integers(-1000, 1000, 6).astype(np.int32)
    scale, zp = np.asarray([0.02], np.float32), np.asarray(0, np.int32)
    (d_ref,) = run_ort("DequantizeLinear", [q, scale, zp], opset=21)
    (d,) = run_ir("dequantize_linear", [q, scale, zp])
    np.testing.assert_allclose(d, d_ref, rtol=1e-6)

