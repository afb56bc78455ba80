"""Converters for shape and data-movement ops, and for the shape sub-graph ops folded at import."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter


def resolve_reshape(
    in_shape: tuple[int, ...], target: tuple[int, ...], allowzero: bool
) -> tuple[int, ...]:
    """ONNX Reshape semantics: 0 copies the input dim (unless allowzero), one -1 is inferred."""
    for i, d in enumerate(target):
        if d < -1 or (d == 0 and not allowzero and i >= len(in_shape)):
            raise ModelError(
                f"reshape target {list(target)}: dimension {i} ({d}) is neither a size, -1, nor "
                f"a 0 copying one of the input's {len(in_shape)} dimensions"
            )
    out = [in_shape[i] if (d == 0 and not allowzero) else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise ModelError(f"reshape target {list(target)} has more than one -1")
    total = int(np.prod(in_shape, dtype=np.int64))
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise ModelError(f"cannot reshape {list(in_shape)} to {list(target)}")
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total:
        raise ModelError(f"cannot reshape {list(in_shape)} ({total} elements) to {list(target)}")
    return tuple(out)


@converter("Reshape")
def reshape(cx: NodeContext):
    if cx.opset < 5:
        target = tuple(cx.attr("shape"))
    else:
        target = cx.ints_input(1, "shape")
    shape = resolve_reshape(cx.shape(0), target, bool(cx.attr("allowzero", 0)))
    return cx.emit("reshape", [cx.input(0)], {"shape": shape}, final=True)


@converter("Flatten")
def flatten(cx: NodeContext):
    shape = cx.shape(0)
    axis = cx.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise ModelError(f"axis {cx.attr('axis', 1)} out of range for rank {len(shape)}")
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    return cx.emit(
        "reshape",
        [cx.input(0)],
        {"shape": (rows, int(np.prod(shape[axis:], dtype=np.int64)))},
        final=True,
    )


def _axes(cx: NodeContext, attr_until: int) -> tuple[int, ...] | None:
    if cx.opset < attr_until:
        axes = cx.attr("axes", None)
        return None if axes is None else tuple(axes)
    return cx.ints_input(1, "axes", optional=True)


@converter("Squeeze")
def squeeze(cx: NodeContext):
    shape = cx.shape(0)
    axes = _axes(cx, 13)
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = {a % len(shape) for a in axes}
        bad = [a for a in drop if shape[a] != 1]
        if bad:
            raise ModelError(f"cannot squeeze axes {bad} of shape {list(shape)}: they are not 1")
    return cx.emit(
        "reshape",
        [cx.input(0)],
        {"shape": tuple(d for i, d in enumerate(shape) if i not in drop)},
        final=True,
    )


@converter("Unsqueeze")
def unsqueeze(cx: NodeContext):
    shape = cx.shape(0)
    axes = _axes(cx, 13)
    if axes is None:
        raise ModelError("Unsqueeze needs axes")
    rank = len(shape) + len(axes)
    pos = {a % rank for a in axes}
    if len(pos) != len(axes):
        raise ModelError(f"Unsqueeze axes {list(axes)} repeat an axis")
    it = iter(shape)
    out = tuple(1 if i in pos else next(it) for i in range(rank))
    return cx.emit("reshape", [cx.input(0)], {"shape": out}, final=True)


@converter("Transpose")
def transpose(cx: NodeContext):
    rank = len(cx.shape(0))
    perm = tuple(cx.attr("perm", tuple(reversed(range(rank)))))
    return cx.emit("transpose", [cx.input(0)], {"perm": perm}, final=True)


@converter("Concat")
def concat(cx: NodeContext):
    ins = [i for i in cx.inputs() if i is not None]
    return cx.emit("concat", ins, {"axis": cx.attr("axis")}, final=True)


@converter("Split")
def split(cx: NodeContext):
    shape = cx.shape(0)
    axis = cx.attr("axis", 0) % len(shape)
    dim = shape[axis]
    n_out = len(cx.node.output)
    if cx.opset < 13:
        sizes = cx.attr("split", None)
    else:
        sizes = cx.ints_input(1, "split", optional=True)
    if sizes is None:
        if cx.opset >= 18 and cx.has_attr("num_outputs"):
            n_out = cx.attr("num_outputs")
        chunk = -(-dim // n_out)
        sizes = tuple(min(chunk, max(dim - k * chunk, 0)) for k in range(n_out))
    sizes = tuple(int(s) for s in sizes)
    outs = cx.emit("split", [cx.input(0)], {"axis": axis, "sizes": sizes}, final=True)
    return outs if isinstance(outs, tuple) else (outs,)


@converter("Slice")
def slice_(cx: NodeContext):
    if cx.opset < 10:
        starts, ends = tuple(cx.attr("starts")), tuple(cx.attr("ends"))
        axes = tuple(cx.attr("axes", ()))
        steps: tuple[int, ...] = ()
    else:
        starts = cx.ints_input(1, "starts")
        ends = cx.ints_input(2, "ends")
        axes = cx.ints_input(3, "axes", default=())
        steps = cx.ints_input(4, "steps", default=())
    attrs = {"starts": starts, "ends": ends, "axes": axes, "steps": steps}
    return cx.emit("slice", [cx.input(0)], attrs, final=True)


def _check_constant_indices(cx: NodeContext) -> None:
    """Constant indices must lie in [-dim, dim) of the data's axis (onnxruntime refuses the
    model otherwise); checked here, where the message can name the user's node."""
    indices = cx.const(1)
    rank = len(cx.shape(0))
    axis = cx.attr("axis", 0)
    if indices is None or indices.size == 0 or not -rank <= axis < rank:
        return  # data-dependent, empty, or a bad axis (inference reports that)
    dim = cx.shape(0)[axis]
    low, high = int(indices.min()), int(indices.max())
    if low < -dim or high >= dim:
        bad = low if low < -dim else high
        raise ModelError(
            f"index {bad} is out of range for axis {axis} of size {dim} "
            f"(indices must lie in [{-dim}, {dim - 1}])"
        )


