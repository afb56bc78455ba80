"""Gradients of activations and of softmax / log_softmax."""

from __future__ import annotations

import math

from anekit.train.emit import Emitter
from anekit.train.vjp import rule
from anekit.train.vjp.elementwise import inside_mask


@rule("relu")
def _relu(e: Emitter, node, gys):
    return [e.mul(gys[0], e.step(node.output))]


@rule("leaky_relu")
def _leaky_relu(e: Emitter, node, gys):
    x = node.inputs[0]
    alpha = node.attrs["alpha"]
    slope = e.add(e.scalar(alpha, x), e.scale(e.step(x), 1.0 - alpha))
    return [e.mul(gys[0], slope)]


@rule("sigmoid")
def _sigmoid(e: Emitter, node, gys):
    y = node.output
    return [e.mul(gys[0], e.mul(y, e.sub(e.scalar(1.0, y), y)))]


@rule("tanh")
def _tanh(e: Emitter, node, gys):
    y = node.output
    return [e.mul(gys[0], e.sub(e.scalar(1.0, y), e.mul(y, y)))]


@rule("silu")
def _silu(e: Emitter, node, gys):
    x = node.inputs[0]
    s = e("sigmoid", x)
    # d x*s(x) = s + x s (1 - s) = s (1 + x (1 - s))
    d = e.mul(s, e.add(e.scalar(1.0, x), e.mul(x, e.sub(e.scalar(1.0, x), s))))
    return [e.mul(gys[0], d)]


@rule("softplus")
def _softplus(e: Emitter, node, gys):
    return [e.mul(gys[0], e("sigmoid", node.inputs[0]))]


@rule("elu")
def _elu(e: Emitter, node, gys):
    x, y = node.inputs[0], node.output
    pos = e.step(x)
    neg_slope = e.add(y, e.scalar(node.attrs["alpha"], x))  # alpha e^x for x < 0
    return [e.mul(gys[0], e.add(pos, e.mul(e.sub(e.scalar(1.0, x), pos), neg_slope)))]


@rule("gelu")
def _gelu(e: Emitter, node, gys):
    x = node.inputs[0]
    one, half = e.scalar(1.0, x), e.scalar(0.5, x)
    if node.attrs["approximate"] == "tanh":
        # y = x/2 (1 + tanh(u)), u = c (x + 0.044715 x^3)
        c = math.sqrt(2.0 / math.pi)
        x2 = e.mul(x, x)
        u = e.scale(e.add(x, e.scale(e.mul(x2, x), 0.044715)), c)
        t = e("tanh", u)
        du = e.scale(e.add(one, e.scale(x2, 3 * 0.044715)), c)
        d = e.add(
            e.mul(half, e.add(one, t)),
            e.mul(e.mul(half, x), e.mul(e.sub(one, e.mul(t, t)), du)),
        )
    else:
        # y = x Phi(x): dy = Phi(x) + x phi(x)
        cdf = e.mul(half, e.add(one, e("erf", e.scale(x, 1.0 / math.sqrt(2.0)))))
        pdf = e.scale(e("exp", e.scale(e.mul(x, x), -0.5)), 1.0 / math.sqrt(2.0 * math.pi))
        d = e.add(cdf, e.mul(x, pdf))
    return [e.mul(gys[0], d)]


@rule("hard_sigmoid")
def _hard_sigmoid(e: Emitter, node, gys):
    x = node.inputs[0]
    a, b = node.attrs["alpha"], node.attrs["beta"]
    inside = inside_mask(e, x, -b / a, (1.0 - b) / a)
    assert inside is not None
    return [e.mul(gys[0], e.scale(inside, a))]


@rule("softmax")
def _softmax(e: Emitter, node, gys):
    (g,) = gys
    y = node.output
    axis = node.attrs["axis"]
    gy = e.mul(g, y)
    dot = e("reduce_sum", gy, axes=(axis,), keepdims=True)
    return [e.sub(gy, e.mul(y, dot))]


@rule("log_softmax")
def _log_softmax(e: Emitter, node, gys):
    (g,) = gys
    axis = node.attrs["axis"]
    total = e("reduce_sum", g, axes=(axis,), keepdims=True)
    return [e.sub(g, e.mul(e("exp", node.output), total))]
