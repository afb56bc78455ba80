"""The pass machinery: the rewriter's use index, patterns, the pipeline runner and its logs."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.errors import AnekitError, InternalError
from anekit.ir.graph import Graph
from anekit.passes.context import PassContext
from anekit.passes.pipeline import DEFAULT_PIPELINE, PASSES, run_pipeline, stamp_origins
from anekit.passes.rewrite import Rewriter, apply_rules, op, rule
from tests.passes.support import compile_checked, layers, row

RNG = np.random.default_rng(10)


def _ctx() -> PassContext:
    ctx = PassContext(targets.get("m4"))
    ctx.begin("test")
    return ctx


def _chain() -> Graph:
    x = anekit.input("x", (1, 3, 2, 2))
    return anekit.graph(ops.tanh(ops.sigmoid(ops.relu(x, name="r"), name="s"), name="t"))


def test_rewriter_keeps_the_use_index_and_erases_dead_producers() -> None:
    g = _chain()
    rw = Rewriter(g, _ctx())
    assert [u.name for u in rw.users("r")] == ["s"] and rw.single_use("r")
    assert rw.is_output("t") and not rw.single_use("t")
    y = rw.add("exp", ["x"], hint="e")
    rw.replace_uses("s", y)  # the sigmoid and then the relu lose their readers
    assert not rw.has("s") and not rw.has("r")
    assert [u.name for u in rw.users(y)] == ["t"]
    out = rw.build()
    out.validate()
    assert [n.op for n in out.nodes] == ["exp", "tanh"]


def test_pattern_matches_producers_and_readers() -> None:
    x = anekit.input("x", (2, 3))
    s = ops.sigmoid(x, name="s")
    g = anekit.graph([ops.mul(x, s, name="m")])
    rw = Rewriter(g, _ctx())
    swish = op("mul", inputs=(None, op("sigmoid", single_use=True)))
    found = swish.match(rw, rw.node("m"))
    assert [n.name for n in found] == ["m", "s"]
    assert op("mul", inputs=(op("sigmoid"),)).match(rw, rw.node("m")) is None
    shared = anekit.graph([ops.mul(x, s, name="m2"), s])  # the sigmoid has another reader
    rw2 = Rewriter(shared, _ctx())
    assert swish.match(rw2, rw2.node("m2")) is None


def test_rules_sweep_to_a_fixed_point_and_count_rewrites() -> None:
    @rule("relu", "sigmoid", "tanh")
    def to_identity(rw: Rewriter, node) -> bool:
        if rw.is_output(node.output):
            return False
        rw.replace_uses(node.output, node.inputs[0])
        return True

    ctx = _ctx()
    out = apply_rules(_chain(), ctx, [to_identity])
    assert [n.op for n in out.nodes] == ["tanh"]
    assert ctx.end(0.0).notes == ("to_identity x2",)


def test_pipeline_names_and_unknown_passes() -> None:
    assert set(DEFAULT_PIPELINE) == set(PASSES)
    with pytest.raises(AnekitError, match="unknown pass"):
        run_pipeline(_chain(), _ctx(), ["canonicalize", "optimize_everything"])


@pytest.mark.parametrize(
    ("passes", "message"),
    [
        (["canonicalize", "segment"], "pass 'segment' needs verdicts"),
        (["canonicalize", "validate", "segment"], "pass 'validate' needs engine_layers"),
        (["fuse_epilogues", "segment", "validate"], "pass 'segment' needs verdicts"),
    ],
)
def test_a_pipeline_lacking_a_needed_pass_is_an_error(passes: list[str], message: str) -> None:
    """Without validate, segment used to put every node on the CPU without a word."""
    with pytest.raises(AnekitError, match=message) as info:
        anekit.compile(anekit.graph([ops.relu(anekit.input("x", (1, 4, 2, 2)), name="y")]),
                       "m4", passes=passes)  # fmt: skip
    assert "before" in info.value.hint


def test_the_pipeline_returns_its_facts_and_the_context_holds_none() -> None:
    ctx = PassContext(targets.get("m4"))
    result = run_pipeline(stamp_origins(_chain()), ctx)
    assert set(result.verdicts) == set(result.placement) == {n.name for n in result.graph.nodes}
    assert [s.nodes for s in result.segments] == [tuple(n.name for n in result.graph.nodes)]
    assert not {"placement", "segments", "verdicts"} & set(vars(ctx))
    with pytest.raises(AnekitError, match="ends with the segment pass"):
        anekit.compile(_chain(), "m4", passes=["canonicalize"])


def test_check_mode_names_the_pass_that_broke_the_graph(monkeypatch) -> None:
    def broken(graph: Graph, ctx: PassContext) -> Graph:
        node = graph.nodes[0]
        return graph.replace(nodes=[node.with_(inputs=("nowhere",)), *graph.nodes[1:]])

    import anekit.passes.pipeline as pipeline

    monkeypatch.setattr(pipeline, "PASSES", {**PASSES, "broken": pipeline.Pass(broken)})
    with pytest.raises(InternalError, match="pass 'broken' produced an invalid graph"):
        pipeline.run_pipeline(_chain(), _ctx(), ["broken"], check=True)


def test_every_original_node_gets_a_row_with_a_reason_when_it_left() -> None:
    x = anekit.input("x", (1, 4, 6, 6))
    c = ops.conv2d(
        ops.identity(x, name="copy"),
        RNG.standard_normal((4, 4, 1, 1)).astype(np.float32),
        name="conv",
    )
    y = ops.relu(ops.add(c, 0.0, name="plus_zero"), name="act")
    cm = compile_checked(anekit.graph(y))
    assert [r.node for r in cm.ops] == ["copy", "conv", "plus_zero", "act"]
    assert (row(cm, "copy").placement, row(cm, "copy").reason) == (
        "removed",
        "an identity (canonicalize)",
    )
    assert row(cm, "plus_zero").reason == "add by its neutral element (canonicalize)"
    assert row(cm, "conv").placement == "ane" and row(cm, "act").placement == "folded"
    assert len(layers(cm)) == 1


def test_pass_log_records_every_pass_with_its_changes() -> None:
    ctx = PassContext(targets.get("m1"))
    run_pipeline(stamp_origins(_chain()), ctx)
    assert [r.name for r in ctx.records] == list(DEFAULT_PIPELINE)
    fuse = next(r for r in ctx.records if r.name == "fuse_epilogues")
    assert fuse.notes == ("neuron layers x1", "ops folded into epilogues x2")
    assert fuse.changes == 3
    segment = ctx.records[-1]
    assert segment.notes == ("1 ANE segment(s) = 1 dispatch(es), 0 CPU segment(s)",)


def test_pixel_shuffle_rank_six_transpose_runs_within_the_rank_limit() -> None:
    x = anekit.input("x", (1, 16, 5, 6))
    y = ops.reshape(
        ops.transpose(ops.reshape(x, (1, 4, 2, 2, 5, 6)), (0, 1, 4, 2, 5, 3)), (1, 4, 10, 12)
    )
    cm = compile_checked(anekit.graph(ops.relu(y, name="act")), "m4")
    assert cm.summary["cpu_ops"] == 0
    limit = targets.get("m4").limits.max_rank
    assert all(cm.graph.value(n.output).rank <= limit for n in layers(cm))
