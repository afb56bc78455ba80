"""Where a step program runs: a runtime session (state resident between steps) or, for the
``reference`` backend, the IR graph in fp32 with the state held by the host."""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping
from typing import Any

import numpy as np

from anekit.errors import AnekitError
from anekit.ir.graph import Graph

BACKENDS = ("sim", "sim-fp32", "reference")
HEAP_TOP_PAD = 64 << 20  # bytes glibc keeps at the top of the heap when it trims
_M_TOP_PAD = -2  # glibc's mallopt parameter number


def keep_heap_pages() -> bool:
    """Ask glibc to keep ``HEAP_TOP_PAD`` at the top of the heap (unless the environment
    sets MALLOC_TOP_PAD_). A simulated step allocates and frees the same large temporaries
    every step; with glibc's default the heap top is returned to the system after a
    segment and every page faulted back in during the next, which was 40% of the MLP
    step (7.1 ms instead of 12.2 on an otherwise equal run). Returns whether it applied."""
    if os.environ.get("MALLOC_TOP_PAD_") is not None or platform.libc_ver()[0] != "glibc":
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_TOP_PAD, HEAP_TOP_PAD))
    except (OSError, AttributeError):  # pragma: no cover - not glibc after all
        return False


class HostSession:
    """The session protocol (seed/run/read) over `Graph.run`: state kept in host arrays,
    replaced only when the ``guard`` output is all finite (as `Session` does)."""

    def __init__(self, graph: Graph, state: Mapping[str, str], guard: str | None = None):
        self.graph = graph
        self.state = dict(state)
        self.guard = guard
        self._values: dict[str, np.ndarray] = {}

    def seed(self, values: Mapping[str, np.ndarray]) -> None:
        self._values.update({k: np.asarray(v, np.float32) for k, v in values.items()})

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return self._keep(self.graph.run({**feeds, **self._values}))

    def _keep(self, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        nexts = {s: out.pop(o) for s, o in self.state.items()}
        if self.guard is None or np.isfinite(out[self.guard]).all():
            self._values.update(nexts)
        return out

    def read(self, name: str) -> np.ndarray:
        return self._values[name]


def open_session(graph: Graph, state: Mapping[str, str], backend: str, target: str,
                 resident_state: bool, guard: str | None = None) -> tuple[Any, Any]:  # fmt: skip
    """(session, compiled model or None) for a step graph; a step whose ``guard`` output
    is not all finite keeps every state value."""
    if backend not in BACKENDS:
        raise AnekitError(f"unknown training backend '{backend}'",
                          hint=f"choose one of {', '.join(BACKENDS)}")  # fmt: skip
    if backend == "reference":
        return HostSession(graph, state, guard), None
    from anekit.compiler import compile as compile_model

    compiled = compile_model(graph, target)
    keep_heap_pages()
    if resident_state:
        return compiled.session(backend=backend, state=dict(state), guard=guard), compiled
    return _ShuttleSession(compiled.program, state, backend, guard), compiled


class _ShuttleSession(HostSession):
    """resident_state=False: every step sends the state in and reads it back (the host
    shuttle e5rt-reference measured at ~4x the resident path)."""

    def __init__(self, program: Any, state: Mapping[str, str], backend: str, guard: str | None):
        self.program = program
        self.backend = backend
        self.state = dict(state)
        self.guard = guard
        self._values = {}

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return self._keep(self.program.run({**feeds, **self._values}, backend=self.backend))
