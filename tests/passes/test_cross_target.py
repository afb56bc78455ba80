"""Cross-target placement: gated ops follow the chip database, chip by chip."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.passes.validate import FEATURE_GATES
from tests.passes.support import compile_checked, layers, row, with_features

RNG = np.random.default_rng(3)


def _upsampling_net():
    x = anekit.input("x", (1, 4, 6, 6))
    c = ops.relu(ops.conv2d(x, RNG.standard_normal((4, 4, 1, 1)).astype(np.float32), name="c1"))
    # bilinear with aligned corners: a chip without resize has no exact form for it (whole-
    # factor nearest and half-pixel bilinear upsampling are legalised there,
    # tests/passes/test_engine_forms.py)
    up = ops.resize(
        c, (1, 4, 12, 12), mode="linear", coordinate_transformation_mode="align_corners", name="up"
    )
    y = ops.conv2d(up, RNG.standard_normal((4, 4, 3, 3)).astype(np.float32), padding=1, name="c2")
    return anekit.graph(y)


def test_resize_runs_on_the_texture_engine_exactly_where_the_database_says() -> None:
    graph = _upsampling_net()
    outcomes = set()
    for t in targets.all_targets():
        cm = compile_checked(graph, t)
        r = row(cm, "up")
        if t.supports("resize"):
            assert (r.placement, r.reason) == ("ane", None), t.name
            assert cm.summary["dispatches"] == 1
        else:
            assert (r.placement, r.reason) == ("cpu", FEATURE_GATES["resize"][2]), t.name
            # the convs on either side stay on the engine: two programs around the CPU op
            assert row(cm, "c1").placement == row(cm, "c2").placement == "ane"
            assert cm.summary["dispatches"] == 2
        outcomes.add(r.placement)
    assert outcomes == {"ane", "cpu"}, "the database should gate resize on some chips only"


def test_cubic_resize_is_refused_even_where_resize_exists() -> None:
    x = anekit.input("x", (1, 2, 4, 4))
    g = anekit.graph(ops.resize(x, (1, 2, 8, 8), mode="cubic", name="up"))
    t = next(t for t in targets.all_targets() if t.supports("resize"))
    r = row(compile_checked(g, t), "up")
    assert (r.placement, r.reason) == (
        "cpu",
        "resize mode cubic is not supported on this architecture",
    )


def _softmax_net():
    x = anekit.input("x", (1, 8, 1, 16))
    s = ops.softmax(
        ops.conv2d(x, RNG.standard_normal((8, 8, 1, 1)).astype(np.float32)), axis=1, name="sm"
    )
    return anekit.graph(s)


def test_softmax_placement_follows_the_database_on_every_chip() -> None:
    graph = _softmax_net()
    for t in targets.all_targets():
        cm = compile_checked(graph, t)
        softmax_layers = [n for n in layers(cm) if n.attrs["main"] == "softmax"]
        assert bool(softmax_layers) == t.supports("softmax"), t.name
        assert row(cm, "sm").placement == "ane"


@pytest.mark.parametrize("decompose", [True, False])
def test_softmax_on_a_target_that_gates_it(decompose: bool) -> None:
    """ane-compiler table 22.5: softmax is rejected on older targets (none in the database)."""
    graph = _softmax_net()
    old = with_features("m1", softmax=False)
    cm = compile_checked(graph, old, decompose_gated_softmax=decompose)
    r = row(cm, "sm")
    if decompose:  # max-subtracted exp / reduce_sum / div, all engine layers
        mains = sorted(n.attrs["main"] for n in layers(cm))
        assert "softmax" not in mains and {"exp", "reduce_max", "reduce_sum", "div"} <= {
            m for n in layers(cm) for m in [n.attrs["main"], *(s.op for s in n.attrs["epilogue"])]
        }
        assert r.placement == "ane" and "not native on this target" in r.reason
    else:
        assert (r.placement, r.reason) == (
            "cpu",
            "Softmax is not supported by this ANE architecture",
        )
        assert [d.message for d in cm.diagnostics] == [
            "Softmax is not supported by this ANE architecture"
        ]


def test_instance_norm_stays_native_or_is_decomposed_by_its_gate() -> None:
    x = anekit.input("x", (1, 4, 5, 5))
    g = anekit.graph(
        ops.instance_norm(x, np.ones(4, np.float32), np.zeros(4, np.float32), name="inorm")
    )
    native = compile_checked(g, "m4")
    assert targets.get("m4").supports("instance_norm")
    assert [n.attrs["main"] for n in layers(native)] == ["instance_norm"]
    gated = compile_checked(g, with_features("m4", instance_norm=False))
    assert "instance_norm" not in [n.attrs["main"] for n in layers(gated)]
    assert row(gated, "inorm").placement == "ane"
