"""`anekit check`: the per-node table, the JSON report, --strict, --shape, and user errors."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from anekit import targets
from anekit.cli import main
from anekit.cli.check import EXIT_CPU_FALLBACK, render

RNG = np.random.default_rng(9)


def _model(path, *, cpu_op: bool = False, dynamic: bool = False) -> str:
    """conv + bias + relu, a softmax, and optionally a Floor (no engine form) in between."""
    w = helper.make_tensor(
        "w", TensorProto.FLOAT, [4, 3, 3, 3], RNG.standard_normal(108).astype(np.float32)
    )
    b = helper.make_tensor("b", TensorProto.FLOAT, [4], RNG.standard_normal(4).astype(np.float32))
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
    ]
    last = "r"
    if cpu_op:
        nodes.append(helper.make_node("Floor", ["r"], ["f"], name="floor"))
        last = "f"
    nodes.append(helper.make_node("Softmax", [last], ["y"], name="softmax", axis=1))
    batch = "n" if dynamic else 1
    g = helper.make_graph(
        nodes, "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])],
        [w, b],
    )  # fmt: skip
    file = path / "net.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(file))
    return str(file)


def test_table_and_summary(tmp_path, capsys) -> None:
    assert main(["check", _model(tmp_path), "--target", "m1"]) == 0
    out = capsys.readouterr().out
    assert "conv" in out and "folded" in out
    summary = "3 nodes -> 2 engine layers in 1 ANE segment, 0 ops on the CPU, 1 dispatch"
    assert summary in out.splitlines()  # (the cost model's estimate may follow it)


def test_json_report(tmp_path, capsys) -> None:
    assert main(["check", _model(tmp_path, cpu_op=True), "--target", "m4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["target"] == "m4"
    assert report["summary"] == {
        "nodes": 4, "engine_layers": 2, "ane_segments": 2, "cpu_segments": 1, "cpu_ops": 1,
        "cpu_nodes": 1, "dispatches": 2,
    }  # fmt: skip
    rows = {r["node"]: r for r in report["ops"]}
    assert list(rows) == ["conv", "relu", "floor", "softmax"]
    assert (rows["conv"]["placement"], rows["relu"]["placement"]) == ("ane", "folded")
    assert rows["relu"]["layer"] == rows["conv"]["layer"] == "conv"
    assert (rows["floor"]["placement"], rows["floor"]["reason"]) == (
        "cpu",
        "floor has no engine form",
    )
    assert [d["code"] for d in report["diagnostics"]] == ["no-engine-form"]


def test_strict_exits_3_only_when_something_runs_on_the_cpu(tmp_path, capsys) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert main(["check", _model(tmp_path / "a"), "--strict"]) == 0
    assert main(["check", _model(tmp_path / "b", cpu_op=True), "--strict"]) == EXIT_CPU_FALLBACK
    capsys.readouterr()


def test_shape_option_fixes_dynamic_dimensions(tmp_path, capsys) -> None:
    path = _model(tmp_path, dynamic=True)
    assert main(["check", path, "--shape", "x=2x3x8x8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["dispatches"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "m0"], "unknown target 'm0'"),
        (["--shape", "x=abc"], "is not NAME=DIMS"),
    ],
)
def test_user_errors_exit_2(tmp_path, capsys, args, message) -> None:
    assert main(["check", _model(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_and_broken_files_exit_2(tmp_path, capsys) -> None:
    assert main(["check", str(tmp_path / "missing.onnx")]) == 2
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err


def test_gated_op_differs_between_chips(tmp_path, capsys) -> None:
    """The same model on two chips, with the database deciding (resize needs the texture engine)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])
    scales = helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 1, 2, 2])
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], name="up", mode="linear",
                            coordinate_transformation_mode="align_corners")  # fmt: skip
    g = helper.make_graph([node], "up", [x], [y], [scales])
    path = tmp_path / "up.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    for t in targets.all_targets():
        assert main(["check", str(path), "-t", t.name, "--json"]) == 0
        (row,) = json.loads(capsys.readouterr().out)["ops"]
        assert row["placement"] == ("ane" if t.supports("resize") else "cpu"), t.name


