"""Gather and scatter MIL ops: gather (with batch_dims), gather_along_axis, gather_nd, scatter family.

Indices may be negative (counted from the end, ``-D <= i < D``); any index outside that range
is an error here, whatever ``validate_indices`` says (the definition leaves the result
undefined, so the simulator refuses rather than invent one). Scatter modes: ``update``,
``add``, ``sub``, ``mul``, ``div``, ``max``, ``min`` (default ``add``), applied one update at
a time so repeated indices accumulate.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..registry import NUMERIC, SimOp, op
from ._util import as_int, as_str, axis_of

_DATA = "fp16|fp32|int32|int16|uint16|int8|uint8"
_INDICES = "int32|int16|uint16|int8|uint8"


def _indices(indices: np.ndarray, size: int, what: str = "indices") -> np.ndarray:
    """Indices made non-negative, after checking each lies in [-size, size)."""
    idx = np.asarray(indices).astype(np.int64)
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise ValueError(
            f"{what} in [{int(idx.min())}, {int(idx.max())}] are out of range for a dimension "
            f"of size {size}"
        )
    return np.where(idx < 0, idx + size, idx)


def gather(
    x: np.ndarray,
    indices: np.ndarray,
    axis: Any = 0,
    batch_dims: Any = 0,
    validate_indices: Any = False,
) -> np.ndarray:
    ax = axis_of(as_int(axis), x.ndim)
    b = as_int(batch_dims)
    if not 0 <= b <= min(ax, indices.ndim) or x.shape[:b] != indices.shape[:b]:
        raise ValueError(f"batch_dims {b} does not fit x {list(x.shape)} and indices")
    idx = _indices(indices, x.shape[ax])
    if b == 0:
        return _stored(np.take(x, idx, axis=ax))
    batch = x.shape[:b]
    xs = x.reshape((-1,) + x.shape[b:])
    ids = idx.reshape((-1,) + idx.shape[b:])
    parts = [np.take(p, i, axis=ax - b) for p, i in zip(xs, ids, strict=True)]
    stacked = np.stack(parts) if parts else np.empty((0,), x.dtype)
    return _stored(stacked.reshape(batch + stacked.shape[1:]))


def _stored(rows: np.ndarray) -> np.ndarray:
    """Rows of a table held as fp16 (a model's embedding: `plan.HALF_CONSUMERS`) in the
    simulator's storage of fp16 values, float32; anything else as it is."""
    return rows.astype(np.float32) if rows.dtype == np.float16 else rows


def gather_along_axis(
    x: np.ndarray, indices: np.ndarray, axis: Any = 0, validate_indices: Any = False
) -> np.ndarray:
    ax = axis_of(as_int(axis), x.ndim)
    if indices.ndim != x.ndim or any(
        i != ax and a != b for i, (a, b) in enumerate(zip(x.shape, indices.shape, strict=True))
    ):
        raise ValueError(
            f"indices {list(indices.shape)} must match x {list(x.shape)} except on axis {ax}"
        )
    return np.take_along_axis(x, _indices(indices, x.shape[ax]), axis=ax)


def gather_nd(
    x: np.ndarray, indices: np.ndarray, batch_dims: Any = 0, validate_indices: Any = False
) -> np.ndarray:
    b = as_int(batch_dims)
    if (
        indices.ndim < 1
        or b < 0
        or indices.shape[-1] + b > x.ndim
        or x.shape[:b] != indices.shape[:b]
    ):
        raise ValueError(f"indices {list(indices.shape)} do not fit x {list(x.shape)}")
    depth = indices.shape[-1]
    batch = x.shape[:b]
    xs = x.reshape((-1,) + x.shape[b:])
    ids = indices.reshape((-1,) + indices.shape[b:])
    parts = []
    for p, i in zip(xs, ids, strict=True):
        cols = tuple(_indices(i[..., d], p.shape[d]) for d in range(depth))
        parts.append(p[cols])
    stacked = np.stack(parts)
    return stacked.reshape(batch + stacked.shape[1:])


_MODES = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
}


def _apply(out: np.ndarray, where: tuple[Any, ...], updates: np.ndarray, mode: str) -> None:
    if mode == "update":
        out[where] = updates
    elif mode in _MODES:
        ufunc = _MODES[mode]
        if mode == "div" and out.dtype.kind != "f":
            ufunc = np.floor_divide
        _accumulate(out, where, updates, ufunc)
    else:
        raise ValueError(f"mode {mode!r} is not one of update, {', '.join(_MODES)}")


ROUNDS_MAX = 64  # a target hit more often than this: ufunc.at's own loop


