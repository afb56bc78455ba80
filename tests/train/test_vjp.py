"""Every gradient rule against torch autograd and central differences, over drawn shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import anekit
from anekit.errors import UnsupportedModelError
from anekit.frontend.builder import ops
from anekit.frontend.builder.tensor import record
from anekit.train import grad
from anekit.train.vjp import NON_DIFFERENTIABLE, RULES, ops_without_rule
from tests.train.gradcheck import check_gradients

FAST = settings(max_examples=4, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
dims = st.integers(1, 4)


def normal(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def away_from_zero(shape, seed=0):
    """Values with |x| >= 0.3, so a finite-difference step never crosses a kink at 0."""
    rng = np.random.default_rng(seed)
    return (rng.choice([-1, 1], shape) * rng.uniform(0.3, 2.0, shape)).astype(np.float32)


def distinct(shape, seed=0):
    """Values 0.1 apart and 0.025 off every multiple of 0.05 (the kinks of clip and
    hard_sigmoid), so a maximum never ties and a finite-difference step crosses no kink."""
    n = int(np.prod(shape))
    spaced = np.random.default_rng(seed).permutation(n) * 0.1 - n * 0.05 + 0.025
    return spaced.reshape(shape).astype(np.float32)


def broadcastable(draw):
    rank = draw(st.integers(1, 3))
    a = [draw(dims) for _ in range(rank)]
    b = [d if draw(st.booleans()) else 1 for d in a][draw(st.integers(0, rank - 1)) :]
    if draw(st.booleans()):
        a, b = b, a
    return tuple(a), tuple(b)


# --- elementwise arithmetic with broadcasting -----------------------------------------------

BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "pow": (lambda a, b: a**b, lambda a, b: a**b),
    "maximum": (ops.maximum, torch.maximum),
    "minimum": (ops.minimum, torch.minimum),
}


@pytest.mark.parametrize("op", sorted(BINARY))
@FAST
@given(data=st.data())
def test_binary(op, data):
    sa, sb = broadcastable(data.draw)
    build, ref = BINARY[op]
    a = np.abs(away_from_zero(sa, 1)) if op == "pow" else away_from_zero(sa, 1)
    b = away_from_zero(sb, 2)
    if op in ("maximum", "minimum"):
        a, b = a + 0.15, b  # operands never within a step of each other
        b = np.where(np.abs(np.broadcast_to(a, np.broadcast_shapes(sa, sb))[..., :1].mean()
                            - b) < 0.1, b + 0.3, b).astype(np.float32)  # fmt: skip
    check_gradients(lambda a, b: build(a, b), ref, {"a": a, "b": b}, ["a", "b"])


UNARY = {
    "relu": (ops.relu, torch.relu, away_from_zero),
    "leaky_relu": (lambda x: ops.leaky_relu(x, 0.1), lambda x: F.leaky_relu(x, 0.1), away_from_zero),
    "gelu": (ops.gelu, F.gelu, normal),
    "gelu_tanh": (lambda x: ops.gelu(x, approximate="tanh"),
                  lambda x: F.gelu(x, approximate="tanh"), normal),
    "silu": (ops.silu, F.silu, normal),
    "sigmoid": (ops.sigmoid, torch.sigmoid, normal),
    "tanh": (ops.tanh, torch.tanh, normal),
    "softplus": (ops.softplus, F.softplus, normal),
    "elu": (ops.elu, F.elu, away_from_zero),
    "exp": (ops.exp, torch.exp, normal),
    "log": (lambda x: ops.log(ops.abs(x)), lambda x: torch.log(torch.abs(x)), away_from_zero),
    "sqrt": (lambda x: ops.sqrt(ops.abs(x)), lambda x: torch.sqrt(torch.abs(x)), away_from_zero),
    "reciprocal": (ops.reciprocal, torch.reciprocal, away_from_zero),
    "neg": (ops.neg, torch.neg, normal),
    "sin": (ops.sin, torch.sin, normal),
    "cos": (ops.cos, torch.cos, normal),
    "erf": (ops.erf, torch.erf, normal),
    "clip": (lambda x: ops.clip(x, -1.0, 1.0), lambda x: torch.clamp(x, -1.0, 1.0), distinct),
    "hard_sigmoid": (ops.hard_sigmoid, F.hardsigmoid, distinct),
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(UNARY))
@FAST
@given(shape=st.lists(dims, min_size=1, max_size=3))
def test_unary(op, shape):
    build, ref, data = UNARY[op]
    check_gradients(build, ref, {"x": data(tuple(shape), 3)}, ["x"])


@FAST
@given(shape=st.lists(dims, min_size=1, max_size=3), data=st.data())
def test_where(shape, data):
    cond = np.random.default_rng(4).random(shape) > 0.5
    c = anekit.constant(cond)
    check_gradients(
        lambda a, b: ops.where(c, a, b), lambda a, b: torch.where(torch.tensor(cond), a, b),
        {"a": normal(shape, 1), "b": normal(shape, 2)}, ["a", "b"],
    )  # fmt: skip


# --- softmax family and norms ---------------------------------------------------------------


@pytest.mark.parametrize("log", [False, True])
@FAST
@given(shape=st.lists(dims, min_size=1, max_size=3), data=st.data())
def test_softmax(log, shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    build = ops.log_softmax if log else ops.softmax
    ref = torch.log_softmax if log else torch.softmax
    check_gradients(lambda x: build(x, axis), lambda x: ref(x, axis), {"x": normal(shape)}, ["x"])


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
@FAST
@given(shape=st.lists(st.integers(2, 4), min_size=2, max_size=3), data=st.data())
def test_norms(kind, shape, data):
    axis = data.draw(st.integers(1, len(shape) - 1))
    tail = tuple(shape[axis:])
    feeds = {"x": normal(shape), "w": normal(tail, 1), "b": normal(tail, 2)}
    dims_ = tuple(range(axis - len(shape), 0))
    if kind == "layer_norm":
        check_gradients(
            lambda x, w, b: record("layer_norm", [x, w, b], {"axis": axis}),
            lambda x, w, b: F.layer_norm(x, tail, w, b, 1e-5), feeds, ["x", "w", "b"],
        )  # fmt: skip
    else:
        check_gradients(
            lambda x, w, b: record("rms_norm", [x, w], {"axis": axis}),
            lambda x, w, b: x * torch.rsqrt((x * x).mean(dims_, keepdim=True) + 1e-5) * w,
            feeds, ["x", "w"],
        )  # fmt: skip


@FAST
@given(n=st.integers(1, 3), c=st.integers(1, 3), hw=st.integers(1, 3))
def test_batch_norm_running_statistics(n, c, hw):
    mean, var = normal((c,), 5), np.abs(normal((c,), 6)) + 0.5
    feeds = {"x": normal((n, c, hw, hw)), "w": normal((c,), 1), "b": normal((c,), 2)}
    check_gradients(
        lambda x, w, b: record("batch_norm", [x, w, b, anekit.constant(mean), anekit.constant(var)]),
        lambda x, w, b: F.batch_norm(x, torch.tensor(mean, dtype=torch.float64),
                                     torch.tensor(var, dtype=torch.float64), w, b, False),
        feeds, ["x", "w", "b"],
    )  # fmt: skip


# --- matmul and convolution -----------------------------------------------------------------


@FAST
@given(data=st.data())
def test_matmul(data):
    m, k, n = data.draw(dims), data.draw(dims), data.draw(dims)
    batch_a = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    batch_b = batch_a[data.draw(st.integers(0, len(batch_a))) :]
    sa = (k,) if data.draw(st.booleans()) and not batch_a else (*batch_a, m, k)
    sb = (k,) if data.draw(st.booleans()) and not batch_b else (*batch_b, k, n)
    check_gradients(lambda a, b: a @ b, torch.matmul, {"a": normal(sa, 1), "b": normal(sb, 2)},
                    ["a", "b"])  # fmt: skip


@FAST
@given(data=st.data())
def test_conv(data):
    sp = data.draw(st.integers(1, 2))
    group = data.draw(st.integers(1, 2))
    cin, cout = group * data.draw(st.integers(1, 2)), group * data.draw(st.integers(1, 2))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(sp)]
    strides = [data.draw(st.integers(1, 2)) for _ in range(sp)]
    dil = [data.draw(st.integers(1, 2)) for _ in range(sp)]
    pads = [data.draw(st.integers(0, 2)) for _ in range(2 * sp)]
    size = [
        (k - 1) * d + 1 + data.draw(st.integers(0, 3)) for k, d in zip(kernel, dil, strict=True)
    ]
    feeds = {"x": normal((2, cin, *size)), "w": normal((cout, cin // group, *kernel), 1),
             "b": normal((cout,), 2)}  # fmt: skip
    attrs = {"strides": strides, "pads": pads, "dilations": dil, "group": group}
    tpad = [p for i in reversed(range(sp)) for p in (pads[i], pads[sp + i])]
    conv = F.conv1d if sp == 1 else F.conv2d
    check_gradients(
        lambda x, w, b: record("conv", [x, w, b], attrs),
        lambda x, w, b: conv(F.pad(x, tpad), w, b, stride=strides, dilation=dil, groups=group),
        feeds, ["x", "w", "b"],
    )  # fmt: skip
    # a fixed kernel takes the transposed-convolution path for the input gradient
    fixed = anekit.constant(feeds["w"])
    wt = torch.tensor(feeds["w"], dtype=torch.float64)
    check_gradients(
        lambda x, b: record("conv", [x, fixed, b], attrs),
        lambda x, b: conv(F.pad(x, tpad), wt, b, stride=strides, dilation=dil, groups=group),
        {"x": feeds["x"], "b": feeds["b"]}, ["x", "b"],
    )  # fmt: skip


# --- pooling ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["avg", "avg_include_pad", "max"])
@FAST
@given(data=st.data())
def test_pool2d(kind, data):
    k = [data.draw(st.integers(1, 3)) for _ in range(2)]
    s = [data.draw(st.integers(1, 2)) for _ in range(2)]
    p = [data.draw(st.integers(0, (kk) // 2)) for kk in k]
    ceil = data.draw(st.booleans())
    size = [kk + data.draw(st.integers(0, 3)) for kk in k]
    x = distinct((2, 2, *size))
    attrs = {"kernel": k, "strides": s, "pads": (*p, *p), "ceil_mode": ceil}
    if kind == "max":
        build = lambda x: record("max_pool", [x], attrs)  # noqa: E731
        ref = lambda x: F.max_pool2d(x, k, s, p, ceil_mode=ceil)  # noqa: E731
    else:
        inc = kind == "avg_include_pad"
        build = lambda x: record("avg_pool", [x], {**attrs, "count_include_pad": inc})  # noqa: E731
        ref = lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=inc)  # noqa: E731
    check_gradients(build, ref, {"x": x}, ["x"])


@FAST
@given(size=st.integers(3, 6), d=st.integers(1, 2))
def test_max_pool_dilated(size, d):
    attrs = {"kernel": (2, 2), "strides": (1, 1), "dilations": (d, d), "pads": (1, 1, 1, 1)}
    check_gradients(lambda x: record("max_pool", [x], attrs),
                    lambda x: F.max_pool2d(x, 2, 1, 1, dilation=d),
                    {"x": distinct((1, 2, size, size))}, ["x"])  # fmt: skip


# --- data movement ----------------------------------------------------------------------------


@FAST
@given(shape=st.lists(dims, min_size=2, max_size=4), data=st.data())
def test_reshape_transpose(shape, data):
    perm = data.draw(st.permutations(range(len(shape))))
    flat = (int(np.prod(shape)),)
    check_gradients(lambda x: ops.reshape(ops.transpose(x, perm), flat),
                    lambda x: x.permute(*perm).reshape(flat), {"x": normal(shape)}, ["x"])  # fmt: skip


@FAST
@given(shape=st.lists(dims, min_size=1, max_size=3), data=st.data())
def test_concat(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    other = list(shape)
    other[axis] = data.draw(dims)
    check_gradients(lambda a, b: ops.concat([a, b, a], axis), lambda a, b: torch.cat([a, b, a], axis),
                    {"a": normal(shape, 1), "b": normal(other, 2)}, ["a", "b"])  # fmt: skip


@FAST
@given(data=st.data())
def test_slice(data):
    shape = data.draw(st.lists(st.integers(2, 5), min_size=1, max_size=3))
    axis = data.draw(st.integers(0, len(shape) - 1))
    step = data.draw(st.sampled_from([1, 2, -1]))
    start = data.draw(st.integers(0, shape[axis] - 1))
    end = data.draw(st.integers(-shape[axis] - 1, shape[axis]))
    x = normal(shape)
    index = [slice(None)] * len(shape)
    probe = np.arange(shape[axis])[
        slice(
            start,
            end if end >= 0 else (end + shape[axis] if end + shape[axis] >= 0 else None),
            step,
        )
    ]  # noqa: E501
    if probe.size == 0:
        return
    index[axis] = torch.tensor(probe)

    def ref(x):
        return torch.index_select(x, axis, torch.tensor(probe))

    check_gradients(lambda x: record("slice", [x], {"starts": [start], "ends": [end],
                                                    "axes": [axis], "steps": [step]}),
                    ref, {"x": x}, ["x"])  # fmt: skip


@FAST
@given(v=st.integers(2, 6), d=st.integers(1, 4), n=st.integers(1, 3), t=st.integers(1, 4))
def test_gather_embedding(v, d, n, t):
    ids = np.random.default_rng(7).integers(-v, v, (n, t))
    idc = anekit.constant(ids)
    check_gradients(lambda e: ops.gather(e, idc, axis=0),
                    lambda e: e[torch.tensor(np.where(ids < 0, ids + v, ids))],
                    {"e": normal((v, d))}, ["e"])  # fmt: skip


@FAST
@given(shape=st.lists(st.integers(1, 4), min_size=2, max_size=3), data=st.data())
def test_gather_axis(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    ids = np.random.default_rng(8).integers(0, shape[axis], (2,))
    idc = anekit.constant(ids)
    check_gradients(lambda x: ops.gather(x, idc, axis=axis),
                    lambda x: torch.index_select(x, axis, torch.tensor(ids)),
                    {"x": normal(shape)}, ["x"])  # fmt: skip


@FAST
@given(shape=st.lists(dims, min_size=1, max_size=3), data=st.data())
def test_expand_tile_pad(shape, data):
    reps = [data.draw(st.integers(1, 2)) for _ in shape]
    pads = [data.draw(st.integers(0, 2)) for _ in range(2 * len(shape))]
    tp = [p for i in reversed(range(len(shape))) for p in (pads[i], pads[len(shape) + i])]
    big = (2, *shape)
    check_gradients(
        lambda x: ops.pad(ops.tile(x, reps), pads) * 1.0 + ops.reduce_sum(ops.expand(x, big)),
        lambda x: F.pad(x.repeat(*reps), tp) + ops_expand_sum(x, big), {"x": normal(shape)}, ["x"],
    )  # fmt: skip


def ops_expand_sum(x, big):
    return x.expand(*big).sum()


# --- reductions -------------------------------------------------------------------------------

REDUCE = {
    "reduce_sum": (lambda x, a, k: x.sum(a, keepdim=k), normal),
    "reduce_mean": (lambda x, a, k: x.mean(a, keepdim=k), normal),
    "reduce_sum_square": (lambda x, a, k: (x * x).sum(a, keepdim=k), normal),
    "reduce_l2": (lambda x, a, k: torch.sqrt((x * x).sum(a, keepdim=k)), away_from_zero),
    "reduce_log_sum_exp": (lambda x, a, k: torch.logsumexp(x, a, keepdim=k), normal),
    "reduce_max": (lambda x, a, k: torch.amax(x, a, keepdim=k), distinct),
    "reduce_min": (lambda x, a, k: torch.amin(x, a, keepdim=k), distinct),
}


@pytest.mark.parametrize("op", sorted(REDUCE))
@FAST
@given(shape=st.lists(dims, min_size=1, max_size=3), data=st.data())
def test_reductions(op, shape, data):
    axes = sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    keep = data.draw(st.booleans())
    ref, make = REDUCE[op]
    check_gradients(lambda x: record(op, [x], {"axes": axes, "keepdims": keep}),
                    lambda x: ref(x, axes, keep), {"x": make(shape)}, ["x"])  # fmt: skip


# --- dropout and losses -----------------------------------------------------------------------


@FAST
@given(shape=st.lists(dims, min_size=1, max_size=3))
def test_dropout_is_a_host_mask(shape):
    """Dropout multiplies by a mask the host draws (the engine has no random numbers):
    the same mask gives torch's gradient."""
    from anekit.train import dropout_mask

    mask = dropout_mask(np.random.default_rng(9), tuple(shape), 0.3)
    assert set(np.unique(mask)) <= {0.0, np.float32(1 / 0.7)}
    m = anekit.constant(mask)
    check_gradients(lambda x: x * m, lambda x: x * torch.tensor(mask, dtype=torch.float64),
                    {"x": normal(shape)}, ["x"])  # fmt: skip


