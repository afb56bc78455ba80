"""Converters for elementwise ONNX ops: math, activations, comparisons, logic, casts."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.dtypes import ir_dtype

# ONNX op -> IR op for ops with one input and no attributes.
UNARY = {
    "Neg": "neg", "Abs": "abs", "Sign": "sign", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
    "Reciprocal": "reciprocal", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Erf": "erf",
    "Tanh": "tanh", "Sigmoid": "sigmoid", "Relu": "relu", "Softplus": "softplus", "Softsign": "softsign",
    "Mish": "mish", "HardSwish": "hard_swish", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin",
    "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh",
    "Atanh": "atanh", "IsNaN": "isnan", "Not": "not",
}  # fmt: skip

# ONNX op -> (IR op, attributes to copy with their ONNX defaults)
UNARY_ATTRS = {
    "LeakyRelu": ("leaky_relu", {"alpha": 0.01}),
    "Elu": ("elu", {"alpha": 1.0}),
    "Celu": ("celu", {"alpha": 1.0}),
    "Selu": ("selu", {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "HardSigmoid": ("hard_sigmoid", {"alpha": 0.2, "beta": 0.5}),
    "ThresholdedRelu": ("thresholded_relu", {"alpha": 1.0}),
    "Gelu": ("gelu", {"approximate": "none"}),
    "IsInf": ("isinf", {"detect_negative": 1, "detect_positive": 1}),
}

BINARY = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow", "PRelu": "prelu",
    "Equal": "equal", "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal", "And": "and", "Or": "or", "Xor": "xor",
}  # fmt: skip


@converter(*UNARY)
def unary(cx: NodeContext):
    return cx.emit(UNARY[cx.op_type], [cx.input(0)], final=True)


@converter(*UNARY_ATTRS)
def unary_with_attrs(cx: NodeContext):
    op, defaults = UNARY_ATTRS[cx.op_type]
    return cx.emit(op, [cx.input(0)], {k: cx.attr(k, d) for k, d in defaults.items()}, final=True)


@converter(*BINARY)
def binary(cx: NodeContext):
    if cx.opset < 7 and cx.attr("broadcast", 0):
        raise ModelError("legacy broadcast attribute (opset < 7) is not supported")
    return cx.emit(BINARY[cx.op_type], [cx.input(0), cx.input(1)], final=True)


@converter("Mod")
def mod(cx: NodeContext):
    return cx.emit("mod", [cx.input(0), cx.input(1)], {"fmod": cx.attr("fmod", 0)}, final=True)


@converter("Identity")
def identity(cx: NodeContext):
    return cx.input(0)


@converter("Dropout")
def dropout(cx: NodeContext):
    """Inference: the identity; the optional mask output is all True."""
    if cx.n_inputs > 2 and cx.const(2) is not None and bool(cx.const(2)):
        raise ModelError("Dropout in training mode is not supported; export the model in eval mode")
    if len(cx.node.output) > 1 and cx.node.output[1]:
        cx.reserve(cx.shape(0), np.bool_, "the dropout mask")
        mask = cx.constant(np.ones(cx.shape(0), dtype=np.bool_), "mask")
        return cx.input(0), mask
    return cx.input(0)


@converter("Max", "Min", "Sum", "Mean")
def variadic(cx: NodeContext):
    op = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[cx.op_type]
    ins = cx.inputs()
    if len(ins) == 1 and cx.op_type != "Mean":
        return cx.emit("identity", ins, final=True)
    acc = ins[0]
    last = len(ins) - 1
    for k, x in enumerate(ins[1:], start=1):
        acc = cx.emit(op, [acc, x], final=(k == last and cx.op_type != "Mean"))
    if cx.op_type == "Mean":
        count = cx.constant(np.asarray(len(ins), dtype=cx.type(0).dtype.numpy), "count")
        acc = cx.emit("div", [acc, count], final=True)
    return acc


@converter("Where")
def where(cx: NodeContext):
    return cx.emit("where", [cx.input(0), cx.input(1), cx.input(2)], final=True)


@converter("Cast")
def cast(cx: NodeContext):
    to = ir_dtype(cx.attr("to"), "the Cast target type")
    return cx.emit("cast", [cx.input(0)], {"to": to}, final=True)


@converter("CastLike")
def cast_like(cx: NodeContext):
    return cx.emit("cast", [cx.input(0)], {"to": cx.type(1).dtype}, final=True)


@converter("Clip")
def clip(cx: NodeContext):
    if cx.opset < 11:
        return cx.emit(
            "clip",
            [cx.input(0)],
            {"min": cx.attr("min", None), "max": cx.attr("max", None)},
            final=True,
        )
    lo, hi = cx.input(1), cx.input(2)
    lo_c, hi_c = cx.const(1), cx.const(2)
    if (lo is None or lo_c is not None) and (hi is None or hi_c is not None):
        attrs = {
            "min": None if lo is None else float(lo_c.reshape(-1)[0]),
            "max": None if hi is None else float(hi_c.reshape(-1)[0]),
        }
        return cx.emit("clip", [cx.input(0)], attrs, final=True)
    # bounds computed from the data: max then min
    y = cx.input(0)
    if lo is not None:
        y = cx.emit("maximum", [y, lo], final=hi is None)
    if hi is not None:
        y = cx.emit("minimum", [y, hi], final=True)
    return y
