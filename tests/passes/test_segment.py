"""Segmentation: device grouping with few transitions, hard cuts, layout-only segments, I/O."""

from __future__ import annotations

import numpy as np

import anekit
from anekit import ops, targets
from anekit.frontend.builder.tensor import record
from anekit.passes.segment import LAYOUT_ONLY_REASON, group_by_device
from tests.passes.support import compile_checked, row, with_features

RNG = np.random.default_rng(4)


def _conv(x, name):
    return ops.conv2d(x, RNG.standard_normal((4, 4, 1, 1)).astype(np.float32), name=name)


def test_independent_cpu_work_is_grouped_to_avoid_transitions() -> None:
    """Two branches, each engine -> CPU -> engine: a naive order alternates devices 5 times;
    grouping runs both CPU ops in one CPU segment between two engine segments."""
    x = anekit.input("x", (1, 4, 4, 4))
    a = record("floor", [_conv(x, "a1")], name="fa")  # floor has no engine form
    b = record("floor", [_conv(x, "b1")], name="fb")
    y = ops.add(_conv(a, "a2"), _conv(b, "b2"), name="sum")
    cm = compile_checked(anekit.graph(y), "m4")
    devices = [s.device for s in cm.segments]
    assert devices == ["ane", "cpu", "ane"]
    assert cm.summary["dispatches"] == 2
    assert set(cm.segments[1].nodes) == {"fa", "fb"}
    # the graph's node order is the execution order, segment by segment
    order = [n.name for n in cm.graph.nodes]
    assert order == [n for s in cm.segments for n in s.nodes]


def test_segment_inputs_and_outputs_are_the_values_crossing_it() -> None:
    x = anekit.input("x", (1, 4, 4, 4))
    mid = record("floor", [_conv(x, "c1")], name="f")
    y = _conv(mid, "c2")
    cm = compile_checked(anekit.graph(y), "m4")
    first, cpu, last = cm.segments
    assert first.inputs == ("x",) and cpu.inputs == first.outputs
    assert last.inputs == cpu.outputs == ("f",)
    assert last.outputs == tuple(cm.graph.output_names)
    for seg in cm.segments:
        for n in seg.nodes:
            assert cm.placement[n].segment == seg.index and cm.placement[n].device == seg.device


def test_fused_attention_is_a_segment_of_its_own() -> None:
    """ane-compiler: scaled-dot-product attention is a hard cut between programs."""
    t = next(t for t in targets.all_targets() if t.supports("sdpa"))
    q = anekit.input("q", (1, 2, 8, 16))
    k = anekit.input("k", (1, 2, 8, 16))
    v = anekit.input("v", (1, 2, 8, 16))
    y = ops.relu(ops.attention(ops.relu(q), k, v, name="attn"), name="after")
    cm = compile_checked(anekit.graph(y), t)
    assert row(cm, "attn").placement == "ane"
    kinds = [[cm.graph.node(n).attrs["layer_type"] for n in s.nodes] for s in cm.segments]
    assert kinds == [["neuron"], ["sdpa"], ["neuron"]]
    assert cm.summary["dispatches"] == 3
    # without the fused op the attention is decomposed and nothing cuts the program
    plain = compile_checked(anekit.graph(y), with_features(t, sdpa=False))
    assert plain.summary["dispatches"] == 1


def test_layout_only_engine_segment_between_cpu_ops_runs_on_the_cpu() -> None:
    x = anekit.input("x", (1, 4, 4, 4))
    f = record("floor", [x], name="f1")
    t = ops.transpose(f, (0, 1, 3, 2), name="t")
    y = record("floor", [t], name="f2")
    cm = compile_checked(anekit.graph(y), "m4")
    assert cm.summary["dispatches"] == 0
    assert (row(cm, "t").placement, row(cm, "t").reason) == ("cpu", LAYOUT_ONLY_REASON)


def test_grouping_respects_dependencies() -> None:
    x = anekit.input("x", (1, 4, 4, 4))
    y = _conv(record("floor", [_conv(x, "c1")], name="f"), "c2")
    g = anekit.graph(y)
    device = {n.name: ("cpu" if n.op == "floor" else "ane") for n in g.nodes}
    groups = group_by_device(g, device)
    assert [[n.name for n in nodes] for _, nodes in groups] == [["c1"], ["f"], ["c2"]]


def test_input_only_cpu_work_runs_before_the_engine_segment() -> None:
    """A CPU op that reads only graph inputs (a label one-hot, an index fix-up) runs first:
    one CPU and one engine segment, where taking the engine work first needs three."""
    x = anekit.input("x", (1, 4, 4, 4))
    x2 = anekit.input("x2", (1, 4, 4, 4))
    y = ops.add(_conv(x, "c1"), _conv(record("floor", [x2], name="f"), "c2"), name="sum")
    cm = compile_checked(anekit.graph(y), "m4")
    assert [s.device for s in cm.segments] == ["cpu", "ane"]
    assert cm.segments[0].nodes == ("f",)


def test_input_only_engine_work_runs_in_the_segment_that_reads_it() -> None:
    """Engine work that reads only graph inputs runs just before its reader, so its input
    crosses into that one segment (a state input read once stays on its surface)."""
    x = anekit.input("x", (1, 4, 4, 4))
    x2 = anekit.input("x2", (1, 4, 4, 4))
    late = ops.relu(x2, name="late")
    y = ops.add(_conv(record("floor", [_conv(x, "c1")], name="f"), "c2"), late, name="sum")
    cm = compile_checked(anekit.graph(y), "m4")
    assert [s.device for s in cm.segments] == ["ane", "cpu", "ane"]
    readers = [s.index for s in cm.segments if "x2" in s.inputs]
    assert readers == [2]
    assert cm.placement[row(cm, "late").layer.split(", ")[0]].segment == 2


def test_a_reduction_of_early_work_runs_early_when_that_moves_fewer_bytes() -> None:
    """c1's activation feeds a CPU op and, through a small reduction, the last engine
    segment: the reduction runs in the first segment (the activation crosses into the
    CPU segment only, four values into the last), not in its latest phase (the
    activation would be carried into the last segment as well), as a weight gradient
    runs where its activations are rather than carrying them to the update."""
    x = anekit.input("x", (1, 4, 32, 32))
    c1 = _conv(x, "c1")
    r = ops.reduce_mean(c1, axes=(2, 3), keepdims=True, name="r")
    y = ops.add(_conv(record("floor", [c1], name="f"), "c2"), r, name="sum")
    cm = compile_checked(anekit.graph(y), "m4")
    assert [s.device for s in cm.segments] == ["ane", "cpu", "ane"]
    assert cm.placement[row(cm, "r").layer.split(", ")[0]].segment == 0
    first, _, last = cm.segments
    assert first.outputs == ("c1", "r") and set(last.inputs) == {"f", "r"}
