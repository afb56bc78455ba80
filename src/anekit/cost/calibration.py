"""The cost model's calibration file: constants with sources, and the published anchors."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any

from anekit.errors import InternalError

_KINDS = ("measured", "derived", "assumption", "choice")
_FIGURES = (
    "mac_startup_flops",
    "planar_elements_per_s",
    "planar_onchip_elements_per_s",
    "planar_scaling",
    "transition_bytes_per_element",
    "cpu_bytes_per_element",
)
_METRICS = ("tflops", "us", "ms")


@dataclass(frozen=True)
class Anchor:
    """A published measurement of a workload the model reconstructs."""

    id: str
    target: str
    workload: Mapping[str, Any]
    metric: str  # "tflops" (throughput) or "us"/"ms" (latency)
    published: tuple[float, float]  # the published value or range
    role: str  # "calibration": the figure feeds a constant; "check": independent
    source: str

    def error(self, estimate: float) -> float:
        """Relative distance of ``estimate`` from the published range (0 inside it)."""
        low, high = self.published
        if low <= estimate <= high:
            return 0.0
        return min(abs(estimate - low) / low, abs(estimate - high) / high)


@dataclass(frozen=True)
class Calibration:
    """The constants of calibration.json (see its "figures" for the sources)."""

    mac_startup_flops: float
    planar_elements_per_s: float  # a planar layer reading an operand through memory
    planar_onchip_elements_per_s: float  # a planar layer fed entirely on chip (chained/resident)
    planar_reference_target: str
    transition_bytes_per_element: float
    cpu_bytes_per_element: float
    sources: Mapping[str, str]
    anchors: tuple[Anchor, ...]
    skipped: tuple[Mapping[str, str], ...]


def parse_calibration(text: str, where: str = "calibration.json") -> Calibration:
    """Parse and check the calibration file; a bad file is an InternalError naming the problem."""
    try:
        data = json.loads(text)
        figures = data["figures"]
        if set(figures) != set(_FIGURES):
            raise ValueError(f"figures must be exactly {', '.join(_FIGURES)}")
        for name, fig in figures.items():
            if fig.get("kind") not in _KINDS or not str(fig.get("source", "")).strip():
                raise ValueError(f"{name}: needs a kind ({', '.join(_KINDS)}) and a source")
        anchors = []
        for raw in data["anchors"]:
            low, high = (float(v) for v in raw["published"])
            if raw["metric"] not in _METRICS or not 0 < low <= high:
                raise ValueError(f"anchor {raw.get('id')}: bad metric or published range")
            if raw["role"] not in ("calibration", "check") or not raw["source"].strip():
                raise ValueError(f"anchor {raw['id']}: role and source are required")
            anchors.append(
                Anchor(
                    raw["id"],
                    raw["target"],
                    MappingProxyType(dict(raw["workload"])),
                    raw["metric"],
                    (low, high),
                    raw["role"],
                    raw["source"],
                )
            )
        if len({a.id for a in anchors}) != len(anchors):
            raise ValueError("anchor ids must be unique")
        return Calibration(
            mac_startup_flops=float(figures["mac_startup_flops"]["value"]),
            planar_elements_per_s=float(figures["planar_elements_per_s"]["value"]),
            planar_onchip_elements_per_s=float(figures["planar_onchip_elements_per_s"]["value"]),
            planar_reference_target=str(figures["planar_elements_per_s"]["reference_target"]),
            transition_bytes_per_element=float(figures["transition_bytes_per_element"]["value"]),
            cpu_bytes_per_element=float(figures["cpu_bytes_per_element"]["value"]),
            sources=MappingProxyType({k: v["source"] for k, v in figures.items()}),
            anchors=tuple(anchors),
            skipped=tuple(MappingProxyType(dict(s)) for s in data.get("skipped", ())),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InternalError(f"{where}: malformed calibration file: {exc}") from None


@functools.cache
def default_calibration() -> Calibration:
    """The packaged calibration.json, loaded and checked once per process."""
    text = resources.files("anekit.cost").joinpath("calibration.json").read_text(encoding="utf-8")
    return parse_calibration(text)
