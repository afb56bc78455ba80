"""Short recurrences unrolled onto the engine (passes/decompose/recurrent.py): each plain LSTM,
GRU and RNN of up to MAX_UNROLLED_STEPS steps x directions lands on the ANE with its
neighbours, exact against onnxruntime on the reference backend and within fp16 on the
simulator; longer or special cells stay one CPU op."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit
from anekit.passes.decompose import MAX_UNROLLED_STEPS
from tests.passes.support import EXACT_RTOL, rel_err

RNG = np.random.default_rng(23)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
BATCH, SIZE, HIDDEN = 2, 5, 8


def _model(op: str, seq: int, direction: str, **attrs) -> tuple[bytes, dict[str, np.ndarray]]:
    """x -> Relu -> cell (initial states fed as inputs) -> y, y_h (and y_c): a cell between
    engine ops, as in a streaming model."""
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    consts = {
        "W": RNG.standard_normal((dirs, g * HIDDEN, SIZE)).astype(np.float32) * 0.5,
        "R": RNG.standard_normal((dirs, g * HIDDEN, HIDDEN)).astype(np.float32) * 0.5,
        "B": RNG.standard_normal((dirs, 2 * g * HIDDEN)).astype(np.float32) * 0.3,
    }
    feeds = {"x": RNG.standard_normal((seq, BATCH, SIZE)).astype(np.float32),
             "h0": RNG.standard_normal((dirs, BATCH, HIDDEN)).astype(np.float32) * 0.5}  # fmt: skip
    cell_in = ["xr", "W", "R", "B", "", "h0"]
    outs = ["y", "y_h"]
    if op == "LSTM":
        feeds["c0"] = RNG.standard_normal((dirs, BATCH, HIDDEN)).astype(np.float32)
        cell_in.append("c0")
        outs.append("y_c")
    nodes = [
        helper.make_node("Relu", ["x"], ["xr"]),
        helper.make_node(op, cell_in, outs, name="cell", hidden_size=HIDDEN,
                         direction=direction, **attrs),  # fmt: skip
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), feeds


CASES = [
    ("LSTM", 1, "forward", {}),  # silero-vad's streaming step
    ("LSTM", 2, "bidirectional", {}),
    ("LSTM", 4, "reverse", {}),
    ("GRU", 3, "forward", {}),
    ("GRU", 2, "bidirectional", {"linear_before_reset": 1}),
    ("RNN", 4, "forward", {}),
]


@pytest.mark.parametrize("op, seq, direction, attrs", CASES)
def test_short_recurrence_runs_on_the_engine(op, seq, direction, attrs) -> None:
    model, feeds = _model(op, seq, direction, **attrs)
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for chip in ("m1", "m4"):
        cm = anekit.compile(model, chip)
        assert [s.device for s in cm.segments] == ["ane"], cm.summary_line()
        row = next(r for r in cm.ops if r.node == "cell")
        assert row.placement == "ane", row.reason
        reference = list(cm.run(feeds, "reference").values())
        simulated = list(cm.run(feeds, "sim").values())
        for want, exact, fp16 in zip(expected, reference, simulated, strict=True):
            assert rel_err(exact, want) < EXACT_RTOL
            # fp16 storage of every gate and state: a few units of fp16's 2^-11
            assert rel_err(fp16, want) < 1e-2


@pytest.mark.parametrize(
    "op, seq, direction, attrs",
    [
        ("LSTM", MAX_UNROLLED_STEPS + 1, "forward", {}),  # a long chain
        ("LSTM", 3, "bidirectional", {}),  # 6 steps x directions
        ("LSTM", 1, "forward", {"clip": 0.5}),
        ("GRU", 1, "forward", {"activations": ["HardSigmoid", "Tanh"]}),
    ],
)
def test_long_or_special_recurrence_stays_one_cpu_op(op, seq, direction, attrs) -> None:
    model, feeds = _model(op, seq, direction, **attrs)
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    cm = anekit.compile(model, "m4")
    row = next(r for r in cm.ops if r.node == "cell")
    assert row.placement == "cpu" and "recurrent layers run on the CPU" in row.reason
    for want, got in zip(expected, cm.run(feeds, "reference").values(), strict=True):
        assert rel_err(got, want) < EXACT_RTOL
