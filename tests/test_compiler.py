"""anekit.compile and CompiledModel: inputs it takes, what it holds, the report, run()."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import anekit
from anekit import ops, targets
from anekit.compiler import CompiledModel
from anekit.errors import AnekitError, TargetError
from anekit.passes.pipeline import DEFAULT_PIPELINE

RNG = np.random.default_rng(8)


def _graph():
    x = anekit.input("x", (1, 3, 8, 8))
    y = ops.relu(
        ops.conv2d(x, RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), padding=1, name="conv"),
        name="act",
    )
    return anekit.graph(ops.softmax(ops.reduce_mean(y, [2, 3]), axis=1, name="probs"))


def _onnx_model() -> onnx.ModelProto:
    w = helper.make_tensor(
        "w", TensorProto.FLOAT, [4, 3], RNG.standard_normal(12).astype(np.float32)
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="act"),
    ]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [w],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_compile_a_graph_and_run_it() -> None:
    g = _graph()
    cm = anekit.compile(g, "m1")
    assert isinstance(cm, CompiledModel) and cm.source is g and cm.target is targets.get("m1")
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(cm.run({"x": x})["probs"], g.run({"x": x})["probs"], rtol=1e-5)
    np.testing.assert_allclose(cm(x=x)["probs"], g.run({"x": x})["probs"], rtol=1e-5)
    assert [r.name for r in cm.pass_log] == list(DEFAULT_PIPELINE)
    assert all(r.seconds >= 0 for r in cm.pass_log)
    assert set(cm.placement) == {n.name for n in cm.graph.nodes}
    assert cm.segments and cm.segments[0].index == 0


def test_compile_an_onnx_proto_and_a_path_with_input_shapes(tmp_path) -> None:
    model = _onnx_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    for source in (model, path, str(path)):
        cm = anekit.compile(source, "m4", input_shapes={"x": (2, 4)})
        assert cm.graph.inputs[0].shape == (2, 4)
        assert [r.placement for r in cm.ops] == ["ane", "folded"]


def test_report_has_the_check_shape_and_is_json() -> None:
    cm = anekit.compile(_graph(), "m4")
    report = json.loads(json.dumps(cm.report))
    assert report["target"] == "m4"
    assert set(report["summary"]) == {
        "nodes",
        "engine_layers",
        "ane_segments",
        "cpu_segments",
        "cpu_ops",
        "cpu_nodes",
        "dispatches",
    }
    assert report["summary"]["nodes"] == len(cm.source.nodes) == len(report["ops"])
    assert [o["node"] for o in report["ops"]] == [n.name for n in cm.source.nodes]
    assert all(set(o) == {"node", "op", "placement", "layer", "reason"} for o in report["ops"])
    assert "estimate" in report and [p["name"] for p in report["passes"]] == list(DEFAULT_PIPELINE)
    assert cm.summary_line() == (
        f"{len(cm.source.nodes)} nodes -> {report['summary']['engine_layers']} engine layers in 1 ANE "
        "segment, 0 ops on the CPU, 1 dispatch"
    )


def test_options_reach_the_passes_and_unknown_ones_are_refused() -> None:
    x = anekit.input("x", (1, 4, 64))
    g = anekit.graph(ops.matmul(x, RNG.standard_normal((64, 64)).astype(np.float32), name="mm"))
    as_conv = anekit.compile(g, "m1")
    assert any(n.attrs.get("main") == "conv" for n in as_conv.graph.nodes)
    tiny = anekit.compile(g, "m1", onchip_margin=0.001)  # the weight no longer fits: a matmul
    assert any(n.attrs.get("main") == "matmul" for n in tiny.graph.nodes)
    assert "stays a tiled matmul" in [r for r in tiny.ops if r.node == "mm"][0].reason
    with pytest.raises(AnekitError, match="unknown compile option"):
        anekit.compile(g, "m1", margin=0.5)


def test_bad_inputs_are_user_errors() -> None:
    with pytest.raises(TargetError):
        anekit.compile(_graph(), "m9")
    with pytest.raises(AnekitError, match="cannot compile a list"):
        anekit.compile([1, 2], "m4")
    with pytest.raises(AnekitError, match="unknown backend"):
        anekit.compile(_graph(), "m4").run({"x": np.zeros((1, 3, 8, 8), np.float32)}, backend="gpu")


def test_the_report_carries_the_cost_models_estimate() -> None:
    from anekit.cost import estimate_compiled

    compiled = anekit.compile(_graph(), "m2")
    estimate = compiled.report["estimate"]
    assert estimate["summary"] == estimate_compiled(compiled).summary()


def test_the_summary_counts_the_models_nodes_on_the_cpu_not_their_pieces() -> None:
    """A convolution too wide for M1's engine runs on the CPU split into pieces: the summary
    says one of the model's nodes runs there, and how many ops it became."""
    x = anekit.input("x", (1, 1, 20000, 64))
    w = RNG.standard_normal((64, 256)).astype(np.float32)
    cm = anekit.compile(anekit.graph(ops.matmul(x, w, name="wide")), "m1")
    assert cm.summary["cpu_nodes"] == 1 and cm.summary["cpu_ops"] > 1
    assert f"1 of the model's nodes on the CPU (as {cm.summary['cpu_ops']} ops)" in cm.summary_line()
    assert [r.placement for r in cm.ops] == ["cpu"]
