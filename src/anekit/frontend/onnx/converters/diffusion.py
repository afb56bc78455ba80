"""The ``com.microsoft`` ops onnxruntime's transformer optimizer writes into diffusion UNets
and VAEs (``optimize_model(model_type="unet" / "vae")``): ``GroupNorm`` and ``SkipGroupNorm``
(channels-last group norms with an optional SiLU), ``NhwcConv`` (a Conv on channels-last
tensors with [M, kernel..., C / group] weights) and ``BiasSplitGelu``.

onnxruntime runs them on its CUDA provider only; each is the IR's channels-first op between
layout transposes.
"""

from __future__ import annotations

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter
from anekit.frontend.onnx.converters.contrib import MS
from anekit.frontend.onnx.converters.layout import channels_first, channels_last
from anekit.frontend.onnx.converters.nn import conv_attrs


def _group_norm(cx: NodeContext, x: str) -> str:
    """GroupNorm's normalisation of x ([N, spatial..., C] with channels_last, the default)
    by ``groups``, gamma (input 1), beta (input 2), then SiLU when ``activation`` is 1."""
    activation = cx.attr("activation")
    if activation not in (0, 1):
        raise ModelError(f"activation {activation} is not one of 0 (none) and 1 (SiLU)")
    nhwc = bool(cx.attr("channels_last", 1))
    if nhwc:
        x = channels_first(cx, x)
    attrs = {"num_groups": cx.attr("groups"), "epsilon": cx.attr("epsilon", 1e-5)}
    y = cx.emit("group_norm", [x, cx.input(1), cx.input(2)], attrs)
    if activation:
        y = cx.emit("silu", [y])
    return channels_last(cx, y) if nhwc else y


@converter(f"{MS}.GroupNorm")
def group_norm(cx: NodeContext):
    """X, gamma, beta; attributes groups, epsilon, activation, channels_last."""
    return _group_norm(cx, cx.input(0))


@converter(f"{MS}.SkipGroupNorm")
def skip_group_norm(cx: NodeContext):
    """X, gamma, beta, skip, bias: GroupNorm of s = X + skip (+ bias); outputs Y and s. skip
    is [N, H, W, C], [N, 1, 1, C] or [N, C]; only the channels-last layout is defined."""
    if not cx.attr("channels_last", 1):
        raise ModelError("SkipGroupNorm is defined for channels_last = 1 only",
                         hint="the optimizer writes it channels-last; re-run it unchanged")  # fmt: skip
    x_shape, skip = cx.shape(0), cx.input(3)
    if cx.shape(3) == (x_shape[0], x_shape[-1]):  # [N, C]: one value per image and channel
        per_image = (x_shape[0],) + (1,) * (len(x_shape) - 2) + (x_shape[-1],)
        skip = cx.emit("reshape", [skip], {"shape": per_image})
    total = cx.emit("add", [cx.input(0), skip])
    if cx.input(4) is not None:
        total = cx.emit("add", [total, cx.input(4)])
    return (_group_norm(cx, total), total)[: max(len(cx.node.output), 1)]


@converter(f"{MS}.NhwcConv")
def nhwc_conv(cx: NodeContext):
    """X [N, spatial..., C], W [M, kernel..., C / group], B [M]; Y [N, spatial..., M]."""
    x = channels_first(cx, cx.input(0))
    w = channels_first(cx, cx.input(1))  # the same move puts the weight's C second
    attrs = conv_attrs(cx, cx.shape_of(x), cx.shape_of(w))
    y = cx.emit("conv", [x, w, cx.input(2)], attrs)
    return channels_last(cx, y, final=True)


@converter(f"{MS}.BiasSplitGelu")
def bias_split_gelu(cx: NodeContext):
    """X [N, S, D] + bias [D], split in halves along D: left * Gelu(right) (erf form)."""
    width = cx.shape(0)[-1]
    if width % 2:
        raise ModelError(f"the hidden size {width} does not split into two halves")
    total = cx.emit("add", [cx.input(0), cx.input(1)])
    left, right = cx.emit("split", [total], {"axis": -1, "sizes": (width // 2, width // 2)})
    gate = cx.emit("gelu", [right], {"approximate": "none"})
    return cx.emit("mul", [left, gate], final=True)