def _accumulate(out: np.ndarray, where: tuple[Any, ...], updates: np.ndarray, ufunc: Any) -> None:
    """``ufunc.at(out, where, updates)``: each target updated by its updates in their order.
    ufunc.at runs element by element (0.6 ms for an embedding gradient's 512 rows); here the
    updates go in rounds, the k-th update of every target in round k, so no target occurs
    twice in a round and one fancy-indexed ufunc applies the round: the same operations on
    every element, in the same order."""
    lead = np.broadcast_shapes(*(np.shape(w) for w in where))
    n = math.prod(lead)
    if out.dtype != updates.dtype or n == 0 or updates.shape[: len(lead)] != lead:
        ufunc.at(out, where, updates)
        return
    flat = tuple(np.broadcast_to(w, lead).reshape(-1) for w in where)
    keys = np.ravel_multi_index(flat, out.shape[: len(flat)])
    order = np.argsort(keys, kind="stable")  # each target's updates together, in order
    ordered = keys[order]
    first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    rank = np.arange(n) - np.repeat(first, np.diff(np.r_[first, n]))
    if rank.max() >= ROUNDS_MAX:
        ufunc.at(out, where, updates)
        return
    values = updates.reshape((n, *updates.shape[len(lead) :]))
    for k in range(int(rank.max()) + 1):
        chosen = order[rank == k]
        target = tuple(f[chosen] for f in flat)
        out[target] = ufunc(out[target], values[chosen])


def scatter(
    data: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    axis: Any = 0,
    mode: Any = "add",
    validate_indices: Any = False,
) -> np.ndarray:
    ax = axis_of(as_int(axis), data.ndim)
    if indices.ndim != 1:
        raise ValueError("indices must be 1-D")
    want = data.shape[:ax] + indices.shape + data.shape[ax + 1 :]
    if updates.shape != want:
        raise ValueError(f"updates has shape {list(updates.shape)}, expected {list(want)}")
    out = data.copy()
    idx = _indices(indices, data.shape[ax])
    moved = np.moveaxis(out, ax, 0)
    _apply(moved, (idx,), np.moveaxis(updates, ax, 0), as_str(mode))
    return out


def scatter_along_axis(
    data: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    axis: Any = 0,
    mode: Any = "add",
    validate_indices: Any = False,
) -> np.ndarray:
    ax = axis_of(as_int(axis), data.ndim)
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise ValueError("indices and updates must have one shape, of data's rank")
    if any(
        i != ax and a != b for i, (a, b) in enumerate(zip(data.shape, indices.shape, strict=True))
    ):
        raise ValueError(f"indices {list(indices.shape)} must match data except on axis {ax}")
    out = data.copy()
    idx = _indices(indices, data.shape[ax])
    grid = list(np.indices(indices.shape, sparse=True))
    grid[ax] = idx
    _apply(out, tuple(grid), updates, as_str(mode))
    return out


def scatter_nd(
    data: np.ndarray,
    indices: np.ndarray,
    updates: np.ndarray,
    mode: Any = "add",
    validate_indices: Any = False,
) -> np.ndarray:
    depth = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or depth > data.ndim:
        raise ValueError(f"indices {list(indices.shape)} do not fit data {list(data.shape)}")
    want = indices.shape[:-1] + data.shape[depth:]
    if updates.shape != want:
        raise ValueError(f"updates has shape {list(updates.shape)}, expected {list(want)}")
    out = data.copy()
    cols = tuple(_indices(indices[..., d], data.shape[d]) for d in range(depth))
    _apply(out, cols, updates, as_str(mode))
    return out


_VALIDATE = " validate_indices?!:bool"

OPS: tuple[SimOp, ...] = (
    op("gather", "x:T indices:I axis?!:int32 batch_dims?!:int32" + _VALIDATE, "T", gather,
       exact=True, T=_DATA, I=_INDICES),
    op("gather_along_axis", "x:T indices:I axis?!:int32" + _VALIDATE, "T", gather_along_axis,
       exact=True, T=_DATA, I=_INDICES),
    op("gather_nd", "x:T indices:I batch_dims?!:int32" + _VALIDATE, "T", gather_nd,
       exact=True, T=_DATA, I=_INDICES),
    op("scatter", "data:T indices:int32 updates:T axis?!:int32 mode?!:string" + _VALIDATE,
       "T", scatter, T=NUMERIC),
    op("scatter_along_axis", "data:T indices:int32 updates:T axis?!:int32 mode?!:string"
       + _VALIDATE, "T", scatter_along_axis, T=NUMERIC),
    op("scatter_nd", "data:T indices:int32 updates:T mode?!:string" + _VALIDATE, "T",
       scatter_nd, T=NUMERIC),
)  # fmt: skip
