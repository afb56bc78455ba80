"""Converters for convolution, normalisation and softmax ops."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter


def resolve_pads(
    cx: NodeContext, spatial_in: tuple[int, ...], kernel: tuple[int, ...], strides, dilations
) -> tuple[int, ...]:
    """Explicit pads from ``pads`` or ``auto_pad`` (SAME_UPPER puts the extra pad at the end)."""
    sp = len(spatial_in)
    auto = cx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = tuple(cx.attr("pads", (0,) * (2 * sp)))
        if len(pads) != 2 * sp:
            raise ModelError(f"pads has {len(pads)} values, expected {2 * sp}")
        return pads
    if auto == "VALID":
        return (0,) * (2 * sp)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ModelError(f"unknown auto_pad '{auto}'")
    begins, ends = [], []
    for size, k, s, d in zip(spatial_in, kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else big)
        ends.append(big if auto == "SAME_UPPER" else small)
    return tuple(begins + ends)


def weight_kernel(cx: NodeContext, w_shape: tuple[int, ...]) -> tuple[int, ...]:
    """``kernel_shape``, which must be the weight's spatial shape (and defaults to it)."""
    kernel = tuple(cx.attr("kernel_shape", w_shape[2:]))
    if kernel != tuple(w_shape[2:]):
        raise ModelError(f"kernel_shape {list(kernel)} does not match the weight {list(w_shape)}")
    return kernel


