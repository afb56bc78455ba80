"""docs/adding-a-backend.md's worked example, run as written: a backend is one module."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit.runtime import backends

DOC = Path(__file__).parents[2] / "docs" / "adding-a-backend.md"


def _example_module() -> types.ModuleType:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "the page has one worked example"
    module = types.ModuleType("anekit.runtime.backends.sim_timed")
    sys.modules[module.__name__] = module  # dataclasses and annotations look it up
    try:
        exec(compile(blocks[0], str(DOC), "exec"), module.__dict__)  # noqa: S102
    finally:
        del sys.modules[module.__name__]
    return module


def test_the_worked_example_runs_programs_and_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _example_module().BACKEND
    registry = dict(backends._registry())
    registry[backend.name] = backend
    monkeypatch.setattr(backends, "_registry", lambda: registry)
    assert "sim-timed" in backends.stateful_backends()

    c, x = anekit.input("c", (1, 4)), anekit.input("x", (1, 4))
    h = anekit.ops.tanh(anekit.ops.add(anekit.ops.mul(c, np.float32(0.5)), x), name="h")
    program = anekit.compile(anekit.graph([h]), "m4").program
    xs = np.random.default_rng(0).standard_normal((6, 1, 4)).astype(np.float32)
    timed = program.session("sim-timed", state={"c": "h"})
    sim = program.session("sim", state={"c": "h"})
    for x_step in xs:
        timed.run({"x": x_step})
        sim.run({"x": x_step})
    np.testing.assert_array_equal(timed.read("c"), sim.read("c"))
    assert len(backend.log) == 6 * len(program.segments) and all(t >= 0 for _, t in backend.log)
    feeds = {"c": xs[0], "x": xs[1]}
    np.testing.assert_array_equal(
        program.run(feeds, "sim-timed")["h"], program.run(feeds, "sim")["h"]
    )
