"""Sampling an N-d image at given normalised coordinates (grid_sample, as ONNX and torch)."""

from __future__ import annotations

import itertools

import numpy as np

from anekit.ir.ops._infer import Attrs, Types, float_only
from anekit.ir.registry import Attr, InferError, TensorType, declare

_CUBIC_A = -0.75


def _grid_sample_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, grid = ins
    float_only(ins, (0, 1))
    sp = x.rank - 2
    if sp < 1 or grid.rank != x.rank or grid.shape[0] != x.shape[0] or grid.shape[-1] != sp:
        raise InferError(
            f"grid must be [N, out..., {max(sp, 0)}] for input {list(x.shape)}, got {list(grid.shape)}"
        )
    if attrs["mode"] == "cubic" and sp != 2:
        raise InferError("cubic grid sampling is defined for 2-d images only")
    return [TensorType((*x.shape[:2], *grid.shape[1:-1]), x.dtype)]


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold coordinates into [lo, hi] by mirroring at the borders."""
    span = hi - lo
    if span <= 0:
        return np.zeros_like(x)
    d = np.where(x < lo, lo - x, x - hi)
    n = np.floor(d / span)
    r = d - n * span
    even = (n % 2) == 0
    below = np.where(even, lo + r, hi - r)
    above = np.where(even, hi - r, lo + r)
    return np.where(x < lo, below, np.where(x > hi, above, x))


def _taps(x: np.ndarray, mode: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Integer tap positions and their weights for one axis."""
    if mode == "nearest":  # x is already rounded
        return [x.astype(np.int64)], [np.ones_like(x)]
    base = np.floor(x)
    t = x - base
    base = base.astype(np.int64)
    if mode == "linear":
        return [base, base + 1], [1 - t, t]
    a = _CUBIC_A
    d = [t + 1, t, 1 - t, 2 - t]  # distances to taps base-1 .. base+2
    w = [
        ((a * d[0] - 5 * a) * d[0] + 8 * a) * d[0] - 4 * a,
        ((a + 2) * d[1] - (a + 3)) * d[1] * d[1] + 1,
        ((a + 2) * d[2] - (a + 3)) * d[2] * d[2] + 1,
        ((a * d[3] - 5 * a) * d[3] + 8 * a) * d[3] - 4 * a,
    ]
    return [base - 1, base, base + 1, base + 2], w


@declare(
    "grid_sample",
    inputs=("x", "grid"),
    attrs=(
        Attr("mode", "str", "linear", choices=("linear", "nearest", "cubic")),
        Attr("padding_mode", "str", "zeros", choices=("zeros", "border", "reflection")),
        Attr("align_corners", "bool", False),
    ),
    infer=_grid_sample_infer,
    kind="resize",
)
def grid_sample(x, grid, mode, padding_mode, align_corners):
    """x sampled at grid's [-1, 1] coordinates (last grid axis: x, y, ... = the reversed axes)"""
    n, c = x.shape[:2]
    dims = x.shape[2:]
    sp = len(dims)
    out = grid.shape[1:-1]
    batch = np.arange(n).reshape((n,) + (1,) * len(out))
    per_axis = []
    for i, d in enumerate(dims):
        g = grid[..., sp - 1 - i].astype(np.float64)
        pos = (g + 1) / 2 * (d - 1) if align_corners else ((g + 1) * d - 1) / 2
        lo, hi = (0.0, d - 1.0) if align_corners else (-0.5, d - 0.5)
        if mode == "nearest":  # round half to even first, as torch
            pos = np.rint(pos)
        if padding_mode == "border" and mode != "cubic":  # cubic clamps its taps instead
            pos = np.where((pos < lo) | (pos > hi), np.clip(pos, 0, d - 1), pos)
        elif padding_mode == "reflection":
            pos = _reflect(pos, lo, hi)
        per_axis.append(_taps(pos, mode))
    y = np.zeros((n, *out, c), dtype=np.float32)
    for choice in itertools.product(*(range(len(t[0])) for t in per_axis)):
        weight = np.ones((n, *out), dtype=np.float64)
        index, inside = [], np.ones((n, *out), dtype=bool)
        for i, k in enumerate(choice):
            taps, weights = per_axis[i]
            idx = taps[k]
            weight = weight * weights[k]
            d = dims[i]
            if padding_mode == "zeros":
                inside &= (idx >= 0) & (idx < d)
            elif padding_mode == "reflection":  # taps that leave the image mirror back
                lo, hi = (0.0, d - 1.0) if align_corners else (-0.5, d - 0.5)
                idx = _reflect(idx.astype(np.float64), lo, hi).astype(np.int64)
            index.append(np.clip(idx, 0, d - 1))
        picked = x[(batch, slice(None), *index)]  # split advanced indices go first: [n, out..., c]
        y += np.where(inside[..., None], picked * weight[..., None].astype(np.float32), 0)
    return np.moveaxis(y, -1, 1)
