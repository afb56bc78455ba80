"""The step program's shape on sim: gradient hygiene equal to its earlier all-CPU form
(NaN and infinities included), the fewest segments, state updated without transposes and
kept on its engine surfaces, class labels fed as one-hot rows."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit.ir.graph import Graph
from anekit.train import Adam, Trainer
from anekit.train.emit import Emitter
from anekit.train.losses import FP16_MAX
from anekit.train.step import sanitise
from tests.train.models import digits, mlp, mlp_weights

SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 65504.0, -65504.0, 6e-8, -6e-8, 1e-3, -2.5]


def _gradient_graph(form: str) -> Graph:
    """g = x + x on the engine (fp16: 40000 + 40000 overflows to inf), then gradient
    hygiene in the step's form ("step") or in the form it had before, the clip on the
    engine ahead of the CPU's where and the mask summed on the engine ("before")."""
    x = anekit.input("x", (6, 40))
    inv = anekit.input("inv", (1,))
    graph = anekit.graph([x + x, inv * 1.0])
    ed = graph.edit()
    e = Emitter(ed, prefix="t")
    g, s = graph.output_names
    if form == "step":
        count, clean = sanitise(e, g, (1, 6, 1, 40), s)
        count = e.reshape(e("cast", count, to="fp32"), (1,))
        clean = e.reshape(clean, (6, 40))
    else:
        bad = e("or", e("isnan", g), e("isinf", g))
        count = e.reshape(e("reduce_sum", e("cast", bad, to="fp32"), keepdims=False), (1,))
        finite = e("where", e("isnan", g), e.scalar(0.0, g),
                   e("clip", g, min=-FP16_MAX, max=FP16_MAX))  # fmt: skip
        clean = e.mul(finite, s)
    named = []
    for name, value in (("count", count), ("clean", clean)):
        (o,) = ed.add("identity", [value], outputs=[name], name=f"out/{name}")
        named.append(o)
    ed.output_names = named
    ed.name_outputs(named)
    return ed.build()


def test_hygiene_equals_its_all_cpu_form_with_nan_and_infinities():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 40)) * 3).astype(np.float32)
    x.reshape(-1)[: len(SPECIAL)] = SPECIAL
    x[2, :5] = [40000.0, -40000.0, 32752.0, 32768.0, -1e-7]  # fp16 overflow in x + x
    x[4] = np.nan
    feeds = {"x": x, "inv": np.array([2.0**-10], np.float32)}
    runs = {
        form: anekit.compile(_gradient_graph(form), "m4").program.run(feeds, backend="sim")
        for form in ("step", "before")
    }
    ours, before = runs["step"], runs["before"]
    # bit for bit, signed zeros included
    assert ours["clean"].tobytes() == before["clean"].tobytes()
    with np.errstate(over="ignore"):
        g = (x.astype(np.float16) + x.astype(np.float16)).astype(np.float32)
    expected_bad = int(np.count_nonzero(~np.isfinite(g)))
    # row 4; NaN, +-inf and 2 x +-65504 given; 2 x +-40000 and 2 x 32768 overflow
    assert expected_bad == 40 + 5 + 3
    assert ours["count"][0] == before["count"][0] == expected_bad
    ref = np.where(np.isnan(g), 0, np.clip(g, -FP16_MAX, FP16_MAX)) * np.float32(2.0**-10)
    np.testing.assert_array_equal(ours["clean"], ref.astype(np.float16).astype(np.float32))
    assert np.isfinite(ours["clean"]).all()


def test_count_is_exact_beyond_fp16_range():
    """70000 NaNs: the engine's fp16 sum would say inf; the CPU counts in int32."""
    x = anekit.input("x", (70000,))
    graph = anekit.graph([x + x])
    ed = graph.edit()
    e = Emitter(ed, prefix="t")
    count, _ = sanitise(e, graph.output_names[0], (1, 70000, 1, 1), e.const([1.0]))
    (o,) = ed.add("cast", [count], {"to": "fp32"}, outputs=["count"])
    ed.output_names = [o]
    ed.name_outputs([o])
    out = anekit.compile(ed.build(), "m4").program.run(
        {"x": np.full(70000, np.nan, np.float32)}, backend="sim"
    )
    assert float(np.asarray(out["count"])) == 70000.0


