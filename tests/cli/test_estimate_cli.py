"""`anekit estimate`: the per-chip table, --json, --plot, errors, and zoo models for every chip."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from anekit import targets
from anekit.cli import main
from tests import zoo

BOUNDS = {"compute", "memory", "dispatch", "cpu"}


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 32, 32])],
        [w],
    )
    path = tmp_path_factory.mktemp("model") / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def run_json(capsys, *argv):
    assert main(["estimate", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_one_estimate_per_chip(capsys, conv_model):
    data = run_json(capsys, conv_model, "--target", "all")
    names = [e["target"] for e in data["estimates"]]
    assert names == targets.names()
    for e in data["estimates"]:
        assert {
            "target",
            "total_ms",
            "bottleneck",
            "partitions",
            "peak_onchip_bytes",
            "segments",
        } <= set(e)
        assert e["bottleneck"] in BOUNDS and e["total_ms"] > 0 and e["partitions"] >= 1
        assert sum(s["time_ms"] for s in e["segments"]) == pytest.approx(e["total_ms"])
    by = {e["target"]: e for e in data["estimates"]}
    # every figure the chips share gives the same time; the M1's slower engine costs more
    assert by["m4"]["total_ms"] == pytest.approx(by["m4-pro"]["total_ms"], rel=0.05)
    assert by["m1"]["total_ms"] > by["m4"]["total_ms"]


def test_detail_adds_layers_and_the_schedule(capsys, conv_model):
    data = run_json(capsys, conv_model, "--target", "m4,h13", "--detail")
    assert [e["target"] for e in data["estimates"]] == ["m4", "m1"]
    seg = data["estimates"][0]["segments"][0]
    assert seg["layers"][0]["flops"] == 2 * 32 * 32 * 32 * 16 * 9
    assert seg["schedule"]["order"] == [layer["name"] for layer in seg["layers"]]


def test_table_names_every_chip_and_its_bound(capsys, conv_model):
    assert main(["estimate", str(conv_model), "--target", "m1,m5"]) == 0
    out = capsys.readouterr().out
    assert "m1" in out and "m5" in out and any(b in out for b in BOUNDS)


def test_plot_writes_a_png(tmp_path, capsys, conv_model):
    out = tmp_path / "timeline.png"
    assert main(["estimate", str(conv_model), "--target", "m1,m4", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".tmp-*"))  # written atomically


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--target", "m99"], "unknown target"),
        (["--plot", "out.txt"], "must end in .png"),
    ],
)
def test_user_errors_exit_2(capsys, conv_model, argv, message):
    assert main(["estimate", str(conv_model), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_model_exits_2(capsys, tmp_path):
    assert main(["estimate", str(tmp_path / "nope.onnx")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", ["light_squeezenet", "resnet_cnn", "transformer_layer", "minilm"])
def test_zoo_models_estimate_on_every_chip(capsys, name):
    case = zoo.load(name)
    data = run_json(capsys, case.path, "--target", "all")
    assert len(data["estimates"]) == len(targets.names())
    for e in data["estimates"]:
        assert e["bottleneck"] in BOUNDS and e["total_ms"] > 0
