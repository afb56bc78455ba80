"""What the pass pipeline decides: diagnostics, per-node placement, segments, the pass log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from anekit.ir.graph import Graph

Severity = Literal["error", "warning", "info"]
Device = Literal["ane", "cpu"]


@dataclass(frozen=True)
class Diagnostic:
    """A finding about one node: the rule it broke and the remedy, in Apple's plain style."""

    severity: Severity
    code: str  # stable identifier, e.g. "softmax-unsupported", "kmem-overflow"
    node: str | None
    message: str  # e.g. "Softmax is not supported by this ANE architecture"
    hint: str | None = None

    def as_dict(self) -> dict:
        return {
            "severity": self.severity,
            "code": self.code,
            "node": self.node,
            "message": self.message,
            "hint": self.hint,
        }

    def __str__(self) -> str:
        where = f"{self.node}: " if self.node else ""
        text = f"{self.severity}: {where}{self.message} [{self.code}]"
        return text + (f"\n  hint: {self.hint}" if self.hint else "")


@dataclass(frozen=True)
class Placement:
    """Where one node of the engine graph runs, and why not on the engine when it doesn't."""

    device: Device
    segment: int
    reason: str | None = None


@dataclass(frozen=True)
class Segment:
    """A maximal run of nodes on one device: one program (one dispatch when on the ANE).

    ``inputs`` are the values it reads from outside (graph inputs or other segments'
    outputs; constants excluded), ``outputs`` the values it must hand on.
    """

    index: int
    device: Device
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class PassRecord:
    """What one pass changed: its name, a count of rewrites, and readable notes."""

    name: str
    changes: int
    notes: tuple[str, ...] = field(default=())
    seconds: float = 0.0


# validate's verdict on a node: None (the engine accepts it) or (code, message)
Verdict = tuple[str, str] | None


@dataclass(frozen=True)
class PipelineResult:
    """What the pass pipeline returns: the engine graph and the facts passes provided about it.

    ``verdicts`` come from validate; ``placement`` and ``segments`` from segment (empty when
    the pipeline did not run those passes, e.g. a canonicalize-only run in a test).
    """

    graph: Graph
    verdicts: Mapping[str, Verdict] = field(default_factory=lambda: MappingProxyType({}))
    placement: Mapping[str, Placement] = field(default_factory=lambda: MappingProxyType({}))
    segments: tuple[Segment, ...] = ()
