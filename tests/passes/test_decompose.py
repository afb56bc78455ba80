"""Decompositions: each one exact against the op it replaces, except the documented GELU/erf
approximations, whose error bounds are checked here."""

from __future__ import annotations

import math

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.compiler import compile as compile_model
from anekit.frontend.builder.tensor import record
from anekit.ir.ops.special import erf
from anekit.passes.context import PassContext, PassOptions
from anekit.passes.decompose import ERF_TANH_MAX_ABS_ERROR, GELU_TANH_MAX_ABS_ERROR, decompose
from anekit.passes.pipeline import stamp_origins
from tests.passes.support import EXACT_RTOL, random_feeds, rel_err, row, with_features

RNG = np.random.default_rng(5)


def _decomposed(graph, target="m4", **options):
    ctx = PassContext(targets.get(target), PassOptions(**options))
    ctx.begin("decompose")
    out = decompose(stamp_origins(graph), ctx)
    out.validate()
    return out


def _assert_exact(graph, decomposed, gone: str) -> None:
    assert gone not in decomposed.op_histogram(), decomposed.pretty()
    feeds = random_feeds(graph)
    want, got = graph.run(feeds), decomposed.run(feeds)
    for k in want:
        assert rel_err(got[k], want[k]) <= EXACT_RTOL, k


def _p(*shape: int, positive: bool = False) -> np.ndarray:
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


