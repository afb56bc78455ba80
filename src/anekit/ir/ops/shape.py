"""Data movement: reshape, transpose, concat, split, slice, gather, expand, tile, pad, trilu."""

from __future__ import annotations

import numpy as np

from anekit.ir.ops._infer import (
    Attrs,
    Types,
    broadcast_shapes,
    index_dtype_only,
    normalize_axes,
    normalize_axis,
    numel,
)
from anekit.ir.registry import Attr, InferError, KernelError, TensorType, declare


def _reshape_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    shape = attrs["shape"]
    if any(d < 0 for d in shape):
        raise InferError(f"reshape target {list(shape)} must be fully static (no -1)")
    if numel(shape) != x.numel:
        raise InferError(f"cannot reshape {list(x.shape)} ({x.numel} elements) to {list(shape)}")
    return [TensorType(tuple(shape), x.dtype)]


@declare(
    "reshape",
    inputs=("x",),
    attrs=(Attr("shape", "ints"),),
    infer=_reshape_infer,
    layer_type="reshape",
)
def reshape(x, shape):
    """the same elements, row-major, in a new static shape"""
    return x.reshape(shape)


def _transpose_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    perm = attrs["perm"]
    if sorted(perm) != list(range(x.rank)):
        raise InferError(f"perm {list(perm)} is not a permutation of the {x.rank} axes")
    return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]


@declare(
    "transpose",
    inputs=("x",),
    attrs=(Attr("perm", "ints"),),
    infer=_transpose_infer,
    layer_type="transpose",
)
def transpose(x, perm):
    """permute axes: output axis i is input axis perm[i]"""
    return np.transpose(x, perm)


def _concat_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    first = ins[0]
    axis = normalize_axis(attrs["axis"], first.rank)
    total = 0
    for t in ins:
        if t.rank != first.rank or t.dtype != first.dtype:
            raise InferError(f"inputs differ in rank or dtype: {first} vs {t}")
        if any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True)) if i != axis
        ):
            raise InferError(
                f"inputs differ outside axis {axis}: {list(first.shape)} vs {list(t.shape)}"
            )
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return [TensorType(tuple(shape), first.dtype)]


@declare(
    "concat",
    inputs=("xs*",),
    attrs=(Attr("axis", "int"),),
    infer=_concat_infer,
    layer_type="concat",
)
def concat(*xs, axis):
    """join tensors along axis"""
    return np.concatenate(xs, axis=axis)


def _split_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    axis = normalize_axis(attrs["axis"], x.rank)
    sizes = attrs["sizes"]
    if sum(sizes) != x.shape[axis] or any(s < 0 for s in sizes):
        raise InferError(
            f"split sizes {list(sizes)} do not add up to dim {x.shape[axis]} of axis {axis}"
        )
    outs = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        outs.append(TensorType(tuple(shape), x.dtype))
    return outs