def strides_and_dilations(cx: NodeContext, sp: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A window's ``strides`` and ``dilations``, all 1 over ``sp`` spatial axes by default."""
    return tuple(cx.attr("strides", (1,) * sp)), tuple(cx.attr("dilations", (1,) * sp))


@converter("Conv")
def conv(cx: NodeContext):
    attrs = conv_attrs(cx, cx.shape(0), cx.shape(1))
    return cx.emit("conv", [cx.input(0), cx.input(1), cx.input(2)], attrs, final=True)


def conv_attrs(cx: NodeContext, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> dict:
    """A Conv node's attributes for x [N, C, spatial...] and w [M, C / group, kernel...]."""
    sp = len(x_shape) - 2
    kernel = weight_kernel(cx, w_shape)
    strides, dilations = strides_and_dilations(cx, sp)
    pads = resolve_pads(cx, x_shape[2:], kernel, strides, dilations)
    return {"strides": strides, "pads": pads, "dilations": dilations, "group": cx.attr("group", 1)}


def coerced_2d(cx: NodeContext, op: str):
    """Softmax before opset 13: flatten to 2-D at ``axis``, normalise rows, restore."""
    shape = cx.shape(0)
    axis = cx.attr("axis", 1) % max(len(shape), 1)
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    cols = int(np.prod(shape[axis:], dtype=np.int64))
    flat = cx.emit("reshape", [cx.input(0)], {"shape": (rows, cols)})
    y = cx.emit(op, [flat], {"axis": 1})
    return cx.emit("reshape", [y], {"shape": shape}, final=True)


@converter("Softmax", "LogSoftmax")
def softmax(cx: NodeContext):
    op = "softmax" if cx.op_type == "Softmax" else "log_softmax"
    if cx.opset < 13:
        return coerced_2d(cx, op)
    return cx.emit(op, [cx.input(0)], {"axis": cx.attr("axis", -1)}, final=True)


@converter("BatchNormalization")
def batch_norm(cx: NodeContext):
    if cx.attr("training_mode", 0):
        raise ModelError(
            "BatchNormalization in training mode is not supported; export in eval mode"
        )
    if any(o for o in cx.node.output[1:]):
        raise ModelError(
            "BatchNormalization's running-statistics outputs are not supported (training only)"
        )
    ins = [cx.input(i) for i in range(5)]
    return cx.emit("batch_norm", ins, {"epsilon": cx.attr("epsilon", 1e-5)}, final=True)


@converter("InstanceNormalization")
def instance_norm(cx: NodeContext):
    ins = [cx.input(i) for i in range(3)]
    return cx.emit("instance_norm", ins, {"epsilon": cx.attr("epsilon", 1e-5)}, final=True)


@converter("LayerNormalization")
def layer_norm(cx: NodeContext):
    attrs = {"axis": cx.attr("axis", -1), "epsilon": cx.attr("epsilon", 1e-5)}
    y = cx.emit("layer_norm", [cx.input(0), cx.input(1), cx.input(2)], attrs, final=True)
    wanted = [bool(o) for o in cx.node.output[1:3]]
    if not any(wanted):
        return y
    # Mean and InvStdDev (training outputs) as their own reductions over [axis, rank)
    x = cx.input(0)
    rank = len(cx.shape(0))
    axes = tuple(range(attrs["axis"] % rank, rank))
    mean = cx.emit("reduce_mean", [x], {"axes": axes, "keepdims": True})
    centred = cx.emit("sub", [x, mean])
    var = cx.emit("reduce_mean", [cx.emit("mul", [centred, centred])], {"axes": axes})
    eps = cx.constant(np.asarray(attrs["epsilon"], dtype=cx.type(0).dtype.numpy), "epsilon")
    inv_std = cx.emit("reciprocal", [cx.emit("sqrt", [cx.emit("add", [var, eps])])])
    return (y, mean, inv_std)[: 1 + len(wanted)]


@converter("RMSNormalization")
def rms_norm(cx: NodeContext):
    attrs = {"axis": cx.attr("axis", -1), "epsilon": cx.attr("epsilon", 1e-5)}
    return cx.emit("rms_norm", [cx.input(0), cx.input(1)], attrs, final=True)


@converter("GroupNormalization")
def group_norm(cx: NodeContext):
    groups = cx.attr("num_groups")
    channels = cx.shape(0)[1]
    scale, bias = cx.input(1), cx.input(2)
    if cx.opset < 21 and cx.shape(1) == (groups,) and groups != channels:
        # opset 18 scales per group; repeat each group's value over its channels
        scale, bias = (_per_channel(cx, v, groups, channels) for v in (scale, bias))
    attrs = {"num_groups": groups, "epsilon": cx.attr("epsilon", 1e-5)}
    return cx.emit("group_norm", [cx.input(0), scale, bias], attrs, final=True)


def _per_channel(cx: NodeContext, per_group: str, groups: int, channels: int) -> str:
    column = cx.emit("reshape", [per_group], {"shape": (groups, 1)})
    tiled = cx.emit("tile", [column], {"repeats": (1, channels // groups)})
    return cx.emit("reshape", [tiled], {"shape": (channels,)})


@converter("ConvTranspose")
def conv_transpose(cx: NodeContext):
    x_shape, w_shape = cx.shape(0), cx.shape(1)
    sp = len(x_shape) - 2
    kernel = weight_kernel(cx, w_shape)
    strides, dilations = strides_and_dilations(cx, sp)
    out_pad = tuple(cx.attr("output_padding", (0,) * sp))
    auto = cx.attr("auto_pad", "NOTSET") or "NOTSET"
    output_shape = cx.attr("output_shape", None)
    if output_shape is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = tuple(d * s for d, s in zip(x_shape[2:], strides, strict=True))
    if output_shape is not None:
        # the spec's rule: pads follow from the requested size; the odd one goes to the end
        # for SAME_UPPER, to the start otherwise (a negative total appends zeros)
        output_shape = tuple(output_shape)[-sp:]
        begins, ends = [], []
        for i in range(sp):
            natural = strides[i] * (x_shape[2 + i] - 1) + out_pad[i]
            total = natural + (kernel[i] - 1) * dilations[i] + 1 - output_shape[i]
            small = total // 2
            begins.append(small if auto == "SAME_UPPER" else total - small)
            ends.append(total - small if auto == "SAME_UPPER" else small)
        pads = tuple(begins + ends)
    elif auto == "VALID":
        pads = (0,) * (2 * sp)
    else:
        pads = tuple(cx.attr("pads", (0,) * (2 * sp)))
    attrs = {
        "strides": strides,
        "pads": pads,
        "dilations": dilations,
        "output_padding": out_pad,
        "group": cx.attr("group", 1),
    }
    return cx.emit("conv_transpose", [cx.input(0), cx.input(1), cx.input(2)], attrs, final=True)


@converter("DeformConv")
def deform_conv(cx: NodeContext):
    x_shape, w_shape = cx.shape(0), cx.shape(1)
    sp = len(x_shape) - 2
    weight_kernel(cx, w_shape)  # only checks kernel_shape: the weight gives the kernel
    strides, dilations = strides_and_dilations(cx, sp)
    attrs = {
        "strides": strides,
        "pads": tuple(cx.attr("pads", (0,) * (2 * sp))),
        "dilations": dilations,
        "group": cx.attr("group", 1),
        "offset_group": cx.attr("offset_group", 1),
    }
    ins = [cx.input(i) for i in range(5)]
    return cx.emit("deform_conv", ins, attrs, final=True)
