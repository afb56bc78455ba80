"""Canonicalization: folding (bounded), identities, casts, selects, written-out activations,
BatchNorm and pad folding, channel slices pushed into weights, and the removal log."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.frontend.builder.tensor import record
from anekit.passes.context import PassContext, PassOptions
from anekit.passes.pipeline import run_pipeline, stamp_origins
from tests.passes.support import EXACT_RTOL, compile_checked, random_feeds, rel_err, row

RNG = np.random.default_rng(6)


def _canonical(graph, **options):
    ctx = PassContext(targets.get("m4"), PassOptions(**options))
    out = run_pipeline(stamp_origins(graph), ctx, ["canonicalize"], check=True).graph
    feeds = random_feeds(graph)
    want, got = graph.run(feeds), out.run(feeds)
    for k in want:
        assert rel_err(got[k], want[k]) <= EXACT_RTOL, k
    return out, ctx


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.5).astype(np.float32)


def test_constant_subgraph_folds_and_the_log_says_so() -> None:
    x = anekit.input("x", (2, 3))
    c = ops.mul(anekit.constant(_w(2, 3)), 2.0, name="scale_w")
    out, ctx = _canonical(anekit.graph(ops.add(x, c, name="sum")))
    assert out.op_histogram() == {"add": 1}
    assert ctx.last_event("scale_w").detail == "folded into a constant at compile time"


def test_folding_never_makes_a_constant_larger_than_the_limit_and_its_inputs() -> None:
    x = anekit.input("x", (64, 64))
    big = ops.expand(anekit.constant(np.ones((1, 64), np.float32)), (64, 64))
    out, ctx = _canonical(anekit.graph(ops.add(x, big)), fold_limit=1000)
    assert "expand" in out.op_histogram()
    assert any("not folded" in n and "folding limit (1,000)" in n for n in ctx.records[-1].notes)
    small, _ = _canonical(anekit.graph(ops.add(x, big)), fold_limit=64 * 64)
    assert "expand" not in small.op_histogram()


def test_neutral_elements_and_identities_vanish() -> None:
    x = anekit.input("x", (2, 3))
    y = ops.div(ops.mul(ops.sub(ops.add(ops.identity(x), 0.0), 0.0), 1.0), 1.0)
    out, _ = _canonical(anekit.graph(ops.relu(y)))
    assert out.op_histogram() == {"relu": 1}


def test_a_broadcasting_neutral_element_is_kept() -> None:
    x = anekit.input("x", (1, 3))
    out, _ = _canonical(anekit.graph(ops.relu(ops.add(x, np.zeros((4, 3), np.float32)))))
    assert "add" in out.op_histogram()


def test_only_exact_cast_round_trips_are_removed() -> None:
    x = anekit.input("x", (4,), "fp16")
    exact = ops.cast(ops.cast(x, "fp32"), "fp16")  # fp16 -> fp32 -> fp16 keeps every value
    y = anekit.input("y", (4,))
    lossy = ops.cast(ops.cast(y, "fp16"), "fp32")  # fp32 -> fp16 rounds: must stay
    out, _ = _canonical(anekit.graph([ops.relu(exact), ops.relu(lossy)]))
    assert out.op_histogram() == {"relu": 2, "cast": 2}
    assert [n.op for n in out.nodes if n.inputs[0] == "x"] == ["relu"]


def test_constant_powers_become_multiplies_and_roots() -> None:
    x = anekit.input("x", (3, 4))
    ys = [ops.pow(ops.abs(x), float(e)) for e in (2, 3, 0.5, -0.5, -1)]
    out, _ = _canonical(anekit.graph(ys))
    assert "pow" not in out.op_histogram()


def test_select_with_a_huge_negative_fill_becomes_an_additive_mask() -> None:
    x = anekit.input("x", (1, 2, 4, 4))
    keep = np.tril(np.ones((4, 4), bool))
    fill = np.float32(np.finfo(np.float32).min)
    y = ops.softmax(ops.where(keep, x, fill, name="sel"))
    out, _ = _canonical(anekit.graph(y))
    assert "where" not in out.op_histogram() and out.op_histogram()["add"] == 1


def test_nan_guard_of_a_masked_softmax_is_removed_only_when_it_cannot_fire() -> None:
    x = anekit.input("x", (1, 2, 4, 4))

    def guarded(mask):
        s = ops.softmax(ops.add(x, mask))
        return anekit.graph(ops.where(record("isnan", [s]), np.float32(0), s))

    causal = np.where(np.tril(np.ones((4, 4), bool)), 0, -np.inf).astype(np.float32)
    out, _ = _canonical(guarded(causal))
    assert set(out.op_histogram()) == {"add", "softmax"}
    blocked = causal.copy()
    blocked[2] = -np.inf  # a fully masked row: the guard can fire
    out, _ = _canonical(guarded(blocked))
    assert "where" in out.op_histogram()


def test_gather_of_a_contiguous_index_range_is_a_slice() -> None:
    x = anekit.input("x", (2, 7, 4))
    first = ops.gather(x, np.array(0), axis=1)  # a scalar index drops the axis
    middle = ops.gather(x, np.array([2, 3, 4]), axis=1)
    scattered = ops.gather(x, np.array([0, 3]), axis=1)
    out, _ = _canonical(anekit.graph([first, middle, scattered]))
    assert out.op_histogram().get("gather") == 1 and out.op_histogram()["slice"] == 2


def test_gather_of_a_contiguous_index_block_is_a_slice_reshaped() -> None:
    """Any index shape whose entries run contiguously in C order (ConvNeXt's as_strided: a
    [1, C, 1, 1] arange); a block that runs out of order stays a gather. Checked by value."""
    x = anekit.input("x", (3, 12, 2))
    block = ops.gather(x, np.arange(2, 10).reshape(1, 4, 2, 1), axis=1)
    shuffled = ops.gather(x, np.arange(2, 10).reshape(2, 4).T.copy(), axis=1)
    g = anekit.graph([block, shuffled])
    out, _ = _canonical(g)
    assert out.op_histogram().get("gather") == 1 and out.op_histogram().get("slice") == 1
    feeds = {"x": RNG.standard_normal((3, 12, 2)).astype(np.float32)}
    want, got = g.run(feeds), out.run(feeds)
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_common_subexpressions_are_merged() -> None:
    x = anekit.input("x", (2, 3))
    m = np.full((1, 3), 2.0, np.float32)
    a = ops.add(ops.mul(x, m), 1.0)
    b = ops.add(ops.mul(x, m.copy()), 1.0)  # equal constants under different names
    out, ctx = _canonical(anekit.graph(ops.sub(a, b)))
    assert out.op_histogram() == {"mul": 1, "add": 1, "sub": 1}


@pytest.mark.parametrize("form", ["div", "mul", "half_first"])
def test_written_out_erf_gelu_is_raised(form: str) -> None:
    x = anekit.input("x", (2, 8))
    inner = ops.div(x, 1.4142135) if form == "div" else ops.mul(x, 0.70710677)
    plus = ops.add(ops.erf(inner), 1.0)
    y = ops.mul(ops.mul(x, 0.5), plus) if form == "half_first" else ops.mul(ops.mul(x, plus), 0.5)
    out, _ = _canonical(anekit.graph(ops.relu(y)))
    (g,) = [n for n in out.nodes if n.op == "gelu"]
    assert g.attrs["approximate"] == "none" and len(out.nodes) == 2


@pytest.mark.parametrize("cube", ["pow", "muls"])
def test_written_out_tanh_gelu_is_raised(cube: str) -> None:
    x = anekit.input("x", (2, 8))
    x3 = ops.pow(x, 3.0) if cube == "pow" else ops.mul(ops.mul(x, x), x)
    inner = ops.mul(ops.add(x, ops.mul(x3, 0.044715)), 0.7978845608)
    y = ops.mul(ops.mul(x, 0.5), ops.add(ops.tanh(inner), 1.0))
    out, _ = _canonical(anekit.graph(ops.relu(y)))
    assert [n.op for n in out.nodes] == ["gelu", "relu"] and out.nodes[0].attrs[
        "approximate"
    ] == "tanh"


def test_swish_is_raised_to_silu() -> None:
    x = anekit.input("x", (2, 8))
    out, _ = _canonical(anekit.graph(ops.mul(x, ops.sigmoid(x))))
    assert out.op_histogram() == {"silu": 1}


def test_batchnorm_after_a_linear_folds_into_its_weights() -> None:
    x = anekit.input("x", (3, 8))
    h = ops.linear(x, _w(6, 8), _w(6), name="fc")
    y = ops.batch_norm(h, _w(6), np.abs(_w(6)) + 0.5, _w(6), _w(6), name="bn")
    out, ctx = _canonical(anekit.graph(y))
    assert "batch_norm" not in out.op_histogram()
    assert "bn" in ctx.absorbed


def test_zero_pad_before_a_conv_becomes_its_padding() -> None:
    x = anekit.input("x", (1, 2, 5, 5))
    p = ops.pad(x, (0, 0, 1, 2, 0, 0, 1, 2), name="pad")
    y = ops.conv2d(p, _w(3, 2, 3, 3), name="conv")
    out, _ = _canonical(anekit.graph(y))
    (conv,) = out.nodes
    assert conv.op == "conv" and conv.attrs["pads"] == (1, 2, 1, 2)
    cm = compile_checked(anekit.graph(y))
    assert row(cm, "pad").placement == "folded" and "padding of conv" in row(cm, "pad").reason


def test_fused_qkv_projection_and_split_become_three_convs() -> None:
    x = anekit.input("x", (1, 8, 32))
    qkv = ops.linear(x, _w(96, 32), _w(96), name="qkv")
    q, k, v = ops.split(qkv, [32, 32, 32], axis=2)
    g = anekit.graph([ops.relu(q), ops.sigmoid(k), ops.tanh(v)])
    cm = compile_checked(g)
    convs = [n for n in cm.graph.nodes if n.op == "ane_layer" and n.attrs["main"] == "conv"]
    assert len(convs) == 3
    assert not any(n.attrs["main"] == "slice" for n in cm.graph.nodes if n.op == "ane_layer")
    # the builder's linear is matmul_0 (weights) + qkv (the bias add, now three GOC offsets)
    assert row(cm, "matmul_0").reason == "cut into 3 parts by the slices that read it"
    assert row(cm, "qkv").placement == "folded"


def test_scalars_move_out_of_a_matmul_and_merge() -> None:
    a = anekit.input("a", (2, 4, 8))
    b = anekit.input("b", (2, 8, 4))
    y = ops.matmul(ops.mul(a, 0.5), ops.mul(b, 0.25))
    out, _ = _canonical(anekit.graph(y))
    assert [n.op for n in out.nodes] == ["matmul", "mul"]
    assert float(out.constants[out.nodes[1].inputs[1]]) == 0.125
