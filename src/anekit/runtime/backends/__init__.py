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
which returns a :class:`SegmentRunner` that runs one segment many times), or both. What its
runners can do beyond ``run`` it declares in :class:`Capabilities`; programs and sessions
ask the declaration and never probe a runner or compare a backend's name
(docs/adding-a-backend.md).
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


class StoredRunner(SegmentRunner, Protocol):
    """A runner that also takes inputs already in storage form (``Capabilities.stored_runs``):
    fp16 values held as float32 go in without another rounding pass."""

    def run_stored(self, args: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


class EngineBuffers(SegmentRunner, Protocol):
    """An engine segment's runner that is its own I/O surfaces (``Capabilities.aliasing``):
    an input can be bound to an output's surface so state stays there between steps, an
    input can be written once and stay (``pin``), and the program is released explicitly.
    ``pair``/``swap`` (double-buffered state) are asked only with
    ``Capabilities.paired_surfaces``."""

    def alias(self, input_name: str, output_name: str) -> None: ...
    def pair(self, input_name: str, output_name: str) -> None: ...
    def swap(self, input_name: str) -> None: ...
    def write_input(self, name: str, array: np.ndarray) -> None: ...
    def read_input(self, name: str) -> np.ndarray: ...
    def pin(self, input_name: str, array: np.ndarray) -> None: ...
    def fixed(self, input_name: str) -> bool: ...
    def release(self) -> None: ...


@dataclass(frozen=True)
class Capabilities:
    """What a segment backend's runners can do beyond ``run``; every field defaults to
    False, so a backend declaring nothing runs programs stateless and nothing else.

    - ``state``: a session may feed outputs back into inputs from step to step (each
      runner's results, in its storage form, are valid inputs of the next step).
    - ``resident_state``: the session keeps an engine segment's state resident on I/O
      surfaces it models byte for byte (`anekit.runtime.binding.Surfaces`), with the
      engine's binding rules checked at load.
    - ``aliasing``: an engine segment's runner is its own surfaces (:class:`EngineBuffers`);
      state aliased to an output stays on the engine between steps.
    - ``paired_surfaces``: those surfaces can be double-buffered (``pair``/``swap``), so a
      guarded step's state can be discarded.
    - ``stored_runs``: runners have ``run_stored`` (:class:`StoredRunner`).
    - ``weight_reload``: after a weight update, :meth:`Backend.prepare` loads the changed
      segments again while the old runners stay loaded (resident state is read from
      them, then they are released); without it, a program loaded on the backend refuses
      weight updates.
    """

    state: bool = False
    resident_state: bool = False
    aliasing: bool = False
    paired_surfaces: bool = False
    stored_runs: bool = False
    weight_reload: bool = False


@dataclass(frozen=True)
class SegmentSource:
    """Everything a backend needs to load one segment.

    ``weights`` is the segment's weight file (a verified path on disk, bytes in memory, or
    None); ``base_dir`` is the directory ``@model_path`` names when the program runs from
    disk (None for a bundle held in memory); ``chip`` the target the program was compiled
    for, as its manifest names it.
    """

    program: mil.MilProgram
    weights: Path | bytes | None
    base_dir: Path | None
    entry: SegmentEntry
    where: str
    chip: str


class Backend:
    """A place to run models. Subclasses set the class attributes and override what they run."""

    name: str = ""
    summary: str = ""  # one line for `--help` and error hints
    runs_graphs: bool = False
    runs_segments: bool = False
    runs_hwx: bool = False  # runs Apple-format .hwx programs (run_hwx)
    capabilities: Capabilities = Capabilities()  # what its segment runners can do

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

    def release(self, runner: SegmentRunner) -> None:
        """Unload one runner (a backend whose runners hold resources overrides this)."""

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


def stateful_backends() -> tuple[str, ...]:
    """The segment backends on which sessions may carry state."""
    return tuple(n for n in segment_backends() if _registry()[n].capabilities.state)


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
    "Capabilities",
    "EngineBuffers",
    "SegmentRunner",
    "StoredRunner",
    "SegmentSource",
    "describe",
    "get",
    "graph_backends",
    "names",
    "segment_backends",
    "stateful_backends",
]
