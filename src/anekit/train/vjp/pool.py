"""Gradients of average and max pooling (1 to 3 spatial axes, pads, dilations, ceil mode).

Both use the window patches of anekit.train.vjp.conv: the output gradient is spread over
each window (evenly for average pooling; to the maximal elements for max pooling) and
summed back onto the input by the transposed window convolution.
"""

from __future__ import annotations

import numpy as np

from anekit.ir.ops.pool import pool_geometry, window_counts
from anekit.train.emit import Emitter
from anekit.train.vjp import rule
from anekit.train.vjp.conv import patches, unpatch


def _geometry(e: Emitter, node) -> tuple[tuple[int, ...], dict]:
    """(kernel, conv geometry) with the end pads grown so ceil mode's last window fits."""
    x = node.inputs[0]
    spatial = e.shape(x)[2:]
    sp = len(spatial)
    kernel, strides, pads, dil = pool_geometry(sp, node.attrs)
    out = e.shape(node.outputs[0])[2:]
    ends = [
        max(pads[sp + i], (out[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1
            - spatial[i] - pads[i])
        for i in range(sp)
    ]  # fmt: skip
    return kernel, {"strides": strides, "pads": (*pads[:sp], *ends), "dilations": dil}


def _spread(e: Emitter, weights: str, g: str, k: int) -> str:
    """[N, C, K, *out] window weights times the output gradient, as [N, C*K, *out]."""
    n, c, *out = e.shape(g)
    spread = e.mul(weights, e.reshape(g, (n, c, 1, *out)))
    return e.reshape(spread, (n, c * k, *out))


@rule("avg_pool")
def _avg_pool(e: Emitter, node, gys):
    g = gys[0]
    x = node.inputs[0]
    kernel, geo = _geometry(e, node)
    k = int(np.prod(kernel))
    counts = window_counts(e.shape(x)[2:], node.attrs, node.attrs["count_include_pad"])
    inv = e.const((1.0 / counts).astype(e.ed.values[g].dtype.numpy), hint="inv_count")
    n, c, *out = e.shape(g)
    per_window = e.broadcast_to(e.reshape(inv, (1, 1, 1, *out)), (n, c, k, *out))
    return [unpatch(e, _spread(e, per_window, g, k), e.shape(x), kernel, geo)]


@rule("max_pool")
def _max_pool(e: Emitter, node, gys):
    g = gys[0]
    x = node.inputs[0]
    kernel, geo = _geometry(e, node)
    k = int(np.prod(kernel))
    sp = len(kernel)
    # pad with the lowest fp16 value so that padding never wins a window
    padded = e("pad", x, pads=(0, 0, *geo["pads"][:sp], 0, 0, *geo["pads"][sp:]), value=-65504.0)
    bare = {**geo, "pads": (0,) * (2 * sp)}
    n, c, *out = e.shape(g)
    windows = e.reshape(patches(e, padded, kernel, bare), (n, c, k, *out))
    y = e.reshape(node.outputs[0], (n, c, 1, *out))
    hit = e.sub(e.scalar(1.0, g), e.step(e.sub(y, windows)))  # 1 where the window holds y
    # ties split evenly: the gradient divided by each window's count of maxima, on the
    # output's shape, then spread by the hits (one pass over the windows, not two)
    count = e.reshape(e("reduce_sum", hit, axes=(2,), keepdims=True), (n, c, *out))
    full = unpatch(e, _spread(e, hit, e.div(g, count), k), e.shape(padded), kernel, bare)
    spatial = e.shape(x)[2:]
    begin = geo["pads"][:sp]
    cut = e("slice", full, starts=begin, ends=[b + s for b, s in zip(begin, spatial, strict=True)],
            axes=tuple(range(2, 2 + sp)))  # fmt: skip
    return [cut]
