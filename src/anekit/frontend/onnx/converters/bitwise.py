"""Converters for BitShift, the Bitwise* ops and BitCast."""

from __future__ import annotations

from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.dtypes import ir_dtype

_BINARY = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


@converter(*_BINARY)
def bitwise(cx: NodeContext):
    return cx.emit(_BINARY[cx.op_type], [cx.input(0), cx.input(1)], final=True)


@converter("BitwiseNot")
def bitwise_not(cx: NodeContext):
    return cx.emit("bitwise_not", [cx.input(0)], final=True)


@converter("BitShift")
def bit_shift(cx: NodeContext):
    attrs = {"direction": cx.attr("direction").lower()}
    return cx.emit("bit_shift", [cx.input(0), cx.input(1)], attrs, final=True)


@converter("BitCast")
def bitcast(cx: NodeContext):
    to = ir_dtype(cx.attr("to"), "the BitCast target type")
    return cx.emit("bitcast", [cx.input(0)], {"to": to}, final=True)
