"""GraphEditor: rewrites, ordering, dead-code removal and stable output names."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.errors import ModelError, ShapeError


def chain():
    x = anekit.input("x", (1, 4))
    a = ops.relu(x, name="a")
    b = ops.tanh(a, name="b")
    c = ops.sigmoid(b, name="c")
    return anekit.graph([c])


def test_replace_node_keeps_output_name_and_numerics() -> None:
    g = chain()
    ed = g.edit()
    (t,) = ed.add("tanh", ["x"])
    (s,) = ed.add("sigmoid", [t])
    ed.replace_uses("c", s)
    out = ed.build()
    assert out.output_names == ("c",)
    assert [n.op for n in out.nodes] == ["tanh", "sigmoid"]  # relu and old nodes are dead
    x = np.array([[-1, 0.5, 2, -3]], np.float32)
    np.testing.assert_allclose(out.run({"x": x})["c"], 1 / (1 + np.exp(-np.tanh(x))), rtol=1e-6)
    out.validate()


def test_insert_before_keeps_topological_order() -> None:
    g = chain()
    ed = g.edit()
    (n,) = ed.add("neg", ["a"], before="b")
    b = ed.node("b")
    ed.set_node(b.with_(inputs=(n,)))
    out = ed.build()
    assert [n.op for n in out.nodes] == ["relu", "neg", "tanh", "sigmoid"]
    out.validate()


def test_output_replaced_by_an_input_gets_an_identity() -> None:
    g = chain()
    ed = g.edit()
    ed.replace_uses("c", "x")
    out = ed.build()
    assert out.output_names == ("c",)
    assert [n.op for n in out.nodes] == ["identity"]
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(out.run({"x": x})["c"], x)


def test_type_mismatch_on_replace_is_refused() -> None:
    g = chain()
    ed = g.edit()
    (r,) = ed.add("reshape", ["x"], {"shape": (4,)})
    with pytest.raises(ShapeError):
        ed.replace_uses("c", r)


def test_unused_constants_are_dropped() -> None:
    x = anekit.input("x", (2,))
    y = ops.add(x, np.ones(2, np.float32))
    g = anekit.graph([y])
    ed = g.edit()
    ed.add_constant(np.zeros(3, np.float32), "unused")
    ed.replace_uses(g.output_names[0], "x")
    out = ed.build()
    assert not out.constants


def test_cycle_is_reported() -> None:
    g = chain()
    ed = g.edit()
    a = ed.node("a")
    ed.set_node(a.with_(inputs=("c",)))
    with pytest.raises(ModelError, match="cycle"):
        ed.build(dce=False)


def test_fresh_names_never_collide() -> None:
    g = chain()
    ed = g.edit()
    names = {ed.fresh("a") for _ in range(5)}
    assert len(names) == 5 and "a" not in names
