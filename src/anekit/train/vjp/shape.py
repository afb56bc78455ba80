"""Gradients of data movement: reshape, transpose, expand, concat, split, slice, pad, tile."""

from __future__ import annotations

import numpy as np

from anekit.ir.ops._infer import normalize_axis
from anekit.ir.ops.shape import slice_ as slice_kernel
from anekit.train.emit import Emitter
from anekit.train.vjp import rule


@rule("reshape")
def _reshape(e: Emitter, node, gys):
    return [e.reshape(gys[0], e.shape(node.inputs[0]))]


@rule("transpose")
def _transpose(e: Emitter, node, gys):
    perm = node.attrs["perm"]
    return [e.transpose(gys[0], tuple(int(i) for i in np.argsort(perm)))]


@rule("expand")
def _expand(e: Emitter, node, gys):
    return [e.sum_to(gys[0], e.shape(node.inputs[0]))]


@rule("tile")
def _tile(e: Emitter, node, gys):
    x = node.inputs[0]
    shape = e.shape(x)
    reps = node.attrs["repeats"]
    # [r0, d0, r1, d1, ...] then sum over the repeat axes
    split = [v for r, d in zip(reps, shape, strict=True) for v in (r, d)]
    g = e.reshape(gys[0], split)
    return [e.reshape(e.sum_axes(g, range(0, 2 * len(shape), 2)), shape)]


@rule("concat")
def _concat(e: Emitter, node, gys):
    axis = normalize_axis(node.attrs["axis"], e.rank(node.output))
    sizes = tuple(e.shape(i)[axis] for i in node.inputs)
    if len(sizes) == 1:
        return [gys[0]]
    return list(e.multi("split", [gys[0]], axis=axis, sizes=sizes))


@rule("split")
def _split(e: Emitter, node, gys):
    parts = [
        g if g is not None else e.const(np.zeros(e.shape(o), e.ed.values[o].dtype.numpy))
        for g, o in zip(gys, node.outputs, strict=True)
    ]
    return [e("concat", *parts, axis=node.attrs["axis"])]


@rule("slice")
def _slice(e: Emitter, node, gys):
    x, g = node.inputs[0], gys[0]
    shape = e.shape(x)
    index = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    taken = slice_kernel(index, **node.attrs)
    if taken.size == 0:
        return [e.const(np.zeros(shape, e.ed.values[g].dtype.numpy))]
    first = np.array(np.unravel_index(taken.flat[0], shape))
    last = np.array(np.unravel_index(taken.flat[-1], shape))
    if tuple(last - first + 1) != taken.shape:
        # strided or reversed: scatter the gradient back to the elements it came from
        zeros = e.const(np.zeros(index.size, e.ed.values[g].dtype.numpy))
        flat = e("scatter_nd", zeros, e.const(taken.reshape(-1, 1)), e.reshape(g, (taken.size,)))
        return [e.reshape(flat, shape)]
    pads = (*first.tolist(), *(np.array(shape) - last - 1).tolist())
    return [e("pad", g, pads=pads) if any(pads) else g]


@rule("pad")
def _pad(e: Emitter, node, gys):
    if node.attrs["mode"] != "constant":
        from anekit.errors import UnsupportedModelError

        raise UnsupportedModelError(
            f"node '{node.name}' (pad): only constant padding has a gradient rule, "
            f"not mode '{node.attrs['mode']}'"
        )
    x = node.inputs[0]
    shape = e.shape(x)
    r = len(shape)
    pads = node.attrs["pads"]
    starts = [max(0, pads[i]) for i in range(r)]
    ends = [starts[i] + shape[i] for i in range(r)]
    if any(p < 0 for p in pads):
        from anekit.errors import UnsupportedModelError

        raise UnsupportedModelError(f"node '{node.name}' (pad): negative pads have no rule")
    return [e("slice", gys[0], starts=starts, ends=ends, axes=tuple(range(r)))]