X3 = (2, 5, 12)
X4 = (1, 6, 4, 5)
CASES = {
    "layer_norm": (X3, lambda x: ops.layer_norm(x, _p(12), _p(12))),
    "layer_norm over two axes": (X3, lambda x: ops.layer_norm(x, _p(5, 12), None, axis=-2)),
    "rms_norm": (X3, lambda x: ops.rms_norm(x, _p(12))),
    "group_norm": (X4, lambda x: ops.group_norm(x, 3, _p(6), _p(6))),
    "batch_norm": (X4, lambda x: ops.batch_norm(x, _p(6), _p(6, positive=True), _p(6), _p(6))),
    "log_softmax": (X3, lambda x: ops.log_softmax(x, axis=1)),
    "hard_swish": (X3, lambda x: ops.hard_swish(x * 4.0)),
    "mish": (X3, lambda x: record("mish", [x])),
    "selu": (X3, lambda x: record("selu", [x])),
    "celu": (X3, lambda x: record("celu", [x], {"alpha": 0.7})),
    "softsign": (X3, lambda x: record("softsign", [x])),
    "prelu": (X4, lambda x: record("prelu", [x, _p(1, 6, 1, 1)])),
    "split": (X3, lambda x: ops.concat(list(ops.split(x, [5, 7], axis=2))[::-1], axis=2)),
    "reduce_l2": (X3, lambda x: record("reduce_l2", [x], {"axes": (2,)})),
    "reduce_l1": (X3, lambda x: record("reduce_l1", [x], {"axes": (1,), "keepdims": False})),
    "reduce_log_sum_exp": (
        X3,
        lambda x: record("reduce_log_sum_exp", [x], {"axes": (2,), "keepdims": False}),
    ),
    "lrn": (X4, lambda x: record("lrn", [x], {"size": 3, "alpha": 0.3, "beta": 0.75, "bias": 2.0})),
    "expand": ((1, 1, 5), lambda x: ops.expand(x, (1, 4, 5))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_decomposition_is_exact(case: str) -> None:
    shape, build = CASES[case]
    x = anekit.input("x", shape)
    g = anekit.graph(build(x))
    first = g.nodes[-1].op if case != "split" else "split"
    op = {"layer_norm over two axes": "layer_norm"}.get(case, case)
    _assert_exact(g, _decomposed(g), op if op in g.op_histogram() else first)


def test_instance_norm_and_softmax_decompose_only_where_gated() -> None:
    x = anekit.input("x", X4)
    g = anekit.graph([ops.instance_norm(x, _p(6), _p(6)), ops.softmax(x, axis=1)])
    kept = _decomposed(g, "m4")
    assert {"instance_norm", "softmax"} <= set(kept.op_histogram())
    old = with_features("m4", instance_norm=False, softmax=False)
    _assert_exact(g, _decomposed(g, old), "instance_norm")
    assert "softmax" not in _decomposed(g, old).op_histogram()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_attention_uses_an_explicit_finite_additive_mask(causal: bool, mask: str | None) -> None:
    q = anekit.input("q", (1, 2, 6, 8))
    k = anekit.input("k", (1, 2, 7, 8))
    v = anekit.input("v", (1, 2, 7, 4))
    m = None
    if mask == "bool":  # every row keeps at least one position (a fully masked row differs)
        keep = RNG.random((1, 1, 6, 7)) > 0.5
        keep[..., 0] = True  # the causal mask keeps column 0 too
        m = keep
    elif mask == "float":
        m = _p(1, 1, 6, 7)
    g = anekit.graph(ops.attention(q, k, v, m, causal=causal, scale=0.3))
    target = "m1"  # no fused attention in M1's MIL dialect
    d = _decomposed(g, target)
    _assert_exact(g, d, "attention")
    for name, arr in d.constants.items():
        assert np.isfinite(arr).all(), f"{name} holds a non-finite value"
    mask_values = [a.min() for a in d.constants.values() if a.size > 1 and a.min() < -1000]
    assert all(v == pytest.approx(-1e4) for v in mask_values)
    assert bool(mask_values) == (causal or mask == "bool")


def test_attention_stays_fused_where_the_target_runs_it_exactly() -> None:
    q = anekit.input("q", (1, 2, 6, 8))
    g = anekit.graph(ops.attention(q, q, q))
    t = next(t for t in targets.all_targets() if t.supports("sdpa"))
    assert "attention" in _decomposed(g, t).op_histogram()
    causal = anekit.graph(ops.attention(q, q, q, causal=True))
    assert "attention" not in _decomposed(causal, t).op_histogram()  # the fused op ignores it


def test_gelu_tanh_approximation_error_bound() -> None:
    """The documented bound, checked against math.erf in float64 on a fine grid."""
    x = np.linspace(-12.0, 12.0, 240_001)
    exact = 0.5 * x * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    g = anekit.graph(ops.gelu(anekit.input("x", x.shape)))
    approx = _decomposed(g).run({"x": x.astype(np.float32)})
    (out,) = approx.values()
    err = np.abs(out.astype(np.float64) - exact)
    assert err.max() <= GELU_TANH_MAX_ABS_ERROR
    assert err.max() > 0.9 * GELU_TANH_MAX_ABS_ERROR  # the bound is tight, not padded
    assert abs(x[err.argmax()]) == pytest.approx(2.70, abs=0.02)


def test_lone_erf_tanh_form_error_bound() -> None:
    z = np.linspace(-8.0, 8.0, 160_001).astype(np.float32)
    g = anekit.graph(ops.erf(anekit.input("z", z.shape)))
    (out,) = _decomposed(g).run({"z": z}).values()
    exact = np.array([math.erf(float(v)) for v in z])
    err = np.abs(out.astype(np.float64) - exact)
    assert 0.9 * ERF_TANH_MAX_ABS_ERROR < err.max() <= ERF_TANH_MAX_ABS_ERROR


def test_gelu_is_kept_exact_when_asked() -> None:
    g = anekit.graph(ops.gelu(anekit.input("x", (4, 8))))
    d = _decomposed(g, approximate_gelu=False)
    _assert_exact(g, d, "erf")
    assert d.nodes[-1].attrs["approximate"] == "none"


def test_check_reports_the_gelu_approximation() -> None:
    x = anekit.input("x", (1, 8, 1, 4))
    g = anekit.graph(ops.gelu(ops.conv2d(x, _p(8, 8, 1, 1), name="conv"), name="act"))
    cm = compile_model(g, "m4")
    r = row(cm, "act")
    assert r.placement == "folded"
    assert r.reason == (
        "post-act slot of layer 'conv'; exact GELU replaced by its tanh form "
        f"(max abs error {GELU_TANH_MAX_ABS_ERROR:g})"
    )
    feeds = random_feeds(g)
    err = np.abs(cm.run(feeds)["act"] - g.run(feeds)["act"]).max()
    assert 0 < err <= GELU_TANH_MAX_ABS_ERROR


def test_erf_reference_kernel_agrees_with_math_erf() -> None:
    """The bounds above lean on the IR's erf kernel being exact to ~1e-7."""
    z = np.linspace(-6, 6, 10_001)
    assert np.abs(erf(z) - np.array([math.erf(v) for v in z])).max() < 2e-7


@pytest.mark.parametrize(
    "pads",
    [
        (0, 1, 2, 0, 3, 1),  # both sides of two axes
        (0, -1, 2, 0, 0, -2),  # crops, then wraps
        (0, 7, 0, 0, 9, 13),  # wider than the axes (5 and 12): the axis repeats
    ],
)
def test_wrap_pad_is_slices_and_concats(pads) -> None:
    """Circular padding (MIL has no wrap mode): exact against numpy's wrap on the cropped input."""
    x = anekit.input("x", X3)
    g = anekit.graph(ops.pad(x, pads, "wrap"))
    out = _decomposed(g)
    assert "pad" not in out.op_histogram() and "concat" in out.op_histogram()
    feeds = random_feeds(g)
    b, e = np.array(pads[:3]), np.array(pads[3:])
    cropped = feeds["x"][
        tuple(slice(max(-i, 0), d - max(-j, 0)) for i, j, d in zip(b, e, X3, strict=True))
    ]
    want = np.pad(cropped, [(max(i, 0), max(j, 0)) for i, j in zip(b, e, strict=True)], mode="wrap")
    (got,) = out.run(feeds).values()
    np.testing.assert_array_equal(got, want)


def test_a_wrap_pad_wider_than_the_piece_budget_stays_a_pad() -> None:
    from anekit.passes.decompose.tensor_ops import MAX_WRAP_PIECES

    x = anekit.input("x", (1, 2, 3))
    g = anekit.graph(ops.pad(x, (0, 0, 0, 0, 0, 3 * (MAX_WRAP_PIECES + 1)), "wrap"))
    assert "pad" in _decomposed(g).op_histogram()


def test_an_onnx_wrap_pad_compiles_and_matches_onnxruntime(tmp_path) -> None:
    """Circular padding before a convolution (as torch's padding_mode='circular' exports it):
    the engine graph in fp32, and the saved bundle on sim in fp16, against onnxruntime."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    g = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["p"], mode="wrap"),
         helper.make_node("Conv", ["p", "w"], ["y"])],
        "circular",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor("pads", TensorProto.INT64, [8], [0, 0, 1, 1, 0, 0, 1, 1]),
         helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())],
    )  # fmt: skip
    path = tmp_path / "circular.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), str(path))
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    (want,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    compiled = anekit.compile(str(path), "m4")
    assert "pad" not in compiled.graph.op_histogram()
    assert rel_err(compiled.run({"x": x}, "reference")["y"], want) <= EXACT_RTOL
    program = anekit.load(compiled.save(tmp_path / "c.anekit"))
    assert rel_err(program.run({"x": x}, backend="sim")["y"], want) <= 2e-3  # fp16 storage
