"""Gradients of gather (embedding lookups) and gather_elements: scatter-add back."""

from __future__ import annotations

import numpy as np

from anekit.ir.ops._infer import normalize_axis
from anekit.train.emit import Emitter
from anekit.train.vjp import rule


def _positive(e: Emitter, idx: str, dim: int) -> str:
    """Indices with negative entries wrapped (gather accepts them, scatter may not)."""
    zero = e.scalar(0, idx)
    return e("where", e("less", idx, zero), e.add(idx, e.scalar(dim, idx)), idx)


@rule("gather")
def _gather(e: Emitter, node, gys):
    (g,) = gys
    x, idx = node.inputs
    shape = e.shape(x)
    axis = normalize_axis(node.attrs["axis"], len(shape))
    # move the gathered axis first: x' [D, rest...], g' [*idx, rest...]
    perm = (axis, *[i for i in range(len(shape)) if i != axis])
    moved = tuple(shape[i] for i in perm)
    ir = e.rank(idx)
    gperm = (*range(axis, axis + ir), *range(axis), *range(axis + ir, e.rank(g)))
    gm = e.transpose(g, gperm)
    index = e.reshape(_positive(e, idx, shape[axis]), (*e.shape(idx), 1))
    zeros = e.const(np.zeros(moved, e.ed.values[g].dtype.numpy))
    summed = e("scatter_nd", zeros, index, gm, reduction="add")
    return [e.transpose(summed, tuple(int(i) for i in np.argsort(perm))), None]


@rule("gather_elements")
def _gather_elements(e: Emitter, node, gys):
    (g,) = gys
    x, idx = node.inputs
    shape = e.shape(x)
    axis = normalize_axis(node.attrs["axis"], len(shape))
    zeros = e.const(np.zeros(shape, e.ed.values[g].dtype.numpy))
    index = _positive(e, idx, shape[axis])
    return [e("scatter_elements", zeros, index, g, axis=axis, reduction="add"), None]
