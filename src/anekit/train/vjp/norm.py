"""Gradients of layer_norm, rms_norm and batch_norm (with given statistics).

batch_norm in training mode normalises with the batch's own statistics; the trainer
rewrites it into reductions and arithmetic first (anekit.train.modes), whose rules give
its gradient, so the rule here is the one for fixed (running) statistics.
"""

from __future__ import annotations

from anekit.train.emit import Emitter
from anekit.train.vjp import rule


def _mean(e: Emitter, v: str, axes) -> str:
    return e("reduce_mean", v, axes=tuple(axes), keepdims=True)


def _present(node, i: int) -> str | None:
    return node.inputs[i] if len(node.inputs) > i and node.inputs[i] else None


def _affine_grads(e: Emitter, node, g: str, xhat: str) -> list[str | None]:
    """Gradients of the optional scale (input 1) and bias (input 2) of a norm."""
    scale, bias = _present(node, 1), _present(node, 2)
    out = [e.sum_to(e.mul(g, xhat), e.shape(scale)) if scale else None]
    if len(node.inputs) > 2:
        out.append(e.sum_to(g, e.shape(bias)) if bias else None)
    return out


@rule("layer_norm")
def _layer_norm(e: Emitter, node, gys):
    (g,) = gys
    x = node.inputs[0]
    r = e.rank(x)
    axes = range(node.attrs["axis"] % r, r)
    centered = e.sub(x, _mean(e, x, axes))
    var = _mean(e, e.mul(centered, centered), axes)
    rstd = e("reciprocal", e("sqrt", e.add(var, e.scalar(node.attrs["epsilon"], x))))
    xhat = e.mul(centered, rstd)
    scale = _present(node, 1)
    gxhat = e.mul(g, scale) if scale else g
    inner = e.sub(gxhat, _mean(e, gxhat, axes))
    inner = e.sub(inner, e.mul(xhat, _mean(e, e.mul(gxhat, xhat), axes)))
    return [e.mul(rstd, inner), *_affine_grads(e, node, g, xhat)]


@rule("rms_norm")
def _rms_norm(e: Emitter, node, gys):
    (g,) = gys
    x = node.inputs[0]
    r = e.rank(x)
    axes = range(node.attrs["axis"] % r, r)
    ms = _mean(e, e.mul(x, x), axes)
    rinv = e("reciprocal", e("sqrt", e.add(ms, e.scalar(node.attrs["epsilon"], x))))
    xhat = e.mul(x, rinv)
    scale = _present(node, 1)
    gxhat = e.mul(g, scale) if scale else g
    inner = e.sub(gxhat, e.mul(xhat, _mean(e, e.mul(gxhat, xhat), axes)))
    return [e.mul(rinv, inner), *_affine_grads(e, node, g, xhat)]


@rule("batch_norm")
def _batch_norm(e: Emitter, node, gys):
    (g,) = gys
    x, scale, bias, mean, var = node.inputs
    r = e.rank(x)
    per_channel = (1, e.shape(x)[1]) + (1,) * (r - 2)
    m = e.reshape(mean, per_channel)
    rstd = e("reciprocal", e("sqrt", e.add(e.reshape(var, per_channel),
                                           e.scalar(node.attrs["epsilon"], x))))  # fmt: skip
    xhat = e.mul(e.sub(x, m), rstd)
    gx = e.mul(g, e.mul(rstd, e.reshape(scale, per_channel)))
    axes = [0, *range(2, r)]
    gscale = e.sum_axes(e.mul(g, xhat), axes, keepdims=False)
    gbias = e.sum_axes(g, axes, keepdims=False)
    return [gx, gscale, gbias, None, None]