@pytest.fixture(scope="module")
def mnist_like():
    train, _ = digits(96)
    batch = {k: v[:32] for k, v in train.items()}
    return batch


def _trainer(**kw) -> Trainer:
    return Trainer(mlp(32, mlp_weights()), "cross_entropy", Adam(lr=1e-2), backend="sim", **kw)


def test_mlp_step_is_engine_cpu_engine_with_resident_state(mnist_like):
    t = _trainer()
    t.step(mnist_like)
    sg, session, compiled = t._programs[t._active]
    assert [s.device for s in compiled.segments] == ["ane", "cpu", "ane"]
    # only the NaN/Inf test, the NaN -> 0 and the count's scalar arithmetic (an int32
    # count may exceed fp16) run on the CPU: no label one-hot
    hygiene = {"isnan", "isinf", "or", "cast", "reduce_sum", "where", "add", "reshape", "mul",
               "clip", "sub"}  # fmt: skip
    cpu = t.check(mnist_like)
    assert {r["op"] for r in cpu} <= hygiene and {"isnan", "where"} <= {r["op"] for r in cpu}
    arithmetic = [r["node"] for r in cpu if r["op"] in ("add", "mul", "clip", "sub", "reshape")]
    g = sg.graph
    assert arithmetic and all(g.values[g.node(n).outputs[0]].numel == 1 for n in arithmetic)
    # every optimizer slot stays on its engine surface between steps
    slots = {s for s in sg.state if s not in sg.params}
    assert slots and slots <= set(session.resident)
    # the update moves no data: no transpose in the last segment
    last = compiled.segments[-1]
    ops = {compiled.graph.node(n).attrs.get("main", compiled.graph.node(n).op) for n in last.nodes}
    assert "transpose" not in ops


@pytest.mark.parametrize("max_grad_norm", [None, 1.0])
def test_nonfinite_step_keeps_every_state_value(mnist_like, max_grad_norm):
    t = _trainer(max_grad_norm=max_grad_norm)
    t.step(mnist_like)
    before = t.state_values()
    bad = dict(mnist_like)
    bad["x"] = mnist_like["x"].copy()
    bad["x"][0, :3] = [np.nan, np.inf, -np.inf]
    scale = t.loss_scale
    t.step(bad)
    assert t.skipped == 1 and t.loss_scale == scale / 2
    after = t.state_values()
    assert all(after[k].tobytes() == v.tobytes() for k, v in before.items())
    t.loss_scale = 2.0**40  # the scaled backward overflows fp16: infinities, no NaN input
    t.step(mnist_like)
    assert t.skipped == 2
    assert all(t.state_values()[k].tobytes() == v.tobytes() for k, v in before.items())
    t.loss_scale = 2.0**10
    t.step(mnist_like)  # a clean step updates again
    assert t.skipped == 2 and t.state_values()["w0"].tobytes() != before["w0"].tobytes()


def test_labels_fed_as_one_hot_rows_train_as_probabilities(mnist_like):
    """Class labels become the IR one_hot's rows on the host: bit for bit the same run as
    the same rows given as probability targets."""
    labels, probs = _trainer(), _trainer()
    onehot = np.eye(10, dtype=np.float32)[mnist_like["target"]]
    a = [labels.step(mnist_like) for _ in range(3)]
    b = [probs.step({**mnist_like, "target": onehot}) for _ in range(3)]
    assert a == b
    sa, sb = labels.state_values(), probs.state_values()
    assert all(sa[k].tobytes() == sb[k].tobytes() for k in sa)
    feeds = labels._feeds(labels._programs[labels._active][0], mnist_like)
    np.testing.assert_array_equal(feeds["target"], onehot)


def test_heap_pages_kept_unless_the_environment_says(monkeypatch):
    import platform

    from anekit.train import runner

    monkeypatch.setenv("MALLOC_TOP_PAD_", str(1 << 20))
    assert runner.keep_heap_pages() is False  # the user's setting stands
    monkeypatch.delenv("MALLOC_TOP_PAD_")
    assert runner.keep_heap_pages() is (platform.libc_ver()[0] == "glibc")
