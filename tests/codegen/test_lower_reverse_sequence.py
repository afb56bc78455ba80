"""reverse_sequence lowered to MIL reverse_sequence (iOS 15): compiled for M1 and M4, saved,
loaded and run on the simulator against the IR kernel and onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit
from anekit import targets
from anekit.codegen.bundle import build_bundle
from anekit.codegen.mil import whole_graph_segment
from anekit.frontend.builder.tensor import record
from anekit.runtime.program import from_contents


def _model(batch_axis: int, time_axis: int, shape: list[int], const_lens: list[int] | None):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    inits = []
    if const_lens is None:
        inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT64, [shape[batch_axis]]))
    else:
        inits.append(numpy_helper.from_array(np.array(const_lens, np.int64), "lens"))
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis,
                            time_axis=time_axis)  # fmt: skip
    graph = helper.make_graph([node], "rs", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              inits)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(("batch_axis", "time_axis"), [(1, 0), (0, 1)])
@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("target", ["m1", "m4"])
def test_onnx_reverse_sequence_matches_onnxruntime(
    batch_axis: int, time_axis: int, const: bool, target: str, tmp_path: Path
) -> None:
    shape = [5, 4, 3]
    shape[batch_axis], shape[time_axis] = 4, 5
    lens = [5, 0, 2, 1]
    model = _model(batch_axis, time_axis, shape, lens if const else None)
    rng = np.random.default_rng(4)
    feeds = {"x": rng.uniform(-9, 9, shape).astype(np.float16).astype(np.float32)}
    if not const:
        feeds["lens"] = np.array(lens, np.int64)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    cm = anekit.compile(model, target=target)
    program = anekit.load(cm.save(tmp_path / "rs.anekit"))
    got = program.run(feeds, "sim")["y"]
    np.testing.assert_array_equal(got, want)  # values only move: exact
    np.testing.assert_array_equal(got, anekit.from_onnx(model).run(feeds)["y"])
    text = "\n".join(p.read_text() for p in (tmp_path / "rs.anekit").rglob("*.mil"))
    assert "= reverse_sequence(" in text
    assert not np.array_equal(got, feeds["x"])


@pytest.mark.parametrize("target", ["m1", "m4"])
@pytest.mark.parametrize("device", ["ane", "cpu"])
def test_int_data_out_of_range_lengths_and_both_devices(target: str, device: str) -> None:
    """int32 data; computed lengths outside [0, steps] are clipped as the IR kernel does."""
    import coremltools

    from anekit.codegen.mlpackage import _build

    x = anekit.input("x", (3, 6, 2), "int32")
    lens = anekit.input("lens", (3,), "int32")
    y = record("reverse_sequence", [x, lens], {"batch_axis": 0, "time_axis": 1}, name="y")
    g = anekit.graph([y])
    contents = build_bundle(g, targets.get(target), [whole_graph_segment(g, device)])
    _build(coremltools, contents.manifest, contents.programs, [None])  # type-checks every op
    feeds = {"x": np.arange(36, dtype=np.int32).reshape(3, 6, 2),
             "lens": np.array([9, -2, 4], np.int32)}  # fmt: skip
    got = from_contents(contents).run(feeds, "sim")["y"]
    want = g.run(feeds)["y"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[0], feeds["x"][0, ::-1])
    np.testing.assert_array_equal(got[1], feeds["x"][1])


@pytest.mark.parametrize("target", ["m1", "m4"])
def test_int8_data_compiles_on_every_dialect(target: str, tmp_path: Path) -> None:
    # iOS 15/16 MIL has no int8 tensors: the program carries the values as int32
    x = anekit.input("x", (3, 6, 2), "int8")
    y = record("reverse_sequence", [x, np.array([6, 0, 3], np.int32)],
               {"batch_axis": 0, "time_axis": 1}, name="y")  # fmt: skip
    g = anekit.graph([y])
    feeds = {"x": np.arange(-36, 36, 2, dtype=np.int8).reshape(3, 6, 2)}
    program = anekit.load(anekit.compile(g, target=target).save(tmp_path / "rs.anekit"))
    got = program.run(feeds, "sim")["y"]
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, g.run(feeds)["y"])
    np.testing.assert_array_equal(got[0], feeds["x"][0, ::-1])
    text = "\n".join(p.read_text() for p in (tmp_path / "rs.anekit").rglob("*.mil"))
    assert ("tensor<int8" in text) == (target == "m4")