def test_plain_rendering_without_rich(capsys) -> None:
    report = {
        "target": "m4",
        "ops": [{"node": "a", "op": "relu", "placement": "ane", "layer": "a", "reason": None}],
    }
    render(report, "1 nodes -> 1 engine layers", sys.stdout, fmt="plain")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "anekit check: target m4" and out[1].split() == [
        "node",
        "op",
        "placement",
        "layer",
        "reason",
    ]
    assert out[2].split() == ["a", "relu", "ane", "a"] and out[-1] == "1 nodes -> 1 engine layers"


def _attribute_refusal_model(path, kind: str) -> str:
    """An op that has a MIL lowering, with an attribute value that has none, after a relu:
    a cubic grid sampling or a dilated max pooling."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = []
    if kind == "grid":
        grid = RNG.uniform(-1, 1, (1, 4, 4, 2)).astype(np.float32)
        inits.append(helper.make_tensor("grid", TensorProto.FLOAT, grid.shape, grid.ravel()))
        odd = helper.make_node("GridSample", ["r", "grid"], ["y"], name="cubic_grid", mode="cubic")
    else:
        odd = helper.make_node(
            "MaxPool", ["r"], ["y"], name="dilated_pool", kernel_shape=[2, 2], dilations=[2, 2]
        )
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), odd]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 20)]
    )
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.parametrize(
    ("kind", "node", "says"),
    [("grid", "cubic_grid", "grid sampling mode 'cubic' has no MIL form"),
     ("pool", "dilated_pool", "dilated pooling has no MIL form")],
)  # fmt: skip
def test_an_attribute_the_lowering_refuses_is_an_error_of_check(tmp_path, capsys, kind, node, says):
    """check used to place these and exit 0; compile then failed at save."""
    model = _attribute_refusal_model(tmp_path / f"{kind}.onnx", kind)
    assert main(["check", model, "--target", "m4"]) == 2
    err = capsys.readouterr().err
    assert f"node '{node}'" in err and says in err and "[no-mil-lowering]" in err
    assert main(["check", model, "--target", "m1", "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    found = [d for d in report["diagnostics"] if d["code"] == "no-mil-lowering"]
    assert len(found) == 1 and found[0]["severity"] == "error" and says in found[0]["message"]
    out = tmp_path / "m.anekit"
    assert main(["compile", model, "--target", "m4", "-o", str(out)]) == 2
    assert says in capsys.readouterr().err and not out.exists()


def test_a_model_the_lowering_accepts_gets_no_lowering_diagnostic(tmp_path) -> None:
    import anekit

    compiled = anekit.compile(_model(tmp_path, cpu_op=True), "m4")
    assert not [d for d in compiled.diagnostics if d.severity == "error"]
    assert compiled.summary["cpu_ops"] >= 1  # a CPU segment was lowered too


def test_a_model_save_cannot_write_is_an_error_of_check(tmp_path, capsys) -> None:
    """An STFT (DFT) model: check used to place it on the CPU and exit 0, then compile failed."""
    nodes = [
        helper.make_node("Unsqueeze", ["x", "axes"], ["xc"], name="complex"),
        helper.make_node("DFT", ["xc", "", "axis"], ["y"], name="dft"),
    ]
    g = helper.make_graph(
        nodes, "stft",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 2])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [2]),
         helper.make_tensor("axis", TensorProto.INT64, [], [1])],
    )  # fmt: skip
    file = tmp_path / "stft.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), str(file))
    assert main(["check", str(file), "--target", "m4"]) == 2
    err = capsys.readouterr().err
    assert "dft cannot be written as MIL" in err and "[no-mil-lowering]" in err
    assert main(["compile", str(file), "--target", "m4", "-o", str(tmp_path / "s.anekit")]) == 2
    assert not (tmp_path / "s.anekit").exists()
