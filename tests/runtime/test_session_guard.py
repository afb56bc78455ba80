"""A guarded session: a step whose guard output is not all finite keeps every state value
(double-buffered engine surfaces, held values), and the steps after it go on from there."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops, targets
from anekit.codegen.bundle import build_bundle
from anekit.codegen.mil import SegmentSpec
from anekit.errors import AnekitError
from anekit.runtime.program import from_contents

M4 = targets.get("m4")


def _accumulator() -> anekit.Program:
    """c_next = c + x on the engine; the guard g = c_next * 0 (NaN when x was)."""
    c, x = anekit.input("c", (1, 8)), anekit.input("x", (1, 8))
    c_next = ops.add(c, x, name="c_next")
    return anekit.compile(anekit.graph([c_next, ops.mul(c_next, np.float32(0.0), name="g")]),
                          "m4").program  # fmt: skip


def _feeds(bad: set[int], steps: int = 8) -> list[dict[str, np.ndarray]]:
    xs = np.random.default_rng(4).standard_normal((steps, 1, 8)).astype(np.float32)
    for i in bad:
        xs[i, 0, i % 8] = [np.nan, np.inf, -np.inf][i % 3]
    return [{"x": v} for v in xs]


def _oracle(program, feeds, state_name, out_name, start):
    """The state through the caller: keep a step's next value only when it is finite."""
    state, kept = start, []
    for f in feeds:
        r = program.run({**f, state_name: state}, "sim")
        ok = bool(np.isfinite(r[out_name]).all())
        kept.append(ok)
        if ok:
            state = r[out_name]
    return state, kept


@pytest.mark.parametrize("bad", [set(), {0}, {2, 3}, {7}, {1, 4, 6}])
def test_resident_state_is_double_buffered_and_kept_across_a_bad_step(bad):
    program = _accumulator()
    sess = program.session("sim", state={"c": "c_next"}, guard="g")
    assert sess.resident == ("c",)  # still on its engine surfaces
    feeds = _feeds(bad)
    kept = []
    for f in feeds:
        sess.run(f)
        kept.append(sess.kept)
    state, want = _oracle(program, feeds, "c", "c_next", np.zeros((1, 8), np.float32))
    assert kept == want and kept.count(False) == len(bad)
    assert sess.read("c").tobytes() == state.tobytes()
    assert np.isfinite(sess.read("c")).all()


def test_unguarded_session_takes_every_step():
    program = _accumulator()
    sess = program.session("sim", state={"c": "c_next"})
    sess.run_steps(3, _feeds({1}, 3))
    assert sess.kept and not np.isfinite(sess.read("c")).all()


def test_held_state_is_not_handed_over_from_a_discarded_step():
    """y = s + x on one engine segment, u = y * 1 on the CPU, s_next = u + 1 on a later
    engine segment: the held state s is read before its producer runs again, so it is
    handed over from that producer's output surface. After a discarded step that surface
    holds the discarded value, and the next step must read the kept one."""
    x, s = anekit.input("x", (1, 8)), anekit.input("s", (1, 8))
    y = ops.add(s, x, name="y")
    g = anekit.graph([y, ops.add(ops.mul(y, np.float32(1.0), name="u"), np.float32(1.0),
                                 name="s_next")])  # fmt: skip
    names = [n.name for n in g.nodes]
    segments = [
        SegmentSpec(0, "ane", (names[0],), ("s", "x"), ("y",)),
        SegmentSpec(1, "cpu", (names[1],), ("y",), ("u",)),
        SegmentSpec(2, "ane", (names[2],), ("u",), ("s_next",)),
    ]
    program = from_contents(build_bundle(g, M4, segments))
    sess = program.session("sim", state={"s": "s_next"}, guard="y")
    assert sess.resident == ()
    feeds = _feeds({2, 5}, 7)
    ys = [sess.run(f)["y"] for f in feeds]
    state = np.zeros((1, 8), np.float32)
    for i, f in enumerate(feeds):  # the oracle: the state through the caller
        r = program.run({**f, "s": state}, "sim")
        assert ys[i].tobytes() == r["y"].tobytes(), i
        if np.isfinite(r["y"]).all():
            state = r["s_next"]
    assert sess.read("s").tobytes() == state.tobytes()


def test_guard_must_be_an_output_that_is_not_state():
    program = _accumulator()
    with pytest.raises(AnekitError, match="guard 'nope'"):
        program.session("sim", state={"c": "c_next"}, guard="nope")
    with pytest.raises(AnekitError, match="guard 'c_next'"):
        program.session("sim", state={"c": "c_next"}, guard="c_next")
