"""Epilogue fusion: the cases of ane-compiler table 22.3, slot order, and the guards."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.ir.engine import Slot
from tests.passes.support import compile_checked, compute_layers, layer_of, layers, row

RNG = np.random.default_rng(0)


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def test_conv_bias_relu_is_one_layer() -> None:
    x = anekit.input("x", (1, 3, 8, 8))
    y = ops.relu(ops.conv2d(x, _w(4, 3, 3, 3), _w(4), padding=1, name="conv"), name="act")
    cm = compile_checked(anekit.graph(y))
    (layer,) = layers(cm)
    view = layer_of(cm, "conv")
    assert view.node is layer and view.main == "conv"
    assert [s.slot for s in view.epilogue] == [Slot.GOC, Slot.POST_ACT]
    assert view.operand(view.slot(Slot.GOC), 1) is not None  # the bias is the GOC offset
    assert row(cm, "act").placement == "folded"


def test_matmul_with_constant_weight_bias_gelu_is_one_layer() -> None:
    x = anekit.input("x", (1, 16, 32))
    h = ops.matmul(x, _w(32, 64), name="mm")
    y = ops.gelu(ops.add(h, _w(64), name="bias"), approximate="tanh", name="act")
    cm = compile_checked(anekit.graph(y))
    (layer,) = compute_layers(cm)
    view = layer_of(cm, "mm")
    assert view.node is layer and view.main == "conv"  # ReplaceMatmulWithConv
    assert [s.op for s in view.epilogue if s.slot in (Slot.GOC, Slot.POST_ACT)] == ["goc", "gelu"]
    assert {row(cm, n).layer for n in ("mm", "bias", "act")} == {layer.name}
    assert [row(cm, n).placement for n in ("mm", "bias", "act")] == ["ane", "folded", "folded"]
    # what remains is the layout change of the [1, S, C] input and output (data movement)
    assert all(
        n.attrs["layer_type"] in ("transpose", "reshape") for n in layers(cm) if n is not layer
    )


def test_conv_batchnorm_relu_is_one_layer() -> None:
    x = anekit.input("x", (1, 4, 6, 6))
    c = ops.conv2d(x, _w(8, 4, 3, 3), name="conv")
    mean, var = _w(8), np.abs(_w(8)) + 0.5
    b = ops.batch_norm(c, mean, var, _w(8) + 1.0, _w(8), name="bn")
    cm = compile_checked(anekit.graph(ops.relu(b, name="act")))
    (layer,) = layers(cm)
    assert layer_of(cm, "bn").node is layer
    assert row(cm, "conv").placement == "ane"
    bn = row(cm, "bn")
    assert bn.placement == "folded" and "weights" in bn.reason


def test_two_live_input_add_stays_a_layer_and_takes_the_activation() -> None:
    x = anekit.input("x", (1, 4, 6, 6))
    a = ops.conv2d(x, _w(4, 4, 1, 1), _w(4), name="conv_a")
    b = ops.conv2d(x, _w(4, 4, 3, 3), _w(4), padding=1, name="conv_b")
    y = ops.relu(ops.add(a, b, name="sum"), name="act")
    cm = compile_checked(anekit.graph(y))
    assert len(layers(cm)) == 3
    add = layer_of(cm, "sum")
    assert add.main == "add" and add.layer_type == "elementwise"
    assert [s.op for s in add.epilogue] == ["relu"] and add.epilogue[0].slot == Slot.POST_ACT


def test_inverse_transpose_pair_is_no_layer() -> None:
    x = anekit.input("x", (1, 4, 6, 8))
    t = ops.transpose(ops.transpose(x, (0, 2, 3, 1), name="t1"), (0, 3, 1, 2), name="t2")
    y = ops.relu(t, name="act")
    cm = compile_checked(anekit.graph(y))
    assert [layer_of(cm, "act").main] == [n.attrs["main"] for n in layers(cm)]
    assert row(cm, "t1").placement == row(cm, "t2").placement == "removed"
    assert "inverse transpose" in row(cm, "t1").reason


def test_value_with_two_readers_is_not_fused_away() -> None:
    x = anekit.input("x", (1, 4, 6, 6))
    c = ops.conv2d(x, _w(4, 4, 1, 1), name="conv")
    y1 = ops.relu(c, name="r")
    y2 = ops.sigmoid(c, name="s")
    cm = compile_checked(anekit.graph([y1, y2]))
    conv = layer_of(cm, "conv")
    assert conv.epilogue == ()  # its output feeds two layers
    assert len(layers(cm)) == 3


def test_affine_chain_merges_into_one_gain_offset() -> None:
    x = anekit.input("x", (1, 4, 5, 5))
    c = ops.conv2d(x, _w(4, 4, 1, 1), name="conv")
    y = ops.add(
        ops.mul(ops.sub(c, _w(1, 4, 1, 1), name="s"), _w(1, 4, 1, 1), name="m"), 0.5, name="a"
    )
    y = ops.tanh(y, name="t")
    cm = compile_checked(anekit.graph(y))
    (layer,) = layers(cm)
    view = layer_of(cm, "conv")
    goc = view.slot(Slot.GOC)
    assert goc is not None and set(goc.origin) == {"s", "m", "a"}
    assert view.slot(Slot.POST_ACT).op == "tanh"


def test_activation_before_bias_uses_the_pre_activation_slot() -> None:
    x = anekit.input("x", (1, 4, 5, 5))
    c = ops.conv2d(x, _w(4, 4, 1, 1), name="conv")
    y = ops.sigmoid(ops.add(ops.relu(c, name="r"), _w(1, 4, 1, 1), name="b"), name="s")
    cm = compile_checked(anekit.graph(y))
    view = layer_of(cm, "conv")
    assert [(s.slot, s.op) for s in view.epilogue] == [
        (Slot.PRE_ACT, "relu"),
        (Slot.GOC, "goc"),
        (Slot.POST_ACT, "sigmoid"),
    ]


def test_per_element_constant_is_its_own_elementwise_layer() -> None:
    """Only a scalar or per-channel constant is a gain/offset; a full tensor is not."""
    x = anekit.input("x", (1, 4, 5, 5))
    c = ops.conv2d(x, _w(4, 4, 1, 1), name="conv")
    y = ops.add(c, _w(1, 4, 5, 5), name="pos")
    cm = compile_checked(anekit.graph(y))
    assert layer_of(cm, "conv").epilogue == ()
    assert layer_of(cm, "pos").layer_type == "elementwise"


@pytest.mark.parametrize("producers_single_use", [True, False])
def test_concat_is_a_barrier_unless_it_qualifies(producers_single_use: bool) -> None:
    x = anekit.input("x", (1, 4, 5, 5))
    a = ops.conv2d(x, _w(4, 4, 1, 1), name="a")
    b = ops.conv2d(x, _w(4, 4, 1, 1), name="b")
    cat = ops.relu(ops.concat([a, b], axis=1, name="cat"), name="act")
    outs = [cat] if producers_single_use else [cat, a]
    cm = compile_checked(anekit.graph(outs))
    view = layer_of(cm, "cat")
    if producers_single_use:  # channel concat of single-use layers: it takes the relu
        assert [s.op for s in view.epilogue] == ["relu"]
    else:
        assert view.epilogue == ()
        assert layer_of(cm, "act").layer_type == "neuron"


def test_concat_on_another_axis_does_not_qualify() -> None:
    x = anekit.input("x", (1, 4, 5, 5))
    a = ops.conv2d(x, _w(4, 4, 1, 1), name="a")
    b = ops.conv2d(x, _w(4, 4, 1, 1), name="b")
    cm = compile_checked(anekit.graph(ops.relu(ops.concat([a, b], axis=2, name="cat"), name="act")))
    assert layer_of(cm, "cat").epilogue == ()


def test_output_transpose_fills_the_transpose_slot() -> None:
    x = anekit.input("x", (1, 4, 5, 6))
    c = ops.relu(ops.conv2d(x, _w(4, 4, 1, 1), name="conv"), name="r")
    cm = compile_checked(anekit.graph(ops.transpose(c, (0, 1, 3, 2), name="t")))
    (layer,) = layers(cm)
    assert [s.slot for s in layer_of(cm, "conv").epilogue][-1] == Slot.TRANSPOSE


def test_graph_output_ends_a_layer() -> None:
    x = anekit.input("x", (1, 4, 5, 5))
    c = ops.conv2d(x, _w(4, 4, 1, 1), name="conv")
    cm = compile_checked(anekit.graph([c, ops.relu(c, name="r")]))
    assert layer_of(cm, "conv").epilogue == ()
    assert set(cm.graph.output_names) == {"conv", "r"}
