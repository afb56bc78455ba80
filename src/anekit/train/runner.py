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
    keep_heap_pages()
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
