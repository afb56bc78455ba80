"""Converters for the recurrent layers LSTM, GRU and RNN."""

from __future__ import annotations

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter

_INPUTS = {"LSTM": 8, "GRU": 6, "RNN": 6}


def recurrent_attrs(cx: NodeContext, op: str) -> dict:
    """The IR attributes of ``op`` (lstm, gru, rnn) from the node's ONNX attributes."""
    attrs = {
        "hidden_size": cx.attr("hidden_size"),
        "direction": cx.attr("direction", "forward"),
        "activations": cx.attr("activations", ()),
        "activation_alpha": cx.attr("activation_alpha", ()),
        "activation_beta": cx.attr("activation_beta", ()),
        "clip": cx.attr("clip", None),
        "layout": cx.attr("layout", 0),
    }
    if op == "lstm":
        attrs["input_forget"] = cx.attr("input_forget", 0)
    elif op == "gru":
        attrs["linear_before_reset"] = cx.attr("linear_before_reset", 0)
    return attrs


@converter("LSTM", "GRU", "RNN")
def recurrent(cx: NodeContext):
    op = cx.op_type.lower()
    attrs = recurrent_attrs(cx, op)
    if cx.opset < 7 and cx.has_attr("output_sequence") and not cx.attr("output_sequence"):
        raise ModelError("output_sequence = 0 (opset < 7) is not supported")
    inputs = [cx.input(i) for i in range(_INPUTS[cx.op_type])]
    while inputs and inputs[-1] is None:
        inputs.pop()
    return cx.emit(op, inputs, attrs, final=True)
