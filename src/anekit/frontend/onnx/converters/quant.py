"""Converters for quantization: QuantizeLinear, DequantizeLinear (also in the com.microsoft
domain, where onnxruntime's QDQ quantizer puts them with ``UseQDQContribOps`` or 16-bit types
before opset 21), DynamicQuantizeLinear, and
the integer matmuls and convolutions (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv)
with exact int32 accumulation."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.dtypes import ir_dtype
from anekit.frontend.onnx.converters.nn import resolve_pads, strides_and_dilations
from anekit.ir.dtypes import DType


def _quant_attrs(cx: NodeContext) -> dict:
    return {"axis": cx.attr("axis", 1), "block_size": cx.attr("block_size", 0)}


@converter("QuantizeLinear", "com.microsoft.QuantizeLinear")
def quantize_linear(cx: NodeContext):
    attrs = _quant_attrs(cx)
    if cx.input(2) is not None and cx.four_bit(2):
        raise ModelError(
            "quantizing to 4-bit codes (an int4/uint4 zero point) is not supported",
            hint="only 4-bit weights are: dequantize them, or quantize activations to 8 bits",
        )
    if cx.input(2) is not None:
        dtype = cx.type(2).dtype
    elif cx.attr("output_dtype", 0):
        dtype = ir_dtype(cx.attr("output_dtype"), "the QuantizeLinear output_dtype")
    else:
        dtype = DType.UINT8
    if dtype not in (DType.INT8, DType.UINT8):  # 16-bit zero points are read widened
        raise ModelError(
            "only int8 and uint8 quantization is supported; this zero point is a wider integer",
            hint="quantize to 8 bits (onnxruntime's QuantType.QInt8 / QUInt8)",
        )
    attrs["dtype"] = dtype
    return cx.emit("quantize_linear", [cx.input(0), cx.input(1), cx.input(2)], attrs, final=True)


@converter("DequantizeLinear", "com.microsoft.DequantizeLinear")
def dequantize_linear(cx: NodeContext):
    ins = [cx.input(0), cx.input(1), cx.input(2)]
    return cx.emit("dequantize_linear", ins, _quant_attrs(cx), final=True)


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(cx: NodeContext):
    """uint8 scale and zero point from the tensor's range (which always includes 0)."""
    x = cx.input(0)
    f32 = cx.type(0).dtype.numpy
    c = {v: cx.constant(np.asarray(v, dtype=f32), f"c{v}") for v in (0.0, 1.0, 255.0)}
    every = {"axes": (), "keepdims": False}
    hi = cx.emit("maximum", [cx.emit("reduce_max", [x], every), c[0.0]])
    lo = cx.emit("minimum", [cx.emit("reduce_min", [x], every), c[0.0]])
    scale = cx.emit("div", [cx.emit("sub", [hi, lo]), c[255.0]])
    # an all-zero tensor gets scale 1, as onnxruntime (the spec would divide by zero)
    scale = cx.emit("where", [cx.emit("equal", [hi, lo]), c[1.0], scale])
    zp = cx.emit("sub", [c[0.0], cx.emit("div", [lo, scale])])
    zp = cx.emit("round", [cx.emit("clip", [zp], {"min": 0.0, "max": 255.0})])
    zp_u8 = cx.emit("cast", [zp], {"to": DType.UINT8})
    y = cx.emit("quantize_linear", [x, scale, zp_u8], {"dtype": DType.UINT8})
    return y, scale, zp_u8


def centred_int32(cx: NodeContext, x: str, zp: str | None, row_param: bool) -> str:
    """x - zero_point in int32; ``row_param``: a zero point per row of x (a matmul's left
    operand, or a right one stored [N, K]) is reshaped to a column."""
    x32 = cx.emit("cast", [x], {"to": DType.INT32})
    if zp is None:
        return x32
    z32 = cx.emit("cast", [zp], {"to": DType.INT32})
    if row_param and cx.shape_of(zp) and int(np.prod(cx.shape_of(zp))) > 1:
        z32 = cx.emit("reshape", [z32], {"shape": (*cx.shape_of(zp), 1)})
    return cx.emit("sub", [x32, z32])