def _loss_graph(kind, shape, target):
    from anekit.train.emit import Emitter
    from anekit.train.losses import resolve

    x = anekit.input("x", shape)
    t = anekit.input("t", target.shape, "fp32" if target.dtype.kind == "f" else "int64")
    g = anekit.graph([ops.identity(x)], inputs=[x, t])
    ed = g.edit()
    loss = resolve(kind)(Emitter(ed), g.output_names[0], "t")
    ed.output_names = [loss]
    ed.name_outputs(["loss"])
    return ed.build()


@pytest.mark.parametrize("kind", ["cross_entropy", "cross_entropy_probs", "mse"])
@FAST
@given(n=st.integers(1, 4), c=st.integers(2, 5))
def test_losses(kind, n, c):
    rng = np.random.default_rng(10)
    x = normal((n, c))
    if kind == "cross_entropy":
        target = rng.integers(0, c, (n,))
        ref = F.cross_entropy(torch.tensor(x, dtype=torch.float64, requires_grad=True),
                              torch.tensor(target))  # fmt: skip
    elif kind == "cross_entropy_probs":
        target = rng.dirichlet(np.ones(c), n).astype(np.float32)
        ref = F.cross_entropy(torch.tensor(x, dtype=torch.float64, requires_grad=True),
                              torch.tensor(target, dtype=torch.float64))  # fmt: skip
    else:
        target = normal((n, c), 3)
        ref = F.mse_loss(torch.tensor(x, dtype=torch.float64, requires_grad=True),
                         torch.tensor(target, dtype=torch.float64))  # fmt: skip
    graph = _loss_graph("mse" if kind == "mse" else "cross_entropy", (n, c), target)
    out = grad(graph, "loss", ["x"]).run({"x": x, "t": target})
    ref.backward()
    xt = ref.grad_fn.next_functions  # noqa: F841 - keep the graph alive for .grad below
    np.testing.assert_allclose(out["loss"], ref.item(), rtol=1e-5, atol=1e-6)
    leaf = _leaf(ref)
    np.testing.assert_allclose(out["x_grad"], leaf.grad.numpy(), rtol=1e-4, atol=1e-6)


def _leaf(t):
    stack = [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None:
            continue
        if hasattr(fn, "variable"):
            return fn.variable
        stack.extend(f for f, _ in fn.next_functions)
    raise AssertionError("no leaf")


# --- coverage and errors ----------------------------------------------------------------------


REQUIRED = """matmul conv add sub mul div relu gelu silu sigmoid tanh softmax log_softmax layer_norm
rms_norm batch_norm reshape transpose concat slice gather reduce_sum reduce_mean reduce_max
avg_pool max_pool""".split()


def test_required_ops_have_rules():
    ops_without_rule()  # loads every rule module
    assert [op for op in REQUIRED if op not in RULES] == []


def test_ops_without_rule_are_listed():
    missing = ops_without_rule()
    assert "lstm" in missing and "matmul" not in missing
    assert not set(missing) & NON_DIFFERENTIABLE


def test_an_op_without_a_rule_is_named():
    x = anekit.input("x", (2, 3))
    y = record("cumprod", [x], {"axis": 1})
    g = anekit.graph([ops.reduce_sum(y, keepdims=False)])
    with pytest.raises(
        UnsupportedModelError, match=r"node 'cumprod_0' \(cumprod\).*no gradient rule"
    ):
        grad(g, g.output_names[0], ["x"])