@converter("Gather")
def gather(cx: NodeContext):
    _check_constant_indices(cx)
    return cx.emit("gather", [cx.input(0), cx.input(1)], {"axis": cx.attr("axis", 0)}, final=True)


@converter("GatherElements")
def gather_elements(cx: NodeContext):
    _check_constant_indices(cx)
    return cx.emit(
        "gather_elements", [cx.input(0), cx.input(1)], {"axis": cx.attr("axis", 0)}, final=True
    )


@converter("Expand")
def expand(cx: NodeContext):
    shape = cx.ints_input(1, "shape")
    return cx.emit("expand", [cx.input(0)], {"shape": shape}, final=True)


@converter("Tile")
def tile(cx: NodeContext):
    return cx.emit("tile", [cx.input(0)], {"repeats": cx.ints_input(1, "repeats")}, final=True)


@converter("Pad")
def pad(cx: NodeContext):
    rank = len(cx.shape(0))
    mode = cx.attr("mode", "constant")
    if cx.opset < 11:
        pads = tuple(cx.attr("pads"))
        value = cx.attr("value", 0.0)
    else:
        pads = cx.ints_input(1, "pads")
        value_arr = cx.const(2) if cx.input(2) is not None else None
        if cx.input(2) is not None and value_arr is None:
            raise ModelError("Pad's constant_value must be a constant")
        value = float(value_arr.reshape(-1)[0]) if value_arr is not None and value_arr.size else 0.0
        axes = cx.ints_input(3, "axes", optional=True) if cx.opset >= 18 else None
        if axes is not None:
            axes = tuple(a % rank for a in axes)
            full = [0] * (2 * rank)
            for k, a in enumerate(axes):
                full[a], full[a + rank] = pads[k], pads[k + len(axes)]
            pads = tuple(full)
    return cx.emit("pad", [cx.input(0)], {"pads": pads, "mode": mode, "value": value}, final=True)


@converter("Trilu")
def trilu(cx: NodeContext):
    k = cx.ints_input(1, "k", default=(0,))[0]
    return cx.emit("trilu", [cx.input(0)], {"upper": cx.attr("upper", 1), "k": k}, final=True)


# --- ops that are only ever constants once shapes are static --------------------------------


@converter("Shape")
def shape(cx: NodeContext):
    dims = cx.shape(0)
    rank = len(dims)
    start = cx.attr("start", 0)
    end = cx.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return cx.constant(np.asarray(dims[start:end], dtype=np.int64), "shape")


@converter("Size")
def size(cx: NodeContext):
    return cx.constant(
        np.asarray(int(np.prod(cx.shape(0), dtype=np.int64)), dtype=np.int64), "size"
    )


@converter("Constant")
def constant(cx: NodeContext):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if cx.has_attr(key):
            v = cx.attr(key)
            if key.startswith("value_float"):
                v = np.asarray(v, dtype=np.float32)
            elif key.startswith("value_int"):
                v = np.asarray(v, dtype=np.int64)
            if np.asarray(v).dtype == np.float64:
                v = np.asarray(v, dtype=np.float32)
            return cx.constant(np.asarray(v), "value")
    raise ModelError(
        "Constant has no supported value attribute (sparse and string values are not supported)"
    )


@converter("ConstantOfShape")
def constant_of_shape(cx: NodeContext):
    dims = cx.ints_input(0, "shape")
    value = cx.attr("value", None)
    fill = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.dtype == np.float64:
        fill = fill.astype(np.float32)
    cx.reserve(dims, fill.dtype, "the filled constant")
    return cx.constant(np.full(dims, fill[0], dtype=fill.dtype), "filled")


@converter("Range")
def range_(cx: NodeContext):
    start = cx.require_const(0, "start")
    limit = cx.require_const(1, "limit")
    delta = cx.require_const(2, "delta")
    if any(np.size(v) != 1 for v in (start, limit, delta)):
        raise ModelError("Range takes scalars for start, limit and delta")
    if float(delta) == 0:
        raise ModelError("Range delta is 0")
    count = np.ceil((float(limit) - float(start)) / float(delta))
    if not np.isfinite(count):
        raise ModelError(f"Range from {start} to {limit} by {delta} has no finite length")
    n = max(int(count), 0)
    cx.reserve((n,), start.dtype, "the range")
    values = (start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)
    return cx.constant(values, "range")
