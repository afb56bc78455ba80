"""Dynamic inputs: one error names every dynamic dimension of every input by its symbolic
name, and the `--shape` hint offers only sizes the model's shape arithmetic accepts (never 1
for a non-batch dimension); `info` shows the declared shapes instead of stopping."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import anekit
from anekit.cli import main
from anekit.errors import DynamicShapeError

RNG = np.random.default_rng(3)


def pyramid_model(levels: int = 6) -> onnx.ModelProto:
    """A detector neck: `levels` stride-2 convolutions, as many 2x upsamplings, and a Concat
    with the input's features, so H and W must be multiples of 2**levels."""
    nodes, inits, x = [], [], "x"
    for k in range(levels):
        w = numpy_helper.from_array(
            RNG.standard_normal((3, 3, 3, 3)).astype(np.float32) * 0.2, f"w{k}"
        )
        inits.append(w)
        nodes.append(
            helper.make_node("Conv", [x, f"w{k}"], [f"d{k}"], strides=[2, 2], pads=[1, 1, 1, 1])
        )
        x = f"d{k}"
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up"))
    for k in range(levels):
        nodes.append(helper.make_node("Resize", [x, "", "up"], [f"u{k}"], mode="nearest"))
        x = f"u{k}"
    nodes.append(helper.make_node("Concat", ["x", x], ["y"], axis=1))
    graph = helper.make_graph(
        nodes, "pyramid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def two_input_model() -> onnx.ModelProto:
    """Tokens and a mask that share the symbolic 'seq', plus an unnamed dimension."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["tokens", "mask"], ["m"]),
            helper.make_node("ReduceSum", ["m", "axes"], ["y"], keepdims=0),
        ],
        "two",
        [
            helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", "seq"]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "seq"]),
            helper.make_tensor_value_info("extra", TensorProto.FLOAT, [2, None]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_hint_offers_a_size_the_shape_arithmetic_accepts() -> None:
    model = pyramid_model()
    with pytest.raises(DynamicShapeError) as err:
        anekit.from_onnx(model)
    message, hint = err.value.message, err.value.hint
    assert "dimensions 0 ('batch'), 2 ('height'), 3 ('width')" in message
    assert "--shape x=1x3x64x64 " in hint  # 32 (and 1) break the Concat: 64 is the first
    anekit.from_onnx(model, {"x": (1, 3, 64, 64)})
    for size in (1, 32):
        with pytest.raises(anekit.AnekitError):
            anekit.from_onnx(model, {"x": (1, 3, size, size)})


def test_every_dynamic_input_is_reported_at_once() -> None:
    with pytest.raises(DynamicShapeError) as err:
        anekit.from_onnx(two_input_model())
    message = err.value.message
    for part in (
        "input 'tokens' fp32[batch, seq]: dimensions 0 ('batch'), 1 ('seq')",
        "input 'mask' fp32[batch, seq]",
        "input 'extra' fp32[2, ?]: dimension 1 (unnamed)",
    ):
        assert part in message
    # the shared 'seq' gets one size; 'extra' is rank 2 with a fixed dim 0, so its dim 1
    # takes the candidate size
    hint = err.value.hint
    assert "--shape tokens=1x32 --shape mask=1x32 --shape extra=2x32" in hint
    # a shape given for one input: the error names only the others
    with pytest.raises(DynamicShapeError) as err:
        anekit.from_onnx(two_input_model(), {"tokens": (1, 8)})
    assert "'tokens'" not in err.value.message and "'mask'" in err.value.message


def test_info_shows_the_declared_shapes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "two.onnx"
    onnx.save(two_input_model(), path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    for line in ("tokens: fp32[batch, seq]", "mask: fp32[batch, seq]", "extra: fp32[2, ?]"):
        assert line in out
    assert "--shape tokens=1x32" in out
    assert main(["info", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dynamic"] is True
    assert [i["dims"] for i in doc["inputs"]] == [["batch", "seq"], ["batch", "seq"], [2, None]]
    spec = ["--shape", "tokens=1x8", "--shape", "mask=1x8", "--shape", "extra=2x5"]
    assert main(["info", str(path), *spec]) == 0
    assert "tokens: fp32[1x8]" in capsys.readouterr().out
