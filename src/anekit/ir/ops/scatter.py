"""Indexed reads and writes: gather_nd, scatter_elements, scatter_nd, one_hot."""

from __future__ import annotations

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types, index_dtype_only, normalize_axis, numel
from anekit.ir.registry import Attr, InferError, KernelError, TensorType, declare

REDUCTIONS = ("none", "add", "mul", "max", "min")
_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _wrap(indices: np.ndarray, dims: np.ndarray | int) -> np.ndarray:
    """Negative indices count from the end; out-of-range ones are an error (as onnxruntime)."""
    idx = np.where(indices < 0, indices + dims, indices).astype(np.int64)
    if idx.size and (idx.min() < 0 or (idx >= dims).any()):
        raise KernelError(f"index out of range for dimension(s) {np.asarray(dims).tolist()}")
    return idx


# --- gather_nd ------------------------------------------------------------------------------


def _gather_nd_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    data, idx = ins
    index_dtype_only(idx)
    b = attrs["batch_dims"]
    if idx.rank < 1 or b < 0 or b >= min(data.rank, idx.rank):
        raise InferError(f"batch_dims {b} must be below both ranks ({data.rank}, {idx.rank})")
    if data.shape[:b] != idx.shape[:b]:
        raise InferError(
            f"the first {b} dims of data {list(data.shape)} and indices {list(idx.shape)} differ"
        )
    depth = idx.shape[-1]
    if depth > data.rank - b:
        raise InferError(f"indices address {depth} axes, data has {data.rank - b} after the batch")
    shape = idx.shape[:-1] + data.shape[b + depth :]
    return [TensorType(shape, data.dtype)]


@declare(
    "gather_nd",
    inputs=("x", "indices"),
    attrs=(Attr("batch_dims", "int", 0),),
    infer=_gather_nd_infer,
)
def gather_nd(x, indices, batch_dims):
    """slices of x addressed by the last axis of indices (after batch_dims shared axes)"""
    b = batch_dims
    depth = indices.shape[-1]
    batch = numel(x.shape[:b])
    xb = x.reshape((batch,) + x.shape[b:])
    ib = _wrap(indices.reshape(batch, -1, depth), np.asarray(x.shape[b : b + depth]))
    rows = np.arange(batch)[:, None]
    out = xb[(rows, *(ib[..., k] for k in range(depth)))]
    return out.reshape(indices.shape[:-1] + x.shape[b + depth :])


# --- scatters -------------------------------------------------------------------------------


def _scatter_elements_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    data, idx, upd = ins
    index_dtype_only(idx)
    normalize_axis(attrs["axis"], data.rank)
    if idx.shape != upd.shape or idx.rank != data.rank:
        raise InferError(
            f"indices {list(idx.shape)} and updates {list(upd.shape)} must match, "
            f"with the rank of data ({data.rank})"
        )
    if upd.dtype != data.dtype:
        raise InferError(f"updates are {upd.dtype}, data is {data.dtype}")
    return [data]


def _apply(out: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        out[where] = updates  # repeated indices: the last update wins
    else:
        _UFUNC[reduction].at(out, where, updates)
    return out


@declare(
    "scatter_elements",
    inputs=("x", "indices", "updates"),
    attrs=(Attr("axis", "int", 0), Attr("reduction", "str", "none", choices=REDUCTIONS)),
    infer=_scatter_elements_infer,
)
def scatter_elements(x, indices, updates, axis, reduction):
    """x with x[..., indices[i, j, ...], ...] (along axis) set or reduced with updates[i, j, ...]"""
    axis = axis % x.ndim
    idx = _wrap(indices, x.shape[axis])
    grids = list(np.meshgrid(*(np.arange(d) for d in indices.shape), indexing="ij"))
    grids[axis] = idx
    return _apply(x.copy(), tuple(grids), updates, reduction)


def _scatter_nd_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    data, idx, upd = ins
    index_dtype_only(idx)
    depth = idx.shape[-1] if idx.rank else 0
    if idx.rank < 1 or depth > data.rank:
        raise InferError(f"indices {list(idx.shape)} cannot address data of rank {data.rank}")
    want = idx.shape[:-1] + data.shape[depth:]
    if upd.shape != want:
        raise InferError(f"updates have shape {list(upd.shape)}, expected {list(want)}")
    if upd.dtype != data.dtype:
        raise InferError(f"updates are {upd.dtype}, data is {data.dtype}")
    return [data]


@declare(
    "scatter_nd",
    inputs=("x", "indices", "updates"),
    attrs=(Attr("reduction", "str", "none", choices=REDUCTIONS),),
    infer=_scatter_nd_infer,
)
def scatter_nd(x, indices, updates, reduction):
    """x with the slices addressed by the last axis of indices set or reduced with updates"""
    depth = indices.shape[-1]
    idx = _wrap(indices, np.asarray(x.shape[:depth]))
    where = tuple(idx[..., k] for k in range(depth))
    return _apply(x.copy(), where, updates, reduction)


# --- one_hot --------------------------------------------------------------------------------


def _one_hot_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    idx, values = ins
    if values.numel != 2:
        raise InferError(f"values must hold [off, on], got shape {list(values.shape)}")
    if attrs["depth"] <= 0:
        raise InferError(f"depth must be positive, got {attrs['depth']}")
    if idx.dtype is DType.BOOL:
        raise InferError("indices must be numeric, got bool")
    axis = normalize_axis(attrs["axis"], idx.rank + 1)
    shape = idx.shape[:axis] + (attrs["depth"],) + idx.shape[axis:]
    return [TensorType(shape, values.dtype)]


@declare(
    "one_hot",
    inputs=("indices", "values"),
    attrs=(Attr("depth", "int"), Attr("axis", "int", -1)),
    infer=_one_hot_infer,
)
def one_hot(indices, values, depth, axis):
    """values[1] where the new axis equals the index (negatives count from depth), else values[0]"""
    axis = axis % (indices.ndim + 1)
    idx = np.trunc(indices).astype(np.int64) if indices.dtype.kind == "f" else indices
    idx = np.where(idx < 0, idx + depth, idx)
    classes = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    hot = np.expand_dims(idx, axis) == classes
    off, on = values.reshape(-1)
    return np.where(hot, on, off).astype(values.dtype)
