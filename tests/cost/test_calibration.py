"""The calibration file loader: every constant has a kind and a source; bad files are rejected."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from anekit.cost.calibration import default_calibration, parse_calibration
from anekit.errors import InternalError

TEXT = resources.files("anekit.cost").joinpath("calibration.json").read_text(encoding="utf-8")


def test_packaged_file_loads_with_sources():
    cal = default_calibration()
    assert cal.mac_startup_flops > 0 and cal.planar_elements_per_s > 0
    assert set(cal.sources) >= {"mac_startup_flops", "planar_elements_per_s"}
    for source in cal.sources.values():
        assert "[" in source or source.startswith(("assumed", "CPU"))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["figures"].pop("mac_startup_flops"), "figures must be exactly"),
        (lambda d: d["figures"]["mac_startup_flops"].update(source=" "), "needs a kind"),
        (lambda d: d["anchors"][0].update(metric="furlongs"), "bad metric"),
        (lambda d: d["anchors"][0].update(published=[5, 1]), "bad metric or published range"),
        (lambda d: d["anchors"].append(dict(d["anchors"][0])), "unique"),
        (lambda d: d["anchors"][0].pop("source"), "source"),
    ],
)
def test_malformed_files_are_rejected(mutate, message):
    data = json.loads(TEXT)
    mutate(data)
    with pytest.raises(InternalError, match=message):
        parse_calibration(json.dumps(data))


def test_not_json_is_rejected():
    with pytest.raises(InternalError, match="calibration.json"):
        parse_calibration("{not json")
