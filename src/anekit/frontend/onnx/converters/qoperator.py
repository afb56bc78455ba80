"""The ``com.microsoft`` ops of onnxruntime's static quantizer in its QOperator format
(``quantize_static(..., quant_format=QuantFormat.QOperator)``): ``QLinearAdd``, ``QLinearMul``,
``QLinearSigmoid``, ``QLinearLeakyRelu``, ``QLinearGlobalAveragePool``, ``QLinearAveragePool``,
``QLinearConcat``, ``QLinearSoftmax``, ``QLinearWhere`` and ``QGemm`` (and ``QLinearReduceMean``,
which onnxruntime defines but its quantizer does not write).

Each elementwise one is its float op between a dequantize and a quantize (round half to
even, saturated), which is what onnxruntime computes up to its fixed-point and lookup-table
shortcuts: outputs agree within one quantization step. ``QGemm`` accumulates in exact int32,
as ``QLinearMatMul`` does.
"""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.layout import channels_first, channels_last
from anekit.frontend.onnx.converters.pool import avg_pool_attrs
from anekit.frontend.onnx.converters.quant import centred_int32
from anekit.ir.dtypes import DType

MS = "com.microsoft"
_PER_TENSOR = {"axis": 1, "block_size": 0}


def _dequantized(cx: NodeContext, x: int, scale: int, zero: int) -> str:
    ins = [cx.input(x), cx.input(scale), cx.input(zero)]
    return cx.emit("dequantize_linear", ins, _PER_TENSOR)


def _quantized(cx: NodeContext, y: str, scale: int, zero: int, like: int) -> str:
    """y quantized to the node's output, of the zero point's type (else input ``like``'s)."""
    dtype = cx.type(zero).dtype if cx.input(zero) is not None else cx.type(like).dtype
    attrs = {**_PER_TENSOR, "dtype": dtype}
    return cx.emit("quantize_linear", [y, cx.input(scale), cx.input(zero)], attrs, final=True)


@converter(f"{MS}.QLinearAdd", f"{MS}.QLinearMul")
def qlinear_binary(cx: NodeContext):
    """A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point."""
    op = "add" if cx.op_type == "QLinearAdd" else "mul"
    y = cx.emit(op, [_dequantized(cx, 0, 1, 2), _dequantized(cx, 3, 4, 5)])
    return _quantized(cx, y, 6, 7, 0)


@converter(f"{MS}.QLinearSigmoid", f"{MS}.QLinearLeakyRelu")
def qlinear_activation(cx: NodeContext):
    """X, X_scale, X_zero_point, Y_scale, Y_zero_point."""
    x = _dequantized(cx, 0, 1, 2)
    if cx.op_type == "QLinearSigmoid":
        y = cx.emit("sigmoid", [x])
    else:
        y = cx.emit("leaky_relu", [x], {"alpha": cx.attr("alpha", 0.01)})
    return _quantized(cx, y, 3, 4, 0)


@converter(f"{MS}.QLinearGlobalAveragePool")
def qlinear_global_average_pool(cx: NodeContext):
    rank = len(cx.shape(0))
    if rank < 3:
        raise ModelError(f"QLinearGlobalAveragePool needs rank >= 3, got {list(cx.shape(0))}")
    axes = tuple(range(1, rank - 1)) if cx.attr("channels_last", 0) else tuple(range(2, rank))
    y = cx.emit("reduce_mean", [_dequantized(cx, 0, 1, 2)], {"axes": axes, "keepdims": True})
    return _quantized(cx, y, 3, 4, 0)


@converter(f"{MS}.QLinearAveragePool")
def qlinear_average_pool(cx: NodeContext):
    """X, x_scale, x_zero_point, y_scale, y_zero_point; AveragePool's attributes, and
    ``channels_last`` for an [N, spatial..., C] input."""
    x = _dequantized(cx, 0, 1, 2)
    nhwc = bool(cx.attr("channels_last", 0))
    if nhwc:
        x = channels_first(cx, x)
    y = cx.emit("avg_pool", [x], avg_pool_attrs(cx, cx.shape_of(x)))
    return _quantized(cx, channels_last(cx, y) if nhwc else y, 3, 4, 0)


