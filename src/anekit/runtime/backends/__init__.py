"""The backend seam: one protocol for running a program and one registry of backends.

A backend is where a model runs. Each lives in one module of this package, which defines
``BACKEND`` (an instance of :class:`Backend`); the registry finds them by listing the
package, so adding a backend is adding one module. Every name means one thing everywhere
(`CompiledModel.run`, `Program.run`, sessions and `anekit run` all ask :func:`get`):

- ``reference``: the IR graph in fp32 with each op's numpy kernel. It runs graphs (ONNX
  models, netplists, a compiled model's engine graph), not MIL.
- ``sim``: each segment's MIL on the fp16 simulator (fp16 storage between ops).
- ``sim-fp32``: the same MIL with every fp16 type widened to fp32; set beside ``sim`` it
  isolates what fp16 storage costs, using only the bundle (weights already fp16).

A backend runs graphs (:meth:`Backend.run_graph`), MIL segments (:meth:`Backend.prepare`,
which returns a :class:`SegmentRunner` that runs one segment many times), or both.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from anekit.errors import AnekitError

if TYPE_CHECKING:
    from anekit.formats import mil
    from anekit.formats.bundle import SegmentEntry
    from anekit.ir.graph import Graph


class SegmentRunner(Protocol):
    """One segment, loaded once and run many times.

    ``run`` takes the segment's MIL inputs by MIL name (in their MIL dtype's storage, padded
    as the manifest says) and returns its MIL outputs by MIL name; fp16 results come back as
    float32 arrays holding fp16 values.
    """

    def run(self, args: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class SegmentSource:
    """Everything a backend needs to load one segment.

    ``weights`` is the segment's weight file (a verified path on disk, bytes in memory, or
    None); ``base_dir`` is the directory ``@model_path`` names when the program runs from
    disk (None for a bundle held in memory).
    """

    program: mil.MilProgram
    weights: Path | bytes | None
    base_dir: Path | None
    entry: SegmentEntry
    where: str


class Backend:
    """A place to run models. Subclasses set the class attributes and override what they run."""

    name: str = ""
    summary: str = ""  # one line for `--help` and error hints
    runs_graphs: bool = False
    runs_segments: bool = False
    runs_hwx: bool = False  # runs Apple-format .hwx programs (run_hwx)

    def unavailable(self) -> str | None:
        """Why this backend cannot run on this machine, or None when it can."""
        return None

    def run_graph(self, graph: Graph, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        raise AnekitError(
            f"backend '{self.name}' runs compiled programs, not graphs",
            hint=f"graphs run on: {', '.join(graph_backends())}",
        )

    def prepare(self, segment: SegmentSource) -> SegmentRunner:
        raise AnekitError(
            f"backend '{self.name}' runs graphs, not compiled programs (bundles, MIL)",
            hint=f"compiled programs run on: {', '.join(segment_backends())}",
        )

    def run_hwx(self, program: Any, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        raise AnekitError(
            f"backend '{self.name}' does not run .hwx programs",
            hint="run a .hwx on: " + ", ".join(n for n, b in _registry().items() if b.runs_hwx),
        )

    def check_available(self) -> None:
        reason = self.unavailable()
        if reason is not None:
            raise AnekitError(f"backend '{self.name}' cannot run here: {reason}")


@cache
def _registry() -> dict[str, Backend]:
    found: dict[str, Backend] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        backend = importlib.import_module(f"{__name__}.{info.name}").BACKEND
        if backend.name in found:
            raise AssertionError(f"two backends are named '{backend.name}'")
        found[backend.name] = backend
    return found


def names() -> tuple[str, ...]:
    """Every backend's name, sorted."""
    return tuple(sorted(_registry()))


def graph_backends() -> tuple[str, ...]:
    return tuple(n for n, b in sorted(_registry().items()) if b.runs_graphs)


def segment_backends() -> tuple[str, ...]:
    return tuple(n for n, b in sorted(_registry().items()) if b.runs_segments)


def get(name: str) -> Backend:
    """The backend called ``name``; an AnekitError listing the choices otherwise."""
    backend = _registry().get(name) if isinstance(name, str) else None
    if backend is None:
        raise AnekitError(
            f"unknown backend {name!r}",
            hint="choose one of: "
            + ", ".join(f"{b.name} ({b.summary})" for b in _registry().values()),
        )
    return backend


def describe() -> list[tuple[str, str, str | None]]:
    """(name, summary, why it is unavailable here or None) for every backend."""
    return [(b.name, b.summary, b.unavailable()) for _, b in sorted(_registry().items())]


__all__ = [
    "Backend",
    "SegmentRunner",
    "SegmentSource",
    "describe",
    "get",
    "graph_backends",
    "names",
    "segment_backends",
]
