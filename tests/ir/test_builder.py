"""The builder API against numpy and torch-style semantics."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.errors import ModelError


def test_operators_record_ops() -> None:
    x = anekit.input("x", (2, 2))
    y = (x + 1.0) * 2.0 - x / 4.0
    z = -(x @ np.eye(2, dtype=np.float32))
    g = anekit.graph([y, z])
    a = np.array([[1, 2], [3, 4]], np.float32)
    out = g.run({"x": a})
    np.testing.assert_allclose(list(out.values())[0], (a + 1) * 2 - a / 4)
    np.testing.assert_allclose(list(out.values())[1], -a)


def test_conv2d_same_padding_and_linear_match_numpy() -> None:
    rng = np.random.default_rng(1)
    x = anekit.input("x", (1, 2, 5, 5))
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    y = ops.conv2d(x, w, padding="same")
    assert y.shape == (1, 3, 5, 5)
    lw = rng.standard_normal((4, 75)).astype(np.float32)
    lb = rng.standard_normal(4).astype(np.float32)
    out = ops.linear(ops.flatten(y), lw, lb, name="logits")
    g = anekit.graph([out])
    xv = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    # direct convolution for reference
    xp = np.pad(xv, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((1, 3, 5, 5), np.float32)
    for m in range(3):
        for i in range(5):
            for j in range(5):
                ref[0, m, i, j] = (xp[0, :, i : i + 3, j : j + 3] * w[m]).sum()
    expected = ref.reshape(1, -1) @ lw.T + lb
    np.testing.assert_allclose(g.run({"x": xv})["logits"], expected, rtol=1e-4, atol=1e-4)


def test_reshape_squeeze_unsqueeze_transpose() -> None:
    x = anekit.input("x", (2, 1, 6))
    assert ops.reshape(x, (3, -1)).shape == (3, 4)
    assert ops.squeeze(x).shape == (2, 6)
    assert ops.unsqueeze(x, 0).shape == (1, 2, 1, 6)
    assert ops.transpose(x).shape == (6, 1, 2)
    with pytest.raises(ModelError, match="more than one -1"):
        ops.reshape(x, (-1, -1))


def test_attention_matches_manual_softmax() -> None:
    rng = np.random.default_rng(2)
    q = anekit.input("q", (1, 2, 4, 8))
    k = anekit.input("k", (1, 2, 4, 8))
    v = anekit.input("v", (1, 2, 4, 8))
    g = anekit.graph([ops.attention(q, k, v, causal=True, name="o")])
    qv, kv, vv = (rng.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
    s = qv @ kv.transpose(0, 1, 3, 2) / np.sqrt(8)
    s = np.where(np.tril(np.ones((4, 4), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(
        g.run({"q": qv, "k": kv, "v": vv})["o"], p @ vv, rtol=1e-5, atol=1e-6
    )


def test_graph_names_are_deterministic_and_unique() -> None:
    def build():
        x = anekit.input("x", (4,))
        return anekit.graph([ops.relu(x) + ops.relu(x)])

    a, b = build(), build()
    assert [n.name for n in a.nodes] == [n.name for n in b.nodes] == ["relu_0", "relu_1", "add_0"]


def test_missing_declared_input_is_an_error() -> None:
    x = anekit.input("x", (2,))
    y = anekit.input("y", (2,))
    with pytest.raises(ModelError, match="not listed"):
        anekit.graph([x + y], inputs=[x])


def test_bad_input_declarations() -> None:
    with pytest.raises(ModelError):
        anekit.input("", (1,))
    with pytest.raises(ModelError, match="negative"):
        anekit.input("x", (-1, 2))
    with pytest.raises(ModelError, match="dtype"):
        anekit.input("x", (1,), "float64")


def test_constant_does_not_freeze_the_callers_array() -> None:
    w = np.ones((2, 2), np.float32)
    x = anekit.input("x", (2, 2))
    anekit.graph([x @ w])
    w[0, 0] = 5.0  # still writable
    assert w[0, 0] == 5.0


def test_ops_exports_each_family_function_once() -> None:
    import importlib
    import pkgutil

    import anekit.frontend.builder.ops as package

    defined: set[str] = set()
    for info in pkgutil.iter_modules(package.__path__):
        if info.name == "common":  # helpers the families share, not ops
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        defined |= {
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and callable(value)
            and getattr(value, "__module__", None) == module.__name__
        }
    assert len(ops.__all__) == len(set(ops.__all__))
    assert set(ops.__all__) == defined
    made = [ops.add, ops.greater, ops.relu, ops.reduce_sum, ops.conv1d, ops.avg_pool2d]
    assert [f.__name__ for f in made] == [
        "add", "greater", "relu", "reduce_sum", "conv1d", "avg_pool2d",
    ]  # fmt: skip
