"""Gradients of reductions: sum, mean, sum of squares, L2 norm, max/min, log-sum-exp."""

from __future__ import annotations

import numpy as np

from anekit.ir.ops.reduce import reduced_axes
from anekit.train.emit import Emitter
from anekit.train.vjp import rule


def _spread(e: Emitter, node, g: str) -> str:
    """The output gradient broadcast back over the reduced axes of the input."""
    x = node.inputs[0]
    shape = e.shape(x)
    axes = reduced_axes(len(shape), node.attrs)
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    return e.broadcast_to(e.reshape(g, kept), shape)


def _kept(e: Emitter, node, v: str) -> str:
    """A reduction result reshaped to keep the reduced axes (for broadcasting)."""
    shape = e.shape(node.inputs[0])
    axes = reduced_axes(len(shape), node.attrs)
    return e.reshape(v, tuple(1 if i in axes else d for i, d in enumerate(shape)))


@rule("reduce_sum")
def _sum(e: Emitter, node, gys):
    return [_spread(e, node, gys[0])]


@rule("reduce_mean")
def _mean(e: Emitter, node, gys):
    shape = e.shape(node.inputs[0])
    count = int(np.prod([shape[a] for a in reduced_axes(len(shape), node.attrs)]))
    return [_spread(e, node, e.scale(gys[0], 1.0 / count))]


@rule("reduce_sum_square")
def _sum_square(e: Emitter, node, gys):
    x = node.inputs[0]
    return [e.mul(_spread(e, node, gys[0]), e.scale(x, 2.0))]


@rule("reduce_l2")
def _l2(e: Emitter, node, gys):
    x = node.inputs[0]
    return [e.mul(_spread(e, node, gys[0]), e.div(x, _kept(e, node, node.output)))]


@rule("reduce_log_sum_exp")
def _lse(e: Emitter, node, gys):
    x = node.inputs[0]
    soft = e("exp", e.sub(x, _kept(e, node, node.output)))
    return [e.mul(_spread(e, node, gys[0]), soft)]


def _extreme(e: Emitter, node, gys):
    """max/min: the gradient is shared equally by the elements equal to the extreme."""
    x = node.inputs[0]
    gap = e.sub(_kept(e, node, node.output), x)
    hit = e.sub(e.scalar(1.0, x), e.step(e("abs", gap)))  # 1 where x is the extreme
    count = _kept(e, node, e("reduce_sum", hit, **node.attrs))
    return [e.mul(_spread(e, node, gys[0]), e.div(hit, count))]


@rule("reduce_max")
def _max(e, node, gys):
    return _extreme(e, node, gys)


@rule("reduce_min")
def _min(e, node, gys):
    return _extreme(e, node, gys)
