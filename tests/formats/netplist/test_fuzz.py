"""Mutated netplists and weight files read or raise FormatError; whatever reads also writes back."""

from __future__ import annotations

import json
import plistlib
from functools import cache
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.formats.fuzz_benchmark import load_fuzz_benchmark

from anekit.errors import FormatError
from anekit.formats import netplist
from anekit.formats.netplist.describe import describe_bytes

from .helpers import NETPLIST_DIR, PLIST_IDS, PLISTS, assert_same_graph, assert_same_outputs

RUN_LIMIT = 1 << 16


@cache
def weight_files() -> dict[str, bytes]:
    """The fixtures' weight files under every name the fixtures use for them."""
    files = {}
    for path in NETPLIST_DIR.glob("*.weights"):
        files[path.name] = files[f"../{path.name}"] = path.read_bytes()
    return files


@cache
def pristine(index: int) -> dict[str, Any]:
    return plistlib.loads(PLISTS[index].read_bytes())


def slots(value: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in list(items):
        out.append((value, key))
        if isinstance(item, dict | list):
            slots(item, out)
    return out


VALUES = st.one_of(
    st.sampled_from([-1, 0, 1, 2, 3, 64, 0xFFFF, 1 << 24, (1 << 31) - 1, 1 << 40, (1 << 63) - 1]),
    st.sampled_from(["", "Depth", "Channel", "Height", "Width", "Batch", "Float32", "UInt8"]),
    st.sampled_from(["Int8", "Max", "Sub", "ReLU", "Tanh", "Avg", "image", "../x", "/etc/passwd"]),
    st.sampled_from([True, 1.5, b"\0", [], {}, [1, 1], [{"Dimension": "Width", "Size": 2}]]),
)


@st.composite
def mutated_netplist(draw: st.DrawFn) -> tuple[str, bytes]:
    index = draw(st.integers(0, len(PLISTS) - 1))
    doc = json.loads(json.dumps(pristine(index)))  # a deep copy (the fixtures hold no data/dates)
    for _ in range(draw(st.integers(1, 3))):
        places = slots(doc, [])
        container, key = draw(st.sampled_from(places))
        action = draw(st.sampled_from(["set", "delete", "duplicate"]))
        if action == "set":
            container[key] = draw(VALUES)
        elif action == "delete":
            del container[key]
        elif isinstance(container, list):
            container.insert(key, container[key])
    return PLIST_IDS[index], plistlib.dumps(doc)


@settings(
    max_examples=250,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_netplist())
def test_mutated_values_read_or_raise_and_what_reads_writes_back(case):
    _, data = case
    try:
        json.dumps(describe_bytes(data, files=weight_files()))
        graph = netplist.parse(data, files=weight_files())
    except FormatError as exc:
        assert exc.message and exc.where
        return
    graph.validate()
    if sum(v.numel for v in graph.values.values()) > RUN_LIMIT:
        return
    feeds = {v.name: np.ones(v.shape, v.dtype.numpy) for v in graph.inputs}
    plist, blob = netplist.dumps(graph)
    again = netplist.parse(plist, files={"net.weights": blob})
    assert_same_graph(graph, again)
    assert_same_outputs(graph, again, feeds)


@settings(max_examples=120, derandomize=True, deadline=None, database=None)
@given(
    st.sampled_from(sorted(p.name for p in NETPLIST_DIR.glob("*.weights"))),
    st.one_of(st.integers(0, 300), st.just(None)),
    st.binary(max_size=8),
)
def test_mutated_weight_files_read_or_raise(name, cut, noise):
    blob = weight_files()[name]
    blob = (blob[:cut] if cut is not None else blob) + noise
    for path in PLISTS:
        data = path.read_bytes()
        names = plistlib.loads(data)["net"].get("Weights", [])
        if f"../{name}" not in names and name not in names:
            continue
        try:
            graph = netplist.parse(data, files=dict.fromkeys(names, blob))
        except FormatError as exc:
            assert "bytes" in exc.message or "does not exist" in exc.message
            continue
        graph.run({v.name: np.zeros(v.shape, v.dtype.numpy) for v in graph.inputs})


def test_fuzz_benchmark_netplist_targets_find_nothing(tmp_path):
    fuzz = load_fuzz_benchmark()
    out = tmp_path / "fuzz.json"
    args = ["--targets", "netplist", "netplist.weights", "--cases", "60", "--seed", "2"]
    assert fuzz.main([*args, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["findings"] == 0 and doc["finding_records"] == []
    plists = doc["targets"]["netplist"]
    assert set(plists["fixtures"]) == set(PLIST_IDS)
    assert set(plists["mutations"]) >= {"plist_value", "bit_flips", "truncate"}
    weights = doc["targets"]["netplist.weights"]["fixtures"]
    assert set(weights) == {p.name for p in NETPLIST_DIR.glob("*.weights")}
    for target in doc["targets"].values():
        tallies = target["fixtures"].values()
        assert all(t["ok"] + t["format_error"] == t["cases"] for t in tallies)
