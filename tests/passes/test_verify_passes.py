"""ANEKIT_VERIFY_PASSES=1 (set for the whole suite by tests/conftest.py) validates the graph
after every pass, so a pass that leaves an invalid graph fails where it ran."""

from __future__ import annotations

import os
from types import MappingProxyType

import numpy as np
import pytest

import anekit
from anekit.errors import InternalError
from anekit.ir.graph import Node
from anekit.passes import pipeline
from anekit.passes.pipeline import PASSES, VERIFY_PASSES_ENV, Pass


def _model() -> anekit.Graph:
    x = anekit.input("x", (1, 16))
    return anekit.graph([anekit.ops.relu(anekit.ops.add(x, np.float32(1.0)), name="y")])


def _breaking(graph, ctx):  # noqa: ANN001, ANN202
    """canonicalize, then a node reading a value no one defines (an invalid graph)."""
    out = PASSES_BEFORE["canonicalize"].run(graph, ctx)
    stray = Node("stray", "relu", ("nowhere",), ("stray_out",), {})
    return out.replace(nodes=[*out.nodes, stray])


PASSES_BEFORE = dict(PASSES)


def test_the_suite_runs_with_verification_on() -> None:
    assert os.environ.get(VERIFY_PASSES_ENV) == "1"


def test_a_pass_that_breaks_the_graph_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = PASSES["canonicalize"]
    broken = {**PASSES, "canonicalize": Pass(_breaking, spec.needs, spec.provides)}
    monkeypatch.setattr(pipeline, "PASSES", MappingProxyType(broken))
    with pytest.raises(InternalError, match="pass 'canonicalize' produced an invalid graph"):
        anekit.compile(_model(), "m4")
    monkeypatch.setenv(VERIFY_PASSES_ENV, "0")  # off: the broken graph goes on unverified
    with pytest.raises(Exception) as err:  # noqa: PT011 - whatever a later pass trips on
        anekit.compile(_model(), "m4")
    assert "produced an invalid graph" not in str(err.value)
