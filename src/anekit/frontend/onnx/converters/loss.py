"""Converters for the classification losses NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
(gathers, masks and reductions; the IR needs no loss op)."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter


def _nll(cx: NodeContext, log_prob: str, final: bool) -> str:
    """-log_prob[n, target[n, ...], ...], weighted, with ignore_index, then reduced."""
    shape = cx.shape_of(log_prob)
    t_shape = cx.shape(1)
    if len(shape) < 2 or t_shape != (shape[0], *shape[2:]):
        raise ModelError(f"target {list(t_shape)} must be the input {list(shape)} without axis 1")
    dtype = cx.type(0).dtype.numpy
    target = cx.input(1)
    ignore = cx.attr("ignore_index", None)
    valid = None
    if ignore is not None:
        marker = cx.constant(np.asarray(ignore, dtype=cx.type(1).dtype.numpy), "ignore_index")
        valid = cx.emit("not_equal", [target, marker])
        zero_t = cx.constant(np.zeros((), dtype=cx.type(1).dtype.numpy), "zero_target")
        target = cx.emit("where", [valid, target, zero_t])  # ignored targets gather class 0
    index = cx.emit("reshape", [target], {"shape": (t_shape[0], 1, *t_shape[1:])})
    picked = cx.emit("gather_elements", [log_prob, index], {"axis": 1})
    loss = cx.emit("neg", [cx.emit("reshape", [picked], {"shape": t_shape})])
    weight = None
    if cx.input(2) is not None:
        weight = cx.emit("gather", [cx.input(2), target], {"axis": 0})
    if valid is not None:
        zero = cx.constant(np.zeros((), dtype), "zero")
        ones = cx.constant(np.ones((), dtype), "one")
        weight = cx.emit("where", [valid, ones if weight is None else weight, zero])
    if weight is not None:
        loss = cx.emit("mul", [loss, weight])
    reduction = cx.attr("reduction", "mean")
    everything = {"axes": (), "keepdims": False}
    if reduction == "none":
        return cx.emit("identity", [loss], final=final) if final else loss
    if reduction == "sum":
        return cx.emit("reduce_sum", [loss], everything, final=final)
    if reduction != "mean":
        raise ModelError(f"unknown reduction '{reduction}'")
    if weight is None:
        return cx.emit("reduce_mean", [loss], everything, final=final)
    total = cx.emit("reduce_sum", [loss], everything)
    return cx.emit("div", [total, cx.emit("reduce_sum", [weight], everything)], final=final)


@converter("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(cx: NodeContext):
    return _nll(cx, cx.input(0), final=True)


@converter("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(cx: NodeContext):
    log_prob = cx.emit("log_softmax", [cx.input(0)], {"axis": 1})
    loss = _nll(cx, log_prob, final=False)
    if len(cx.node.output) > 1 and cx.node.output[1]:
        return loss, log_prob
    return loss
