"""The step program's shape on sim: the overflow guard exact on NaN, infinities and fp16
overflow (and not fooled by a norm that overflows over finite gradients), one engine
segment for an MLP, state updated without transposes and kept on its engine surfaces,
class labels fed as one-hot rows."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit.train import Adam, Trainer
from anekit.train.emit import Emitter
from anekit.train.step import _global_norm, _peak, update_ops
from tests.train.models import digits, mlp, mlp_weights

SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 65504.0, -65504.0, 6e-8, -6e-8, 1e-3, -2.5]


def _guard_program():
    """g = x + x on the engine (fp16: 40000 + 40000 overflows to inf), then the step's
    overflow guard (peak magnitude times 0) and its global norm over g."""
    x = anekit.input("x", (6, 40))
    graph = anekit.graph([x + x])
    ed = graph.edit()
    e = Emitter(ed, prefix="t")
    (g,) = graph.output_names
    e.outputs({"flag": e.mul(_peak(e, g), e.scalar(0.0, g)), "norm": _global_norm(e, [g])})
    return anekit.compile(ed.build(), "m4")


def _fp16_sum(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return (x.astype(np.float16) + x.astype(np.float16)).astype(np.float32)


@pytest.fixture(scope="module")
def guard():
    compiled = _guard_program()
    assert all(s.device == "ane" for s in compiled.segments)  # no CPU check
    return compiled.program


@pytest.mark.parametrize("special", range(len(SPECIAL) + 2))
def test_guard_is_nan_exactly_when_a_gradient_element_is_not_finite(guard, special):
    rng = np.random.default_rng(special)
    x = (rng.standard_normal((6, 40)) * 3).astype(np.float32)
    if special < len(SPECIAL):
        x[rng.integers(6), rng.integers(40)] = SPECIAL[special]
    elif special == len(SPECIAL):
        x[3, 7] = 40000.0  # finite input, x + x overflows fp16
    else:
        x[3, 7] = 32752.0  # the largest value whose double rounds to 65504: finite
    flag = guard.run({"x": x}, backend="sim")["flag"]
    finite = bool(np.isfinite(_fp16_sum(x)).all())
    assert np.isfinite(flag).all() == finite
    if finite:
        assert float(flag.reshape(-1)[0]) == 0.0


def test_guard_passes_a_step_whose_norm_overflows_over_finite_gradients(guard):
    """sqrt(240) * 60000 is far beyond fp16: the norm is infinite, every element finite."""
    x = np.full((6, 40), 30000.0, np.float32)
    out = guard.run({"x": x}, backend="sim")
    assert np.isinf(out["norm"]).all()
    assert float(out["flag"].reshape(-1)[0]) == 0.0


@pytest.fixture(scope="module")
def mnist_like():
    train, _ = digits(96)
    batch = {k: v[:32] for k, v in train.items()}
    return batch


def _trainer(**kw) -> Trainer:
    return Trainer(mlp(32, mlp_weights()), "cross_entropy", Adam(lr=1e-2), backend="sim", **kw)


def test_mlp_step_is_one_engine_segment_with_resident_state(mnist_like):
    t = _trainer()
    t.step(mnist_like)
    sg, session, compiled = t._programs[t._active]
    # forward, backward, overflow guard and update: one engine program, nothing on the
    # CPU (no NaN check on booleans, no label one-hot)
    assert [s.device for s in compiled.segments] == ["ane"]
    assert t.check(mnist_like) == []
    # every parameter and optimizer slot stays on its engine surfaces between steps
    slots = {s for s in sg.state if s not in sg.params}
    assert slots and set(sg.state) <= set(session.resident)
    # the update moves no data: no transpose downstream of an optimizer slot
    ops = update_ops(compiled.graph, sg.state)
    assert "div" in ops and "transpose" not in ops


@pytest.mark.parametrize("max_grad_norm", [None, 1.0])
def test_nonfinite_step_keeps_every_state_value(mnist_like, max_grad_norm, tmp_path):
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
    # NaN in row 0's input makes its loss NaN, and so every gradient element: each counted
    (where,) = t.overflows
    assert where["step"] == 1 and where["loss_scale"] == scale
    assert where["nonfinite"] == {p: before[p].size for p in t.params}
    t.loss_scale = 2.0**40  # the scaled backward overflows fp16: infinities, no NaN input
    t.step(mnist_like)
    assert t.skipped == 2 and len(t.overflows) == 2
    counts = t.overflows[-1]["nonfinite"]
    assert 0 < sum(counts.values()) <= sum(before[p].size for p in t.params)
    t.save(tmp_path / "run.ckpt")
    assert Trainer.load(tmp_path / "run.ckpt").overflows == t.overflows
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
