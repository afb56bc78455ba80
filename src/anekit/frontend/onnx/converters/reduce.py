"""Converters for the Reduce* family and ArgMax/ArgMin."""

from __future__ import annotations

from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter

REDUCE = {
    "ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
    "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod", "ReduceL1": "reduce_l1",
    "ReduceL2": "reduce_l2", "ReduceSumSquare": "reduce_sum_square", "ReduceLogSum": "reduce_log_sum",
    "ReduceLogSumExp": "reduce_log_sum_exp",
}  # fmt: skip


def _axes_from_input(cx: NodeContext) -> bool:
    # axes moved from an attribute to an input: ReduceSum at opset 13, the others at 18
    return cx.opset >= (13 if cx.op_type == "ReduceSum" else 18)


@converter(*REDUCE)
def reduce(cx: NodeContext):
    if _axes_from_input(cx):
        axes = cx.ints_input(1, "axes", default=())
    else:
        axes = tuple(cx.attr("axes", ()))
    attrs = {
        "axes": axes,
        "keepdims": cx.attr("keepdims", 1),
        "noop_with_empty_axes": cx.attr("noop_with_empty_axes", 0),
    }
    return cx.emit(REDUCE[cx.op_type], [cx.input(0)], attrs, final=True)


@converter("ArgMax", "ArgMin")
def arg(cx: NodeContext):
    attrs = {
        "axis": cx.attr("axis", 0),
        "keepdims": cx.attr("keepdims", 1),
        "select_last_index": cx.attr("select_last_index", 0),
    }
    return cx.emit(cx.op_type.lower(), [cx.input(0)], attrs, final=True)
