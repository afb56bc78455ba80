"""Converters for MatMul, Gemm and Einsum."""

from __future__ import annotations

import numpy as np

from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter


@converter("MatMul")
def matmul(cx: NodeContext):
    return cx.emit("matmul", [cx.input(0), cx.input(1)], final=True)


@converter("Gemm")
def gemm(cx: NodeContext):
    """alpha * A' B' + beta * C, lowered to transpose, matmul, mul and add."""
    a, b, c = cx.input(0), cx.input(1), cx.input(2)
    alpha, beta = cx.attr("alpha", 1.0), cx.attr("beta", 1.0)
    if cx.attr("transA", 0):
        a = cx.emit("transpose", [a], {"perm": (1, 0)})
    if cx.attr("transB", 0):
        b = cx.emit("transpose", [b], {"perm": (1, 0)})
    has_c = c is not None and beta != 0.0
    dtype = cx.type(0).dtype.numpy
    y = cx.emit("matmul", [a, b], final=not has_c and alpha == 1.0)
    if alpha != 1.0:
        y = cx.emit("mul", [y, cx.constant(np.asarray(alpha, dtype), "alpha")], final=not has_c)
    if has_c:
        if beta != 1.0:
            c = cx.emit("mul", [c, cx.constant(np.asarray(beta, dtype), "beta")])
        y = cx.emit("add", [y, c], final=True)
    return y


@converter("Einsum")
def einsum(cx: NodeContext):
    return cx.emit("einsum", cx.inputs(), {"equation": cx.attr("equation")}, final=True)
