"""Channels-last tensors (the NHWC layout of onnxruntime's contrib ops: ``channels_last``
attributes, ``NhwcConv``) moved to the channels-first layout the IR ops take, and back."""

from __future__ import annotations

from anekit.frontend.onnx.context import NodeContext


def channels_first(cx: NodeContext, x: str) -> str:
    """[N, spatial..., C] -> [N, C, spatial...]."""
    rank = len(cx.shape_of(x))
    return cx.emit("transpose", [x], {"perm": (0, rank - 1, *range(1, rank - 1))})


def channels_last(cx: NodeContext, y: str, *, final: bool = False) -> str:
    """[N, C, spatial...] -> [N, spatial..., C]."""
    rank = len(cx.shape_of(y))
    return cx.emit("transpose", [y], {"perm": (0, *range(2, rank), 1)}, final=final)
