"""Graph structure, validation and the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.errors import InputError, ModelError, ShapeError
from anekit.ir import DType, Graph, Node, Value


def small_graph() -> Graph:
    x = anekit.input("x", (2, 3))
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    h = ops.relu(ops.matmul(x, w), name="h")
    y = ops.softmax(h + 1.0, name="y")
    return anekit.graph([y, h])


def test_outputs_are_keyed_by_name_in_graph_order() -> None:
    g = small_graph()
    x = np.array([[1, -2, 3], [0.5, 0.5, -1]], dtype=np.float32)
    out = g.run({"x": x})
    assert list(out) == ["y", "h"]
    h = np.maximum(x @ (np.arange(12, dtype=np.float32).reshape(3, 4) / 10), 0)
    e = np.exp(h + 1 - (h + 1).max(-1, keepdims=True))
    np.testing.assert_allclose(out["h"], h, rtol=1e-6)
    np.testing.assert_allclose(out["y"], e / e.sum(-1, keepdims=True), rtol=1e-6)


def test_feeds_are_checked() -> None:
    g = small_graph()
    with pytest.raises(InputError, match="missing input"):
        g.run({})
    with pytest.raises(InputError, match="shape"):
        g.run({"x": np.zeros((3, 3))})
    with pytest.raises(InputError, match="unknown input"):
        g.run({"x": np.zeros((2, 3)), "z": np.zeros(1)})
    with pytest.raises(InputError, match="dtype"):
        g.run({"x": np.zeros((2, 3), dtype=np.bool_)})
    # float64 feeds are converted to the declared fp32
    assert g.run({"x": np.zeros((2, 3), dtype=np.float64)})["y"].dtype == np.float32


def test_validate_catches_structure_errors() -> None:
    g = small_graph()
    g.validate()
    bad_order = g.replace(nodes=tuple(reversed(g.nodes)))
    with pytest.raises(ModelError, match="not defined before"):
        bad_order.validate()
    wrong_type = dict(g.values)
    wrong_type["h"] = Value("h", (2, 5), DType.FP32)
    with pytest.raises(ShapeError, match="declared"):
        g.replace(values=wrong_type).validate()


def test_inference_errors_name_node_and_op() -> None:
    x = anekit.input("x", (2, 3))
    with pytest.raises(ShapeError) as info:
        ops.matmul(x, np.zeros((4, 5), np.float32), name="proj")
    assert "proj" in str(info.value) and "matmul" in str(info.value)
    with pytest.raises(ShapeError, match="do not broadcast"):
        ops.add(x, np.zeros((4,), np.float32))


def test_histogram_and_parameters() -> None:
    g = small_graph()
    assert g.op_histogram() == {"matmul": 1, "relu": 1, "add": 1, "softmax": 1}
    assert g.parameter_count() == 12 + 1  # the weight and the scalar 1.0


def test_constants_are_read_only() -> None:
    g = small_graph()
    arr = next(iter(g.constants.values()))
    with pytest.raises(ValueError):
        arr[...] = 0


def test_fp16_values_are_stored_in_fp16_and_computed_in_fp32() -> None:
    x = anekit.input("x", (4,), "fp16")
    y = ops.exp(x)
    g = anekit.graph([y])
    big = np.array([0.0, 1.0, 11.0, 12.0], dtype=np.float16)
    out = g.run({"x": big})["exp_0"]
    assert out.dtype == np.float16
    # fp32 inside the op, rounded to fp16 once: 11 -> 59874 fits, 12 -> 162755 overflows to inf
    with np.errstate(over="ignore"):
        expected = np.exp(big.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(out, expected)


def test_node_repr_and_pretty() -> None:
    g = small_graph()
    text = g.pretty()
    assert "matmul" in text and "-> (y, h)" in text
    assert "Node(h: relu" in repr(g.node("h"))


def test_keep_all_returns_intermediates() -> None:
    g = small_graph()
    env = g.run({"x": np.ones((2, 3), np.float32)}, keep_all=True)
    assert {"x", "h", "y"} <= set(env)


def test_node_output_of_multi_output_node_is_an_error() -> None:
    n = Node("split", "s", ("x",), ("a", "b"), {"axis": 0, "sizes": (1, 1)})
    with pytest.raises(ValueError, match="2 outputs"):
        _ = n.output