@converter(f"{MS}.QLinearReduceMean")
def qlinear_reduce_mean(cx: NodeContext):
    """data, data_scale, data_zero_point, reduced_scale, reduced_zero_point."""
    attrs = {"axes": tuple(cx.attr("axes")), "keepdims": cx.attr("keepdims")}
    y = cx.emit("reduce_mean", [_dequantized(cx, 0, 1, 2)], attrs)
    return _quantized(cx, y, 3, 4, 0)


@converter(f"{MS}.QLinearWhere")
def qlinear_where(cx: NodeContext):
    """condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale, z_zero_point."""
    y = cx.emit("where", [cx.input(0), _dequantized(cx, 1, 2, 3), _dequantized(cx, 4, 5, 6)])
    return _quantized(cx, y, 7, 8, 1)


@converter(f"{MS}.QLinearConcat")
def qlinear_concat(cx: NodeContext):
    """Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input."""
    n = cx.n_inputs - 2
    if n < 1 or n % 3:
        raise ModelError(
            f"QLinearConcat takes Y_scale, Y_zero_point and triples, not {n + 2} inputs"
        )
    parts = [_dequantized(cx, i, i + 1, i + 2) for i in range(2, cx.n_inputs, 3)]
    y = cx.emit("concat", parts, {"axis": cx.attr("axis")})
    return _quantized(cx, y, 0, 1, 2)


@converter(f"{MS}.QLinearSoftmax")
def qlinear_softmax(cx: NodeContext):
    """X, X_scale, x_zero_point, y_scale, y_zero_point; ``opset`` picks the softmax's axis
    rule (before 13: over everything from ``axis`` on)."""
    shape = cx.shape(0)
    axis = cx.attr("axis", -1 if cx.attr("opset", 13) >= 13 else 1) % max(len(shape), 1)
    x = _dequantized(cx, 0, 1, 2)
    if cx.attr("opset", 13) < 13 and axis != len(shape) - 1:
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        flat = cx.emit("reshape", [x], {"shape": (rows, -1)})
        y = cx.emit("reshape", [cx.emit("softmax", [flat], {"axis": 1})], {"shape": shape})
    else:
        y = cx.emit("softmax", [x], {"axis": axis})
    return _quantized(cx, y, 3, 4, 0)


@converter(f"{MS}.QGemm")
def qgemm(cx: NodeContext):
    """alpha (A - a_zp) @ (B - b_zp) in exact int32 (+ the int32 bias C, on the scale
    a_scale b_scale), times a_scale b_scale; quantized to y_scale/y_zero_point, or float
    when y_scale is absent. B's scale may be per output column."""
    a = centred_int32(cx, cx.input(0), cx.input(2), row_param=False)
    b = centred_int32(cx, cx.input(3), cx.input(5), row_param=bool(cx.attr("transB", 0)))
    if cx.attr("transA", 0):
        a = cx.emit("transpose", [a], {"perm": (1, 0)})
    if cx.attr("transB", 0):
        b = cx.emit("transpose", [b], {"perm": (1, 0)})
    acc = cx.emit("matmul", [a, b])
    if cx.input(6) is not None:
        acc = cx.emit("add", [acc, cx.emit("cast", [cx.input(6)], {"to": DType.INT32})])
    scale = cx.emit("mul", [cx.input(1), cx.input(4)])  # [N] per column, or one value
    alpha = cx.attr("alpha", 1.0)
    if alpha != 1.0:
        scale = cx.emit("mul", [scale, cx.constant(np.float32(alpha), "alpha")])
    real = cx.input(7) is None
    y = cx.emit("mul", [cx.emit("cast", [acc], {"to": DType.FP32}), scale], final=real)
    return y if real else _quantized(cx, y, 7, 8, 0)
