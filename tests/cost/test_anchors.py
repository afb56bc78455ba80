"""Estimates against published measurements (FACTS sections 7-8 and ANEForge's M5 Pro sweep).

Each anchor of calibration.json is a reconstructed workload with its published figure and
source; the estimate must land within 35% of it. "calibration" anchors feed a constant of
the model (the test checks the rest of the model around it); "check" anchors do not.
"""

from __future__ import annotations

import pytest

from anekit import targets
from anekit.cost import default_calibration
from anekit.cost.workloads import anchor_estimate

CAL = default_calibration()
TOLERANCE = 0.35


@pytest.mark.parametrize("anchor", CAL.anchors, ids=[a.id for a in CAL.anchors])
def test_estimate_reproduces_the_published_figure(anchor):
    value, est = anchor_estimate(anchor)
    error = anchor.error(value)
    assert error <= TOLERANCE, (
        f"{anchor.id}: estimate {value:.2f} {anchor.metric} vs published "
        f"{anchor.published} ({error:.0%} off); source: {anchor.source}"
    )
    assert est.target == targets.get(anchor.target).name


def test_every_anchor_names_its_source_and_role():
    assert len(CAL.anchors) >= 10
    for a in CAL.anchors:
        assert a.source.startswith("[") and a.role in ("calibration", "check")
    assert sum(a.role == "check" for a in CAL.anchors) >= len(CAL.anchors) // 2
    for skipped in CAL.skipped:
        assert skipped["what"] and skipped["why"]


def test_the_anchor_error_is_the_distance_to_the_published_range():
    a = CAL.anchors[0]
    low, high = a.published
    assert a.error((low + high) / 2) == 0.0
    assert a.error(high * 1.2) == pytest.approx(0.2)
    assert a.error(low * 0.5) == pytest.approx(0.5)
