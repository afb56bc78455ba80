"""Where a step program runs: a runtime session (state resident between steps) or, for the
``reference`` backend, the IR graph in fp32 with the state held by the host."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from anekit.errors import AnekitError
from anekit.ir.graph import Graph

BACKENDS = ("sim", "sim-fp32", "reference")


class HostSession:
    """The session protocol (seed/run/read) over `Graph.run`: state kept in host arrays."""

    def __init__(self, graph: Graph, state: Mapping[str, str]):
        self.graph = graph
        self.state = dict(state)
        self._values: dict[str, np.ndarray] = {}

    def seed(self, values: Mapping[str, np.ndarray]) -> None:
        self._values.update({k: np.asarray(v, np.float32) for k, v in values.items()})

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        out = self.graph.run({**feeds, **self._values})
        for s, o in self.state.items():
            self._values[s] = out.pop(o)
        return out

    def read(self, name: str) -> np.ndarray:
        return self._values[name]


def open_session(graph: Graph, state: Mapping[str, str], backend: str, target: str,
                 resident_state: bool) -> tuple[Any, Any]:  # fmt: skip
    """(session, compiled model or None) for a step graph."""
    if backend not in BACKENDS:
        raise AnekitError(f"unknown training backend '{backend}'",
                          hint=f"choose one of {', '.join(BACKENDS)}")  # fmt: skip
    if backend == "reference":
        return HostSession(graph, state), None
    from anekit.compiler import compile as compile_model

    compiled = compile_model(graph, target)
    if resident_state:
        return compiled.session(backend=backend, state=dict(state)), compiled
    return _ShuttleSession(compiled.program, state, backend), compiled


class _ShuttleSession(HostSession):
    """resident_state=False: every step sends the state in and reads it back (the host
    shuttle seed 004 measured at ~4x the resident path)."""

    def __init__(self, program: Any, state: Mapping[str, str], backend: str):
        self.program = program
        self.backend = backend
        self.state = dict(state)
        self._values = {}

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        out = self.program.run({**feeds, **self._values}, backend=self.backend)
        for s, o in self.state.items():
            self._values[s] = out.pop(o)
        return out