@declare(
    "split",
    inputs=("x",),
    outputs=("ys*",),
    attrs=(Attr("axis", "int"), Attr("sizes", "ints")),
    infer=_split_infer,
    num_outputs=lambda attrs, n: len(attrs["sizes"]),
)
def split(x, axis, sizes):
    """cut along axis into pieces of the given sizes"""
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int, int]:
    """ONNX Slice clamping; returns (start, end, length) with end=-1 meaning 'before index 0'."""
    if step == 0:
        raise InferError("slice step cannot be 0")
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        length = max(0, -(-(end - start) // step))
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        length = max(0, -(-(start - end) // -step))
    return start, end, length


def slice_params(rank: int, attrs: Attrs) -> list[tuple[int, int, int, int]]:
    starts, ends = attrs["starts"], attrs["ends"]
    axes = attrs["axes"] or tuple(range(len(starts)))
    steps = attrs["steps"] or (1,) * len(starts)
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        raise InferError("starts, ends, axes and steps must have the same length")
    return list(zip(normalize_axes(axes, rank), starts, ends, steps, strict=True))


def _slice_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    shape = list(x.shape)
    for axis, start, end, step in slice_params(x.rank, attrs):
        shape[axis] = slice_bounds(x.shape[axis], start, end, step)[2]
    return [TensorType(tuple(shape), x.dtype)]


@declare(
    "slice",
    layer_type="texture",
    inputs=("x",),
    attrs=(
        Attr("starts", "ints"),
        Attr("ends", "ints"),
        Attr("axes", "ints", ()),
        Attr("steps", "ints", ()),
    ),
    infer=_slice_infer,
)
def slice_(x, starts, ends, axes, steps):
    """x[start:end:step] per listed axis (ONNX clamping rules)"""
    index = [slice(None)] * x.ndim
    attrs = {"starts": starts, "ends": ends, "axes": axes, "steps": steps}
    for axis, start, end, step in slice_params(x.ndim, attrs):
        s, e, _ = slice_bounds(x.shape[axis], start, end, step)
        index[axis] = slice(s, e if e >= 0 else None, step)
    return x[tuple(index)]


def _gather_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, idx = ins
    index_dtype_only(idx)
    axis = normalize_axis(attrs["axis"], x.rank)
    return [TensorType(x.shape[:axis] + idx.shape + x.shape[axis + 1 :], x.dtype)]


@declare(
    "gather",
    inputs=("x", "indices"),
    attrs=(Attr("axis", "int", 0),),
    infer=_gather_infer,
    no_engine_form="an embedding or index lookup",
)
def gather(x, indices, axis):
    """take entries of x along axis at indices (negative indices count from the end)"""
    axis = axis % x.ndim
    dim = x.shape[axis]
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        raise KernelError(f"gather index out of range [-{dim}, {dim}) on axis {axis}")
    return np.take(x, np.where(indices < 0, indices + dim, indices), axis=axis)


def _gather_elements_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, idx = ins
    index_dtype_only(idx)
    if idx.rank != x.rank:
        raise InferError("indices must have the rank of the data")
    normalize_axis(attrs["axis"], x.rank)
    return [TensorType(idx.shape, x.dtype)]


@declare(
    "gather_elements",
    inputs=("x", "indices"),
    attrs=(Attr("axis", "int", 0),),
    infer=_gather_elements_infer,
    no_engine_form="an index lookup",
)
def gather_elements(x, indices, axis):
    """out[i][j][k] = x[index along axis][...] (numpy take_along_axis)"""
    axis = axis % x.ndim
    dim = x.shape[axis]
    return np.take_along_axis(x, np.where(indices < 0, indices + dim, indices), axis=axis)


def _expand_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    return [TensorType(broadcast_shapes(x.shape, attrs["shape"]), x.dtype)]


@declare("expand", inputs=("x",), attrs=(Attr("shape", "ints"),), infer=_expand_infer)
def expand(x, shape):
    """broadcast x against shape (both ways, as ONNX Expand)"""
    return np.broadcast_to(x, broadcast_shapes(x.shape, shape)).copy()


def _tile_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    reps = attrs["repeats"]
    if len(reps) != x.rank or any(r < 0 for r in reps):
        raise InferError(
            f"repeats {list(reps)} must give one non-negative count per axis ({x.rank})"
        )
    return [TensorType(tuple(d * r for d, r in zip(x.shape, reps, strict=True)), x.dtype)]


@declare("tile", inputs=("x",), attrs=(Attr("repeats", "ints"),), infer=_tile_infer)
def tile(x, repeats):
    """repeat x along each axis"""
    return np.tile(x, repeats)


def _pad_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    pads = attrs["pads"]
    if len(pads) != 2 * x.rank:
        raise InferError(f"pads has {len(pads)} entries; expected 2 x rank = {2 * x.rank}")
    shape = tuple(d + pads[i] + pads[i + x.rank] for i, d in enumerate(x.shape))
    if any(d < 0 for d in shape):
        raise InferError(f"pads {list(pads)} remove more than the tensor holds")
    if attrs["mode"] in ("reflect", "edge", "wrap"):
        for i, d in enumerate(x.shape):
            if d == 0 and (pads[i] or pads[i + x.rank]):
                raise InferError(f"cannot {attrs['mode']}-pad an empty axis {i}")
    return [TensorType(shape, x.dtype)]


@declare(
    "pad",
    layer_type="texture",
    inputs=("x",),
    attrs=(
        Attr("pads", "ints", doc="begin pads for every axis, then end pads (negative crops)"),
        Attr("mode", "str", "constant", choices=("constant", "reflect", "edge", "wrap")),
        Attr("value", "float", 0.0),
    ),
    infer=_pad_infer,
)
def pad(x, pads, mode, value):
    """pad (or crop, with negative pads) every axis"""
    r = x.ndim
    begins, ends = pads[:r], pads[r:]
    crop = tuple(
        slice(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(begins, ends, x.shape, strict=True)
    )
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends, strict=True)]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=np.asarray(value).astype(x.dtype))
    return np.pad(x, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])


def _trilu_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    if ins[0].rank < 2:
        raise InferError("trilu needs rank >= 2")
    return [ins[0]]


@declare(
    "trilu",
    inputs=("x",),
    attrs=(Attr("upper", "bool", True), Attr("k", "int", 0)),
    infer=_trilu_infer,
)
def trilu(x, upper, k):
    """keep the upper (or lower) triangle of the last two axes from diagonal k"""
    return np.triu(x, k) if upper else np.tril(x, k)
