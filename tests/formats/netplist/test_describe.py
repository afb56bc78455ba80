"""describe(): the JSON `anekit inspect` prints, complete even when weight files are absent."""

from __future__ import annotations

import json

import pytest

from anekit.errors import FormatError
from anekit.formats.netplist.describe import describe, describe_bytes

from .helpers import NETPLIST_DIR, PLIST_IDS, PLISTS, missing_weight, network


@pytest.mark.parametrize("path", PLISTS, ids=PLIST_IDS)
def test_every_fixture_is_described(path):
    doc = json.loads(json.dumps(describe(path)))
    assert doc["kind"] == "netplist" and doc["version"] == "1.0.9"
    (net,) = doc["networks"]
    source = network(path)
    assert [u["name"] for u in net["units"]] == source["Units"]
    assert [p["name"] for p in net["inputs"]] == source["Inputs"]
    assert [w["name"] for w in net["weights"]] == source.get("Weights", [])
    missing = missing_weight(path)
    assert net["graph"]["runs"] == (missing is None)
    if missing is not None:
        assert any(f"'{missing}'" in p for p in net["graph"]["weight_problems"])
        assert next(w for w in net["weights"] if w["name"] == missing)["problem"]
    for unit in net["units"]:  # zeros stand in for absent weights: every unit still has a shape
        assert unit["layer"] and unit["shape"] and unit["certainty"] == "attested"


def test_weight_references_are_listed_per_unit():
    (net,) = describe(NETPLIST_DIR / "net.plist")["networks"]
    conv, goc = net["units"]
    assert conv["weights"] == [
        {
            "role": "kernel",
            "index": 0,
            "file": "model.espresso.weights",
            "offset": 192,
            "dtype": "fp32",
            "count": 6,
            "bytes": 24,
        }
    ]
    assert (goc["weights"][0]["role"], goc["weights"][0]["file"]) == (
        "bias",
        "net.additional.weights",
    )
    assert net["weights"][0]["size"] == (NETPLIST_DIR / "model.espresso.weights").stat().st_size
    assert conv["layer"] == "conv" and goc["layer"] == "identity + goc:goc"


def test_a_structural_error_is_reported_with_the_units_read_so_far():
    data = (NETPLIST_DIR / "simple" / "doubleneuron.plist").read_bytes()
    data = data.replace(b"<string>Sigmoid</string>", b"<string>Swish</string>", 1)
    (net,) = describe_bytes(data)["networks"]
    assert not net["graph"]["runs"] and "unsupported Neuron type 'Swish'" in net["graph"]["error"]
    assert [u["layer"] for u in net["units"]] == [None, None]


def test_a_file_that_is_not_a_netplist_raises():
    with pytest.raises(FormatError, match="not a readable property list"):
        describe_bytes(b"<?xml version='1.0'?><plist><dict><key>x</key></plist>")
