"""The list scheduler on the seed's cases: diamonds, attention co-issue, ring-buffer priority."""

from __future__ import annotations

import dataclasses

import pytest

from anekit import targets
from anekit.cost.workloads import EngineGraphBuilder, attention_block
from anekit.ir.engine import Slot
from anekit.schedule import AllocState, LayerDag, layers_of, schedule_layers
from anekit.schedule.scheduler import ListScheduler

M4 = targets.get("m4")


def diamond(big_first: bool):
    """fork -> {big: 64->256->64 channels, small: 64->64->64} -> add, on a 16x16 map."""
    b = EngineGraphBuilder("diamond")
    x = b.input("x", (1, 64, 16, 16))
    fork = b.conv(x, 64, name="fork")
    branches = {}
    for kind in ("big", "small") if big_first else ("small", "big"):
        mid = b.conv(fork, 256 if kind == "big" else 64, name=f"{kind}1")
        branches[kind] = b.conv(mid, 64, name=f"{kind}2")
    out = b.layer("add", [branches["small"], branches["big"]], name="merge")
    return layers_of(b.build([out]))


def with_budget(t, nbytes: int):
    return dataclasses.replace(t, onchip_budget_bytes=nbytes)


@pytest.mark.parametrize("big_first", [True, False])
def test_diamond_whose_endpoints_fit_runs_its_larger_branch_first(big_first):
    s = schedule_layers(diamond(big_first), M4)
    assert s.order == ("fork", "big1", "big2", "small1", "small2", "merge")


def test_the_larger_branch_goes_second_when_its_own_peak_does_not_fit():
    # endpoints 32 KiB + 32 KiB fit; big branch peak 32 + 160 KiB and small 32 + 64 KiB:
    # a 150 KiB limit (200 KiB x 0.75) holds the small branch only
    s = schedule_layers(diamond(True), with_budget(M4, 200 * 1024))
    assert s.order == ("fork", "small1", "small2", "big1", "big2", "merge")


@pytest.mark.parametrize("big_first", [True, False])
def test_without_room_for_the_endpoints_the_graph_order_decides(big_first):
    # 40 KiB x 0.75 < 64 KiB of endpoints: the branch test has no preference
    s = schedule_layers(diamond(big_first), with_budget(M4, 40 * 1024))
    first = "big" if big_first else "small"
    assert s.order[1] == f"{first}1"


def test_attention_softmax_coissues_with_the_value_matmul():
    s = schedule_layers(layers_of(attention_block(128, 256)), M4)
    assert ("softmax", "v_proj") in s.coissue or ("v_proj", "softmax") in s.coissue
    assert s.layers["softmax"].unit == "planar" and s.layers["v_proj"].unit == "mac"
    pos = s.order.index("softmax")
    assert abs(s.order.index("v_proj") - pos) == 1


def test_attention_after_an_in_segment_norm_still_coissues_softmax_with_values():
    b = EngineGraphBuilder("block")
    x = b.input("x", (1, 1, 64, 128))
    xt = b.input("xt", (1, 1, 128, 64))
    h = b.layer("mul", [x, b.constant((1, 1, 1, 128))], name="norm")  # a planar fork
    q = b.linear(h, 128, name="q_proj")
    kt = b.layer("matmul", [b.constant((128, 128)), xt], name="k_proj")
    v = b.linear(h, 128, name="v_proj")
    scale = b.constant((1,), hint="scale")
    scores = b.layer("matmul", [q, kt], epilogue=[(Slot.GOC, "goc", [scale])], name="scores")
    probs = b.layer("softmax", [scores], {"axis": -1}, name="softmax")
    out = b.layer("matmul", [probs, v], name="value_matmul")
    s = schedule_layers(layers_of(b.build([out])), M4)
    pairs = {frozenset(p) for p in s.coissue}
    assert frozenset({"softmax", "v_proj"}) in pairs


def test_ring_members_are_scheduled_first_and_drain_the_ring():
    """P writes 2 MiB (over M1's 1.5 MiB limit) read row by row by a pool: a ring."""

    def build():
        b = EngineGraphBuilder("ring")
        x = b.input("x", (1, 4, 128, 128))
        y = b.input("y", (1, 4, 8, 8))
        a = b.layer("relu", [y], name="a")
        p = b.conv(x, 64, name="P")
        extra = b.layer("sigmoid", [a], name="X")
        c = b.layer("max_pool", [p], {"kernel": (2, 2), "strides": (2, 2)}, name="C")
        return layers_of(b.build([extra, c]))

    m1 = targets.get("m1")
    s = schedule_layers(build(), m1)
    assert s.order == ("P", "C", "a", "X")
    assert s.states["P"] == AllocState.RING
    assert "P" in s.rings and s.rings["P"] < s.layers["P"].output_bytes
    assert not s.streaming  # the ring keeps P and C within the budget
    roomy = schedule_layers(build(), M4)  # 32 MiB: no ring, plain priorities
    assert roomy.order == ("a", "X", "P", "C") and not roomy.rings


def test_priorities_follow_the_seed_tie_break_order():
    layers = diamond(True)
    dag = LayerDag(layers)
    sched = ListScheduler(dag, [lay.output_bytes for lay in dag.layers], 24 * 2**20)
    key = sched.priority(dag.index["fork"]).key()
    assert key == (0, 0, 0, 0, 0, -dag.index["fork"])
    sched._scheduled[dag.index["fork"]] = True
    sched._left_succ[dag.index["fork"]] = 2
    big, small = sched.priority(dag.index["big1"]), sched.priority(dag.index["small1"])
    assert big.branch_sibling == small.branch_sibling == -1  # one sibling pending each
    assert big.merge_sibling == small.merge_sibling == -1  # each waits for the other at merge
    assert big.branch_test > small.branch_test > 0  # footprints 160 KiB vs 64 KiB
    assert big.branch_test == (256 + 64) * 16 * 16 * 2
