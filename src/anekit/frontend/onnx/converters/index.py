"""Converters for indexed reads and writes: GatherND, ScatterElements/Scatter, ScatterND, OneHot."""

from __future__ import annotations

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter


@converter("GatherND")
def gather_nd(cx: NodeContext):
    attrs = {"batch_dims": cx.attr("batch_dims", 0)}
    return cx.emit("gather_nd", [cx.input(0), cx.input(1)], attrs, final=True)


@converter("ScatterElements", "Scatter")
def scatter_elements(cx: NodeContext):
    attrs = {"axis": cx.attr("axis", 0), "reduction": cx.attr("reduction", "none")}
    ins = [cx.input(0), cx.input(1), cx.input(2)]
    return cx.emit("scatter_elements", ins, attrs, final=True)


@converter("ScatterND")
def scatter_nd(cx: NodeContext):
    attrs = {"reduction": cx.attr("reduction", "none")}
    return cx.emit("scatter_nd", [cx.input(0), cx.input(1), cx.input(2)], attrs, final=True)


@converter("OneHot")
def one_hot(cx: NodeContext):
    depth = cx.require_const(1, "depth").reshape(-1)
    if depth.size != 1:
        raise ModelError(f"depth must be a scalar, got {depth.size} values")
    attrs = {"depth": int(depth[0]), "axis": cx.attr("axis", -1)}
    return cx.emit("one_hot", [cx.input(0), cx.input(2)], attrs, final=True)
