"""The engine layer op: main op plus epilogue slots equals the unfused ops."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.errors import ShapeError
from anekit.ir.engine import EpilogueStep, LayerView, Slot, layer_attrs, layer_type_of


def test_conv_bias_relu_layer_matches_unfused() -> None:
    rng = np.random.default_rng(0)
    x = anekit.input("x", (1, 3, 6, 6))
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal((1, 5, 1, 1)).astype(np.float32)
    g = anekit.graph([ops.relu(ops.conv2d(x, w, padding=1) + b, name="y")])
    ed = g.edit()
    wname, bname = g.nodes[0].inputs[1], g.nodes[1].inputs[1]
    attrs = layer_attrs(
        "conv",
        g.nodes[0].attrs,
        2,
        [EpilogueStep(Slot.POST_ACT, "relu"), EpilogueStep(Slot.GOC, "goc", {}, (-1, 2))],
    )
    (y,) = ed.add("ane_layer", ["x", wname, bname], attrs)
    ed.replace_uses("y", y)
    fused = ed.build()
    assert [n.op for n in fused.nodes] == ["ane_layer"]
    view = LayerView(fused.nodes[0])
    assert [s.slot for s in view.epilogue] == [Slot.GOC, Slot.POST_ACT]  # sorted into slot order
    assert view.unit == "mac" and view.layer_type == "conv"
    assert (
        view.operand(view.slot(Slot.GOC), 1) == bname
        and view.operand(view.slot(Slot.GOC), 0) is None
    )
    feeds = {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    np.testing.assert_allclose(fused.run(feeds)["y"], g.run(feeds)["y"], rtol=1e-6, atol=1e-6)


def test_duplicate_slot_is_rejected() -> None:
    x = anekit.input("x", (1, 4))
    g = anekit.graph([ops.relu(x)])
    ed = g.edit()
    attrs = layer_attrs(
        "identity",
        {},
        1,
        [EpilogueStep(Slot.POST_ACT, "relu"), EpilogueStep(Slot.POST_ACT, "tanh")],
    )
    with pytest.raises(ShapeError, match="distinct"):
        ed.add("ane_layer", ["x"], attrs)


def test_layer_types() -> None:
    assert layer_type_of("conv") == "conv"
    assert layer_type_of("gelu") == "neuron"
    with pytest.raises(KeyError):
        layer_type_of("lstm_nonexistent")
