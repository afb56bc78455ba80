"""The dispatch descriptor (FlatBuffer) and `anekit compile --emit hwx` / `inspect` / `run`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from anekit.cli import main
from anekit.errors import FormatError
from anekit.formats import dispatch

CHAIN = [("ane", "segment0.hwx", ["x"], ["h"]), ("cpu", "segment1 (MIL, CPU)", ["h"], ["y"])]


def _descriptor() -> dispatch.DispatchDescriptor:
    return dispatch.program_for_segments(CHAIN, [("compiler", "anekit"), ("target", "m1")])


def test_one_ane_inference_per_engine_segment_bracketed_by_casts():
    ops = _descriptor().operations
    assert [op.op_type for op in ops] == ["Cast", "AneInference", "Cast", "CpuInference"]
    assert ops[0].inputs == ("x",) and ops[1].inputs == ops[0].outputs
    assert ops[2].outputs == ("h",) and ops[3].inputs == ("h",)
    assert ops[1].program == "segment0.hwx"
    assert (ops[0].src_type, ops[0].dst_type) == ("float32", "float16")


def test_round_trip_and_the_root_vtable_of_the_seed():
    data = dispatch.write(_descriptor())
    root = int.from_bytes(data[:4], "little")
    vtable = root - int.from_bytes(data[root : root + 4], "little", signed=True)
    # E5Program: vtable of 12 bytes, table of 20, fields at 4, 8, 12, 16 (seed 003 table 23.2)
    assert data[vtable : vtable + 12] == bytes.fromhex("0c001400040008000c001000")
    back = dispatch.parse(data)
    assert back == _descriptor() and back.format_version == 4


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_mutated_descriptor_reads_or_raises_format_error(data):
    raw = bytearray(dispatch.write(_descriptor()))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    try:
        dispatch.parse(bytes(raw))
    except FormatError:
        pass


def _onnx(path: Path) -> Path:
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((0.3 * rng.standard_normal((8, 4, 3, 3))).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["s"]),
        helper.make_node("Add", ["r", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 5, 5])], [w, b],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def test_compile_emit_hwx_then_inspect_and_run(tmp_path, capsys):
    model = _onnx(tmp_path / "cnn.onnx")
    out = tmp_path / "cnn.hwx.d"
    assert main(["compile", str(model), "-t", "m1", "--emit", "hwx", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["part0.hwx", "program.e5"]
    capsys.readouterr()
    assert main(["inspect", str(out / "program.e5"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [op["op_type"] for op in doc["operations"]] == ["Cast", "AneInference", "Cast"]
    assert doc["operations"][1]["program"] == "part0.hwx"
    x = np.random.default_rng(3).standard_normal((1, 4, 5, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    saved = tmp_path / "y.npz"
    assert (
        main(["run", str(out / "part0.hwx"), "-i", f"x={tmp_path / 'x.npy'}", "-o", str(saved)])
        == 0
    )
    assert (
        main(["run", str(model), "-i", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / "r.npz")])
        == 0
    )
    got, exact = np.load(saved)["y"], np.load(tmp_path / "r.npz")["y"]
    # fp16 storage between the three passes, the 33-sample sigmoid table (3e-3)
    np.testing.assert_allclose(got, exact, atol=4e-3 + 3 * 2.0**-11 * np.abs(exact).max(), rtol=0)


def test_compile_emit_hwx_refuses_an_existing_directory_and_other_targets(tmp_path, capsys):
    model = _onnx(tmp_path / "cnn.onnx")
    (tmp_path / "taken").mkdir()
    assert (
        main(["compile", str(model), "-t", "m1", "--emit", "hwx", "-o", str(tmp_path / "taken")])
        == 2
    )
    assert "already exists" in capsys.readouterr().err
    assert (
        main(["compile", str(model), "-t", "m4", "--emit", "hwx", "-o", str(tmp_path / "x")]) == 2
    )
    assert "H16 engine" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
