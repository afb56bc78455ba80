"""Invalid models are refused with the rule they break, as onnxruntime refuses them (the
oracle: each case first checks that onnxruntime refuses the same model), through the CLI
(exit 2, no bundle written) and the Python API (an AnekitError subclass)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import anekit
from anekit.errors import ModelError
from tests.safety.model_cases import (
    F32,
    assert_user_error,
    cli,
    model,
    onnxruntime_refuses,
    relu,
    save,
    tensor,
    value,
)

X4 = {"x": np.ones(4, np.float32)}


def _two_producers() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])]
    return model(nodes, [value("x", [4])], [value("y", [4])])


def _empty_kernel() -> onnx.ModelProto:
    w = tensor(np.zeros((3, 2, 0, 0), np.float32), "w")
    return model([helper.make_node("Conv", ["x", "w"], ["y"])], [value("x", [1, 2, 4, 4])],
                 [value("y", None)], [w])  # fmt: skip


def _integer_division_by_zero() -> onnx.ModelProto:
    a = tensor(np.array([4, 5], np.int64), "a")
    b = tensor(np.array([0, 1], np.int64), "b")
    nodes = [
        helper.make_node("Div", ["a", "b"], ["q"]),
        helper.make_node("Cast", ["q"], ["qf"], to=F32),
        helper.make_node("Add", ["x", "qf"], ["y"]),
    ]
    return model(nodes, [value("x", [2])], [value("y", [2])], [a, b])


def _negative_initializer_dims() -> onnx.ModelProto:
    w = tensor(np.ones(4, np.float32), "w")
    w.dims[:] = [-1]
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [value("x", [4])],
                 [value("y", [4])], [w])  # fmt: skip


def _huge_tile() -> onnx.ModelProto:
    reps = tensor(np.array([1_000_000_000, 1], np.int64), "reps")
    return model([helper.make_node("Tile", ["x", "reps"], ["y"])], [value("x", [1, 4])],
                 [value("y", None)], [reps])  # fmt: skip


def _short_constant() -> onnx.ModelProto:
    c = helper.make_tensor("c", F32, [4], [0.0] * 4)
    c.ClearField("float_data")
    c.raw_data = b"\0" * 7  # 7 bytes for 4 floats
    nodes = [
        helper.make_node("Constant", [], ["c"], value=c),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    return model(nodes, [value("x", [4])], [value("y", [4])])


def _gather_out_of_range(data_is_constant: bool) -> onnx.ModelProto:
    idx = tensor(np.array(7, np.int64), "idx")
    if data_is_constant:  # folded at import
        w = tensor(np.ones((3, 4), np.float32), "w")
        nodes = [helper.make_node("Gather", ["w", "idx"], ["g"], name="lookup"),
                 helper.make_node("Add", ["x", "g"], ["y"])]  # fmt: skip
        return model(nodes, [value("x", [4])], [value("y", [4])], [w, idx])
    nodes = [helper.make_node("Gather", ["x", "idx"], ["y"], name="lookup")]
    return model(nodes, [value("x", [3, 4])], [value("y", None)], [idx])


# name -> (model, feeds for onnxruntime, words the message must contain)
CASES = {
    "two nodes define one value": (_two_producers, X4, ("'y' is defined twice", "Relu", "Neg")),
    "empty conv kernel": (_empty_kernel, {"x": np.ones((1, 2, 4, 4), np.float32)},
                          ("kernel [0, 0]", "positive")),
    "integer division by zero": (_integer_division_by_zero, {"x": np.ones(2, np.float32)},
                                 ("integer division by zero", "Div")),
    "initializer dims of -1": (_negative_initializer_dims, X4, ("'w'", "[-1]", "negative")),
    "Tile to 4e9 elements": (_huge_tile, {"x": np.ones((1, 4), np.float32)},
                             ("4,000,000,000 elements", "Tile")),
    "Constant raw_data too short": (_short_constant, X4, ("7 bytes", "need 16", "Constant")),
    "Gather index folded at import": (lambda: _gather_out_of_range(True), X4,
                                      ("index 7 is out of range", "'lookup'")),
    "Gather index on live data": (lambda: _gather_out_of_range(False),
                                  {"x": np.ones((3, 4), np.float32)},
                                  ("index 7 is out of range", "'lookup'")),
}  # fmt: skip


# onnxruntime has no rule against a 4e9-element Tile: it tries to allocate the 16 GB (and
# the kernel's OOM killer ends the test run). anekit's rule there is its own loader's tensor
# limit, which compile must apply before it writes a bundle.
NO_ORT_RULE = {"Tile to 4e9 elements"}


@pytest.mark.parametrize("case", list(CASES))
def test_onnxruntime_refuses_and_so_does_compile(case, tmp_path, capsys) -> None:
    build, feeds, words = CASES[case]
    proto = build()
    if case not in NO_ORT_RULE:
        onnxruntime_refuses(proto, feeds)
    path = save(proto, tmp_path)
    out = tmp_path / "out.anekit"
    status, err = cli(capsys, "compile", path, "-o", out)
    assert_user_error(status, err, *words)
    assert "/squeeze" not in err  # the user's node, never an internal one
    assert not out.exists()
    with pytest.raises(anekit.AnekitError) as info:
        anekit.compile(proto.SerializeToString(), "m4")
    for w in words:
        assert w in str(info.value)


def test_reference_run_refuses_integer_division_by_zero_in_the_feeds(capsys, tmp_path) -> None:
    nodes = [helper.make_node("Div", ["a", "b"], ["y"])]
    proto = model(nodes, [value("a", [2], onnx.TensorProto.INT64),
                          value("b", [2], onnx.TensorProto.INT64)],
                  [value("y", [2], onnx.TensorProto.INT64)])  # fmt: skip
    feeds = {"a": np.array([4, 5]), "b": np.array([0, 1])}
    onnxruntime_refuses(proto, feeds)
    with pytest.raises(anekit.errors.InputError, match="integer division by zero"):
        anekit.from_onnx(proto).run(feeds)


@pytest.mark.parametrize(
    ("dims", "hint"), [([1, -5], "--shape x=1x32 "), (["N", 4], "--shape x=1x4 ")]
)
def test_shape_hint_is_a_spec_the_parser_accepts(dims, hint, tmp_path, capsys) -> None:
    path = save(relu(dims), tmp_path)
    status, err = cli(capsys, "compile", path, "-o", tmp_path / "m.anekit")
    assert_user_error(status, err, hint)
    spec = hint.split()[1]
    status, err = cli(capsys, "compile", path, "--shape", spec, "-o", tmp_path / "m.anekit")
    assert status == 0, err
    if dims[1] == -5:
        with pytest.raises(ModelError, match="declared -5, which is not a size"):
            anekit.compile(relu(dims))


def test_the_valid_controls_compile(tmp_path, capsys) -> None:
    """The same graphs with the fault removed compile and match onnxruntime."""
    import onnxruntime as ort

    w = tensor(np.ones((3, 4), np.float32), "w")
    idx = tensor(np.array(2, np.int64), "idx")
    nodes = [
        helper.make_node("Gather", ["w", "idx"], ["g"]),
        helper.make_node("Add", ["x", "g"], ["y"]),
    ]
    proto = model(nodes, [value("x", [4])], [value("y", [4])], [w, idx])
    want = ort.InferenceSession(proto.SerializeToString()).run(None, X4)[0]
    got = anekit.compile(proto, "m4").run(X4, backend="sim")["y"]
    np.testing.assert_array_equal(got, want)
