"""Converters for pooling ops (MaxPool, AveragePool, LpPool, the global pools) and LRN."""

from __future__ import annotations

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.nn import resolve_pads, strides_and_dilations


def window_attrs(cx: NodeContext, x_shape: tuple[int, ...]) -> dict:
    """A pooling node's window over x [N, C, spatial...]."""
    sp = len(x_shape) - 2
    if sp < 1:
        raise ModelError(f"{cx.op_type} needs an input of rank >= 3, got shape {list(x_shape)}")
    kernel = tuple(cx.attr("kernel_shape"))
    if len(kernel) != sp:
        raise ModelError(f"kernel_shape {list(kernel)} does not match {sp} spatial axes")
    strides, dilations = strides_and_dilations(cx, sp)
    pads = resolve_pads(cx, x_shape[2:], kernel, strides, dilations)
    # ceil_mode only applies to explicit pads: auto_pad fixes the output size itself
    explicit = cx.attr("auto_pad", "NOTSET") in ("NOTSET", "")
    return {
        "kernel": kernel,
        "strides": strides,
        "pads": pads,
        "dilations": dilations,
        "ceil_mode": bool(cx.attr("ceil_mode", 0)) and explicit,
    }


@converter("MaxPool")
def max_pool(cx: NodeContext):
    attrs = window_attrs(cx, cx.shape(0))
    with_indices = len(cx.node.output) > 1 and bool(cx.node.output[1])
    attrs["return_indices"] = with_indices
    attrs["storage_order"] = cx.attr("storage_order", 0)
    outs = cx.emit("max_pool", [cx.input(0)], attrs, final=True)
    return outs if isinstance(outs, tuple) else (outs,)


@converter("AveragePool")
def avg_pool(cx: NodeContext):
    return cx.emit("avg_pool", [cx.input(0)], avg_pool_attrs(cx, cx.shape(0)), final=True)


def avg_pool_attrs(cx: NodeContext, x_shape: tuple[int, ...]) -> dict:
    return {**window_attrs(cx, x_shape), "count_include_pad": bool(cx.attr("count_include_pad", 0))}


@converter("LpPool")
def lp_pool(cx: NodeContext):
    attrs = window_attrs(cx, cx.shape(0))
    attrs["p"] = _integer_p(cx)
    return cx.emit("lp_pool", [cx.input(0)], attrs, final=True)


def _integer_p(cx: NodeContext) -> int:
    p = cx.attr("p", 2)
    if float(p) != int(p):
        raise ModelError(f"p = {p} is not an integer")
    return int(p)


def _spatial_axes(cx: NodeContext) -> tuple[int, ...]:
    rank = len(cx.shape(0))
    if rank < 3:
        raise ModelError(f"{cx.op_type} needs an input of rank >= 3, got shape {list(cx.shape(0))}")
    return tuple(range(2, rank))


@converter("GlobalAveragePool", "GlobalMaxPool")
def global_pool(cx: NodeContext):
    op = "reduce_mean" if cx.op_type == "GlobalAveragePool" else "reduce_max"
    attrs = {"axes": _spatial_axes(cx), "keepdims": True}
    return cx.emit(op, [cx.input(0)], attrs, final=True)


@converter("GlobalLpPool")
def global_lp_pool(cx: NodeContext):
    kernel = cx.shape(0)[2:]
    _spatial_axes(cx)
    attrs = {"kernel": kernel, "p": _integer_p(cx)}
    return cx.emit("lp_pool", [cx.input(0)], attrs, final=True)


@converter("LRN")
def lrn(cx: NodeContext):
    attrs = {
        "size": cx.attr("size"),
        "alpha": cx.attr("alpha", 1e-4),
        "beta": cx.attr("beta", 0.75),
        "bias": cx.attr("bias", 1.0),
    }
    return cx.emit("lrn", [cx.input(0)], attrs, final=True)