@converter("MatMulInteger")
def matmul_integer(cx: NodeContext):
    a = centred_int32(cx, cx.input(0), cx.input(2), True)
    b = centred_int32(cx, cx.input(1), cx.input(3), False)
    return cx.emit("matmul", [a, b], final=True)


@converter("QLinearMatMul")
def qlinear_matmul(cx: NodeContext):
    """int32 (a - a_zp) @ (b - b_zp), rescaled by a_scale b_scale / y_scale and requantized."""
    a = centred_int32(cx, cx.input(0), cx.input(2), True)
    b = centred_int32(cx, cx.input(3), cx.input(5), False)
    acc = cx.emit("cast", [cx.emit("matmul", [a, b])], {"to": DType.FP32})
    a_scale, b_scale, y_scale = cx.input(1), cx.input(4), cx.input(6)
    if int(np.prod(cx.shape(1))) > 1:
        a_scale = cx.emit("reshape", [a_scale], {"shape": (*cx.shape(1), 1)})
    factor = cx.emit("div", [cx.emit("mul", [a_scale, b_scale]), y_scale])
    if cx.type(1).dtype is not DType.FP32:
        factor = cx.emit("cast", [factor], {"to": DType.FP32})
    y = cx.emit("round", [cx.emit("mul", [acc, factor])])
    dtype = cx.type(7).dtype if cx.input(7) is not None else cx.type(0).dtype
    if dtype not in (DType.INT8, DType.UINT8):
        raise ModelError(f"QLinearMatMul output must be int8 or uint8, got {dtype}")
    if cx.input(7) is not None:
        y = cx.emit("add", [y, cx.emit("cast", [cx.input(7)], {"to": DType.FP32})])
    info = np.iinfo(dtype.numpy)
    y = cx.emit("clip", [y], {"min": float(info.min), "max": float(info.max)})
    return cx.emit("cast", [y], {"to": dtype}, final=True)


def _integer_conv(cx: NodeContext, x: int, w: int, zx: int, zw: int) -> str:
    x_shape, w_shape = cx.shape(x), cx.shape(w)
    sp = len(x_shape) - 2
    kernel = tuple(cx.attr("kernel_shape", w_shape[2:]))
    strides, dilations = strides_and_dilations(cx, sp)
    pads = resolve_pads(cx, x_shape[2:], kernel, strides, dilations)
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": cx.attr("group", 1)}
    ins = [cx.input(x), cx.input(w), cx.input(zx), cx.input(zw)]
    return cx.emit("conv_integer", ins, attrs, final=cx.op_type == "ConvInteger")


@converter("ConvInteger")
def conv_integer(cx: NodeContext):
    return _integer_conv(cx, 0, 1, 2, 3)


@converter("QLinearConv")
def qlinear_conv(cx: NodeContext):
    """Exact int32 convolution (+ int32 bias), rescaled by x_scale w_scale / y_scale, requantized."""
    acc = _integer_conv(cx, 0, 3, 2, 5)
    rank = len(cx.shape(0))
    per_channel = (cx.shape(3)[0],) + (1,) * (rank - 2)  # broadcasts over [N, M, spatial...]
    if cx.input(8) is not None:
        acc = cx.emit("add", [acc, cx.emit("reshape", [cx.input(8)], {"shape": per_channel})])
    y = cx.emit("cast", [acc], {"to": DType.FP32})
    w_scale = cx.input(4)
    if int(np.prod(cx.shape(4))) > 1:  # one scale per output channel
        w_scale = cx.emit("reshape", [w_scale], {"shape": per_channel})
    factor = cx.emit("div", [cx.emit("mul", [cx.input(1), w_scale]), cx.input(6)])
    if cx.type(1).dtype is not DType.FP32:
        factor = cx.emit("cast", [factor], {"to": DType.FP32})
    y = cx.emit("round", [cx.emit("mul", [y, factor])])
    dtype = cx.type(7).dtype if cx.input(7) is not None else cx.type(0).dtype
    if cx.input(7) is not None:
        y = cx.emit("add", [y, cx.emit("cast", [cx.input(7)], {"to": DType.FP32})])
    info = np.iinfo(dtype.numpy)
    y = cx.emit("clip", [y], {"min": float(info.min), "max": float(info.max)})
    return cx.emit("cast", [y], {"to": dtype}, final=True)
