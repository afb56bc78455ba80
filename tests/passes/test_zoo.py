"""The foundation zoo through the middle-end: every pass preserves numerics, every model
compiles for every chip, and an op with no engine form (an LSTM) lands on the CPU."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import anekit
from anekit import targets
from anekit.compiler import compile as compile_model
from anekit.ir.graph import Graph
from tests import zoo
from tests.passes.support import check_every_pass, rel_err, row

pytestmark = pytest.mark.slow

MODELS = zoo.model_names()


@cache
def _graph(name: str) -> tuple[Graph, dict[str, np.ndarray]]:
    case = zoo.load(name)
    graph = anekit.from_onnx(case.path)
    if "light" in case.tags:
        graph = _random_weights(graph)
    return graph, dict(case.feeds)


def _random_weights(graph: Graph) -> Graph:
    """onnx's light models ship constant weights, so every output is the same (a softmax of
    0.001 everywhere) and a numerics check on them could not fail. Give them seeded random
    weights (He scale sqrt(2 / fan-in), so activations keep their size through the ReLUs;
    vectors such as BatchNorm variances positive) and make the logits an output too."""
    rng = np.random.default_rng(0)
    consts = {}
    for name, arr in graph.constants.items():
        if arr.dtype.kind != "f" or arr.size <= 1:
            consts[name] = arr
        elif arr.ndim >= 2:
            fan_in = int(np.prod(arr.shape[1:]))
            consts[name] = (rng.standard_normal(arr.shape) * np.sqrt(2.0 / fan_in)).astype(
                arr.dtype
            )
        else:
            consts[name] = rng.uniform(0.5, 1.5, arr.shape).astype(arr.dtype)
    logits = [n.inputs[0] for n in graph.nodes if n.op == "softmax"]
    outputs = list(graph.output_names) + [v for v in logits if v not in graph.output_names]
    return graph.replace(constants=consts, outputs=outputs)


@pytest.mark.parametrize("name", MODELS)
def test_every_pass_preserves_numerics(name: str) -> None:
    """Exact up to fp32 rounding (1e-5 relative) after every pass. Exact GELU is kept here:
    its tanh approximation is the one intended change, bounded in test_decompose."""
    graph, feeds = _graph(name)
    for target in ("m4", "m1") if "transformer" in zoo.ZOO[name].tags else ("m4",):
        worst = check_every_pass(graph, feeds, target, approximate_gelu=False)
        assert set(worst) >= {"canonicalize", "decompose", "layout", "fuse_epilogues", "legalize"}


def _distinct_configs() -> list[targets.Target]:
    """One chip per distinct set of the figures the middle-end reads (limits, gates, budgets)."""
    seen: dict[tuple, targets.Target] = {}
    for t in targets.all_targets():
        key = (t.limits, t.features, t.onchip_budget_bytes, t.kmem_cap_bytes)
        seen.setdefault(key, t)
    return list(seen.values())


@pytest.mark.parametrize("name", MODELS)
def test_compiles_for_every_chip(name: str) -> None:
    graph, _ = _graph(name)
    reported = {id(t) for t in _distinct_configs()}
    for t in targets.all_targets():
        cm = compile_model(graph, t)
        assert set(cm.placement) == {n.name for n in cm.graph.nodes}
        assert [n for s in cm.segments for n in s.nodes] == [n.name for n in cm.graph.nodes]
        assert cm.summary["dispatches"] == sum(s.device == "ane" for s in cm.segments)
        assert len(cm.ops) == len(graph.nodes)
        assert {r.placement for r in cm.ops} <= {"ane", "cpu", "folded", "removed"}
        if id(t) in reported:  # the report (with the cost model's estimate) once per config
            json.dumps(cm.report)


def _lstm_model() -> onnx.ModelProto:
    """A linear, an LSTM over 5 steps, and a linear head on the last hidden state."""
    rng = np.random.default_rng(1)
    seq, batch, feat, hidden = 5, 1, 8, 6

    def init(name, shape):
        return helper.make_tensor(
            name,
            TensorProto.FLOAT,
            shape,
            rng.standard_normal(shape).astype(np.float32).ravel() * 0.3,
        )

    nodes = [
        helper.make_node("MatMul", ["x", "w_in"], ["h0"], name="proj"),
        helper.make_node("Relu", ["h0"], ["h1"], name="act"),
        helper.make_node(
            "LSTM", ["h1", "W", "R", "B"], ["y", "y_h"], name="lstm", hidden_size=hidden
        ),
        helper.make_node("Reshape", ["y_h", "flat"], ["last"], name="flatten"),
        helper.make_node("MatMul", ["last", "w_out"], ["logits"], name="head"),
    ]
    graph = helper.make_graph(
        nodes,
        "lstm_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, feat])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3])],
        [
            init("w_in", [feat, feat]),
            init("W", [1, 4 * hidden, feat]),
            init("R", [1, 4 * hidden, hidden]),
            init("B", [1, 8 * hidden]),
            helper.make_tensor("flat", TensorProto.INT64, [2], [batch, hidden]),
            init("w_out", [hidden, 3]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_lstm_model_compiles_with_the_lstm_on_the_cpu() -> None:
    model = _lstm_model()
    x = np.random.default_rng(2).standard_normal((5, 1, 8)).astype(np.float32)
    for t in targets.all_targets():
        cm = compile_model(model, t)
        lstm = row(cm, "lstm")
        assert (lstm.placement, lstm.reason) == (
            "cpu",
            "lstm has no engine form: recurrent layers run on the CPU",
        )
        assert row(cm, "proj").placement == "ane" and row(cm, "act").placement == "folded"
        assert row(cm, "head").placement == "ane"
        assert [s.device for s in cm.segments] == ["ane", "cpu", "ane"]
    want = anekit.from_onnx(model).run({"x": x})["logits"]
    assert rel_err(cm.run({"x": x})["logits"], want) <= 1e-5
