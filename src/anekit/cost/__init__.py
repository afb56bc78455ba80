"""Latency estimates per chip: a cost model over the schedule, calibrated on published figures."""

from anekit.cost.calibration import Anchor, Calibration, default_calibration
from anekit.cost.estimate import (
    Estimate,
    SegmentCost,
    estimate_compiled,
    estimate_graph,
    estimate_segments,
    report_estimate,
)
from anekit.cost.model import LayerCost, PartitionCost, Rates

__all__ = [
    "Anchor",
    "Calibration",
    "Estimate",
    "LayerCost",
    "PartitionCost",
    "Rates",
    "SegmentCost",
    "default_calibration",
    "estimate_compiled",
    "estimate_graph",
    "estimate_segments",
    "report_estimate",
]
