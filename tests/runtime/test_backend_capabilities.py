"""Backends through their declared capabilities: every registered backend, and a new one
that declares nothing (stateless runs work; state, weight reloads are refused clearly)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit.errors import AnekitError
from anekit.runtime import backends
from anekit.runtime.backends import Backend, Capabilities, SegmentRunner, SegmentSource
from tests.runtime.test_e5rt import log, standin  # noqa: F401  (fixtures: the e5rt stand-in)


def _counter() -> anekit.Graph:
    c = anekit.input("c", (1, 1))
    x = anekit.input("x", (1, 16))
    y = anekit.ops.mul(x, np.float32(3.0), name="y")
    return anekit.graph([anekit.ops.add(c, np.float32(1.0), name="c_next"), y])


def test_every_backend_declares_consistent_capabilities() -> None:
    for name in backends.names():
        caps = backends.get(name).capabilities
        assert isinstance(caps, Capabilities), name
        if caps.resident_state or caps.aliasing:  # resident state is state
            assert caps.state, name
        if caps.paired_surfaces:  # double buffers are engine buffers
            assert caps.aliasing, name
        assert not (caps.resident_state and caps.aliasing), name  # one kind of surface
        if any(vars(caps).values()):
            assert backends.get(name).runs_segments, name  # capabilities are of segment runners
    assert set(backends.stateful_backends()) >= {"sim", "sim-fp32"}


def _steps(backend: str, k: int = 5) -> tuple[anekit.Program, dict, np.ndarray]:
    program = anekit.compile(_counter(), "m4").program
    sess = program.session(backend, state={"c": "c_next"})
    xs = np.arange(k * 16, dtype=np.float32).reshape(k, 1, 16)
    out = sess.run_steps(k, [{"x": x} for x in xs])
    return program, out, sess.read("c")


@pytest.mark.parametrize("backend", ["sim", "sim-fp32"])
def test_state_on_each_simulating_backend(backend: str) -> None:
    program, out, c = _steps(backend)
    assert c.tolist() == [[5.0]]
    xs = np.arange(5 * 16, dtype=np.float32).reshape(5, 1, 16)
    np.testing.assert_array_equal(out["y"], xs * 3)  # exact in fp16 and fp32
    resident = program.session(backend, state={"c": "c_next"}).resident
    assert resident == (("c",) if backends.get(backend).capabilities.resident_state else ())


def test_state_on_ane_through_its_declared_buffers(log: Path) -> None:  # noqa: F811
    """The e5rt stand-in adds 1 to every element of every output per step."""
    assert backends.get("ane").capabilities.aliasing
    program = anekit.compile(_counter(), "m4").program
    sess = program.session("ane", state={"c": "c_next"})
    assert sess.resident == ("c",)
    sess.run_steps(3, {"x": np.zeros((1, 16), np.float32)})
    assert sess.read("c").tolist() == [[3.0]]
    program.release("ane")


class _Plain:
    """A runner with nothing but ``run`` (the simulator underneath)."""

    def __init__(self, inner: SegmentRunner):
        self.inner = inner
        self.runs = 0

    def run(self, args: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.runs += 1
        return self.inner.run(args)


class Bare(Backend):
    name = "bare"
    summary = "a backend that declares no capability"
    runs_segments = True

    def prepare(self, segment: SegmentSource) -> SegmentRunner:
        return _Plain(backends.get("sim").prepare(segment))


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch) -> Bare:
    registry = dict(backends._registry())
    registry["bare"] = backend = Bare()
    monkeypatch.setattr(backends, "_registry", lambda: registry)
    return backend


def test_a_backend_declaring_nothing_runs_stateless(bare: Bare) -> None:  # noqa: ARG001
    program = anekit.compile(_counter(), "m4").program
    feeds = {"c": np.float32([[2.0]]), "x": np.ones((1, 16), np.float32)}
    ran = program.run(feeds, "bare")
    expected = program.run(feeds, "sim")
    for name in expected:
        np.testing.assert_array_equal(ran[name], expected[name])
    sess = program.session("bare")  # no state: a session is a loaded program
    assert sess.resident == ()
    np.testing.assert_array_equal(sess.run(feeds)["y"], expected["y"])
    assert all(isinstance(r, _Plain) and r.runs == 2 for r in program.runners("bare"))


def test_a_backend_declaring_nothing_refuses_state_clearly(bare: Bare) -> None:  # noqa: ARG001
    program = anekit.compile(_counter(), "m4").program
    with pytest.raises(AnekitError, match=r"backend 'bare' does not declare session state") as err:
        program.session("bare", state={"c": "c_next"})
    assert "sim" in err.value.hint and "bare" not in err.value.hint


def test_a_backend_without_weight_reload_refuses_an_update_before_writing(
    bare: Bare,  # noqa: ARG001
) -> None:
    x = anekit.input("x", (1, 32))
    w = anekit.constant(np.eye(32, dtype=np.float32), name="w")
    program = anekit.compile(anekit.graph([anekit.ops.matmul(x, w, name="y")]), "m4").program
    feeds = {"x": np.ones((1, 32), np.float32)}
    before = program.run(feeds, "bare")["y"]
    weights = program.weights
    with pytest.raises(AnekitError, match=r"loaded on backend 'bare', which cannot reload"):
        program.update_weights({"w": 2 * np.eye(32, dtype=np.float32)})
    assert program.weights == weights  # nothing was written
    np.testing.assert_array_equal(program.run(feeds, "bare")["y"], before)
    program.release("bare")
    program.update_weights({"w": 2 * np.eye(32, dtype=np.float32)})
    np.testing.assert_array_equal(program.run(feeds, "bare")["y"], 2 * before)
