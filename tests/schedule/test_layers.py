"""layers_of: what the scheduler reads off an engine graph (work, bytes, geometry, segments)."""

from __future__ import annotations

import pytest

from anekit.cost.workloads import EngineGraphBuilder, attention_block
from anekit.errors import InternalError
from anekit.passes.results import Segment
from anekit.schedule import LayerInfo, Operand, layers_of, link_layers


def test_conv_work_bytes_and_row_pattern():
    b = EngineGraphBuilder("c")
    x = b.input("x", (1, 8, 20, 12))
    y = b.conv(x, 16, kernel=3, stride=1, activation="relu")
    (lay,) = layers_of(b.build([y]))
    assert lay.unit == "mac" and lay.layer_type == "conv"
    assert lay.flops == 2 * (16 * 20 * 12) * (8 * 3 * 3)
    assert lay.weight_bytes == 16 * 8 * 3 * 3 * 2  # fp16 weights
    assert lay.output_bytes == 16 * 20 * 12 * 2 and lay.out_shape == (1, 16, 20, 12)
    (op,) = lay.operands
    assert op.producer is None and op.nbytes == 8 * 20 * 12 * 2
    assert op.row_geometry == (8, 12)
    assert op.first_rows == 2  # a 3x3 window with one row of padding on top
    assert lay.segment_output


def test_attention_layers_units_and_operand_roles():
    lays = {lay.name: lay for lay in layers_of(attention_block(64, 32))}
    assert {n: lay.unit for n, lay in lays.items()} == {
        "q_proj": "mac",
        "k_proj": "mac",
        "v_proj": "mac",
        "scores": "mac",
        "softmax": "planar",
        "value_matmul": "mac",
    }
    scores = lays["scores"]
    a, bop = scores.operands
    assert a.row_geometry == (1, 32) and not a.weight_operand
    assert bop.row_geometry is None and bop.weight_operand  # kT is read whole
    assert scores.flops == 2 * 64 * 64 * 32
    assert lays["softmax"].operands[0].row_geometry == (1, 64)  # softmax over the last axis
    assert lays["q_proj"].consumers == ("scores",)
    assert lays["value_matmul"].producers == ("softmax", "v_proj")


def test_softmax_over_rows_needs_the_whole_tensor():
    b = EngineGraphBuilder("s")
    x = b.input("x", (1, 4, 16, 8))
    y = b.layer("softmax", [x], {"axis": 2})
    (lay,) = layers_of(b.build([y]))
    assert lay.operands[0].row_geometry is None and lay.operands[0].first_rows == 16


def test_segment_boundaries_decide_memory_inputs_and_outputs():
    b = EngineGraphBuilder("seg")
    x = b.input("x", (1, 8, 4, 4))
    a = b.conv(x, 8, name="a")
    c = b.conv(a, 8, name="c")
    d = b.conv(c, 8, name="d")
    g = b.build([d])
    first = Segment(0, "ane", ("a", "c"), ("x",), ("c",))
    second = Segment(1, "ane", ("d",), ("c",), ("d",))
    la, lc = layers_of(g, first)
    assert not la.segment_output and lc.segment_output  # c is read by the next segment
    (ld,) = layers_of(g, second)
    assert ld.operands[0].producer is None  # from memory: produced by another segment


def test_link_layers_rejects_bad_producers():
    op = Operand("t", 2, "later")
    lay = LayerInfo("x", "planar", "neuron", "relu", 1, (op,), "y", 2, (1, 1, 1, 1))
    with pytest.raises(InternalError, match="not an earlier layer"):
        link_layers([lay])
    dup = LayerInfo("x", "planar", "neuron", "relu", 1, (), "y", 2, (1, 1, 1, 1))
    with pytest.raises(InternalError, match="used twice"):
        link_layers([dup, dup])
