"""Converters for TopK, Hardmax, CumSum/CumProd, Shrink, ReverseSequence, LpNormalization,
MeanVarianceNormalization, Swish and EyeLike (folded to a constant)."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.dtypes import ir_dtype
from anekit.frontend.onnx.converters.nn import coerced_2d


@converter("TopK")
def topk(cx: NodeContext):
    if cx.opset < 10:
        k = cx.attr("k")
    else:
        ks = cx.ints_input(1, "k")
        if len(ks) != 1:
            raise ModelError(f"k must hold one value, got {list(ks)}")
        k = ks[0]
    attrs = {
        "k": k,
        "axis": cx.attr("axis", -1),
        "largest": cx.attr("largest", 1),
        "sorted": cx.attr("sorted", 1),
    }
    return cx.emit("topk", [cx.input(0)], attrs, final=True)


@converter("Hardmax")
def hardmax(cx: NodeContext):
    if cx.opset < 13:
        return coerced_2d(cx, "hardmax")
    return cx.emit("hardmax", [cx.input(0)], {"axis": cx.attr("axis", -1)}, final=True)


@converter("CumSum", "CumProd")
def cumulative(cx: NodeContext):
    axis = cx.ints_input(1, "axis")
    if len(axis) != 1:
        raise ModelError(f"axis must be a scalar, got {list(axis)}")
    attrs = {
        "axis": axis[0],
        "exclusive": cx.attr("exclusive", 0),
        "reverse": cx.attr("reverse", 0),
    }
    return cx.emit(cx.op_type.lower(), [cx.input(0)], attrs, final=True)


@converter("Shrink")
def shrink(cx: NodeContext):
    attrs = {"lambd": cx.attr("lambd", 0.5), "bias": cx.attr("bias", 0.0)}
    return cx.emit("shrink", [cx.input(0)], attrs, final=True)


@converter("ReverseSequence")
def reverse_sequence(cx: NodeContext):
    attrs = {"batch_axis": cx.attr("batch_axis", 1), "time_axis": cx.attr("time_axis", 0)}
    return cx.emit("reverse_sequence", [cx.input(0), cx.input(1)], attrs, final=True)


@converter("LpNormalization")
def lp_normalization(cx: NodeContext):
    """x / ||x||_p along axis (p = 1 or 2); a zero vector stays zero."""
    p = cx.attr("p", 2)
    if p not in (1, 2):
        raise ModelError(f"LpNormalization supports p = 1 or 2, got {p}")
    axis = cx.attr("axis", -1) % max(len(cx.shape(0)), 1)
    op = "reduce_l1" if p == 1 else "reduce_l2"
    norm = cx.emit(op, [cx.input(0)], {"axes": (axis,), "keepdims": True})
    # a zero vector stays zero (the reference and onnxruntime do not divide by 0)
    dtype = cx.type(0).dtype.numpy
    zero, one = (cx.constant(np.asarray(v, dtype), f"c{v}") for v in (0, 1))
    safe = cx.emit("where", [cx.emit("equal", [norm, zero]), one, norm])
    return cx.emit("div", [cx.input(0), safe], final=True)


@converter("MeanVarianceNormalization")
def mean_variance_normalization(cx: NodeContext):
    """(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over axes, as the ONNX function body."""
    rank = len(cx.shape(0))
    axes = tuple(a % rank for a in cx.attr("axes", (0, 2, 3)))
    x = cx.input(0)
    dtype = cx.type(0).dtype.numpy
    reduce = {"axes": axes, "keepdims": True}
    mean = cx.emit("reduce_mean", [x], reduce)
    mean_sq = cx.emit("reduce_mean", [cx.emit("mul", [x, x])], reduce)
    var = cx.emit("sub", [mean_sq, cx.emit("mul", [mean, mean])])
    eps = cx.constant(np.asarray(1e-9, dtype=dtype), "epsilon")
    std = cx.emit("add", [cx.emit("sqrt", [var]), eps])
    return cx.emit("div", [cx.emit("sub", [x, mean]), std], final=True)


@converter("Swish")
def swish(cx: NodeContext):
    """x * sigmoid(alpha * x): silu when alpha is 1."""
    alpha = cx.attr("alpha", 1.0)
    x = cx.input(0)
    if alpha == 1.0:
        return cx.emit("silu", [x], final=True)
    scaled = cx.emit("mul", [x, cx.constant(np.asarray(alpha, cx.type(0).dtype.numpy), "alpha")])
    return cx.emit("mul", [x, cx.emit("sigmoid", [scaled])], final=True)


@converter("EyeLike")
def eye_like(cx: NodeContext):
    """Depends only on the input's shape: a constant."""
    shape = cx.shape(0)
    if len(shape) != 2:
        raise ModelError(f"EyeLike needs a 2-d input, got shape {list(shape)}")
    dtype = (
        ir_dtype(cx.attr("dtype"), "the EyeLike dtype")
        if cx.has_attr("dtype")
        else cx.type(0).dtype
    )
    cx.reserve(shape, dtype.numpy, "the identity matrix")
    eye = np.eye(shape[0], shape[1], k=cx.attr("k", 0), dtype=dtype.numpy)
    return cx.constant(eye, "eye")


@converter("CenterCropPad")
def center_crop_pad(cx: NodeContext):
    """One pad op: a negative pad crops (the odd element goes to the end, as the spec)."""
    in_shape = cx.shape(0)
    rank = len(in_shape)
    target = cx.ints_input(1, "shape")
    axes = tuple(a % rank for a in cx.attr("axes", range(rank)))
    if len(axes) != len(target):
        raise ModelError(f"shape has {len(target)} values for {len(axes)} axes")
    pads = [0] * (2 * rank)
    for a, size in zip(axes, target, strict=True):
        grow = size - in_shape[a]
        begin = grow // 2 if grow >= 0 else -((-grow) // 2)
        pads[a], pads[rank + a] = begin, grow - begin
    return cx.emit("pad", [cx.input(0)], {"pads": tuple(pads)}, final=True)


@converter("Col2Im")
def col2im(cx: NodeContext):
    image = cx.ints_input(1, "image_shape")
    block = cx.ints_input(2, "block_shape")
    sp = len(image)
    attrs = {
        "image_shape": image,
        "block_shape": block,
        "strides": cx.attr("strides", (1,) * sp),
        "pads": cx.attr("pads", (0,) * (2 * sp)),
        "dilations": cx.attr("dilations", (1,) * sp),
    }
    return cx.emit("col2im", [cx.input(0)], attrs, final=True)


@converter("MaxUnpool")
def max_unpool(cx: NodeContext):
    """Indices address the default (pool-inverting) shape; output_shape pads or cuts its end."""
    x_shape = cx.shape(0)
    sp = len(x_shape) - 2
    kernel = cx.attr("kernel_shape")
    strides = cx.attr("strides", (1,) * sp)
    pads = cx.attr("pads", (0,) * (2 * sp))
    default = x_shape[:2] + tuple(
        (x_shape[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[sp + i] for i in range(sp)
    )
    want = cx.ints_input(2, "output_shape") if cx.input(2) is not None else default
    if len(want) != len(default):
        raise ModelError(f"output_shape {list(want)} must have rank {len(default)}")
    same = tuple(want) == default
    y = cx.emit("max_unpool", [cx.input(0), cx.input(1)], {"output_shape": default}, final=same)
    if same:
        return y
    grow = (0,) * len(default) + tuple(w - d for w, d in zip(want, default, strict=True))
    return cx.emit("pad", [y], {"pads": grow}, final=True)


@converter("Det")
def det(cx: NodeContext):
    return cx.emit("det", [cx.input(0)], final=True)


# --- ops whose output shape is their input's values: folded when the input is a constant ------


def _data_dependent(cx: NodeContext, i: int, what: str) -> np.ndarray:
    value = cx.const(i)
    if value is None:
        raise ModelError(
            f"{cx.op_type}'s output shape depends on the values of its {what}, which are computed "
            "from the model's inputs; anekit compiles static shapes and supports it only on constants"
        )
    return value


@converter("NonZero")
def non_zero(cx: NodeContext):
    x = _data_dependent(cx, 0, "input")
    return cx.constant(np.asarray(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1), "indices")


@converter("Compress")
def compress(cx: NodeContext):
    """A gather at the constant condition's True positions (the data may be live)."""
    cond = _data_dependent(cx, 1, "condition").reshape(-1).astype(bool)
    x = cx.input(0)
    axis = cx.attr("axis", None)
    if axis is None:
        x = cx.emit("reshape", [x], {"shape": (int(np.prod(cx.shape(0), dtype=np.int64)),)})
        axis = 0
    dim = cx.shape_of(x)[axis]
    if cond.size > dim:
        raise ModelError(f"condition has {cond.size} entries for an axis of {dim}")
    index = cx.constant(np.flatnonzero(cond).astype(np.int64), "kept")
    return cx.emit("gather", [x, index], {"axis": axis}, final=True)


@converter("Unique")
def unique(cx: NodeContext):
    x = _data_dependent(cx, 0, "input")
    axis = cx.attr("axis", None)
    values, first, inverse, counts = np.unique(
        x if axis is not None else x.reshape(-1),
        return_index=True, return_inverse=True, return_counts=True, axis=axis,
    )  # fmt: skip
    if not cx.attr("sorted", 1):  # order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=axis or 0)
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
    outs = (values, first, inverse.reshape(-1), counts)
    return tuple(
        cx.constant(np.asarray(o), h)
        for o, h in zip(outs, ("y", "indices", "inverse", "counts"), strict=True)
    )
