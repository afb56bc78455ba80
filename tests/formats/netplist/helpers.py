"""Shared helpers for the netplist tests: Apple's fixtures, their weight files, graph comparison."""

from __future__ import annotations

import plistlib
from pathlib import Path
from typing import Any

import numpy as np
from tests.fixtures import FIXTURES

from anekit.ir import Graph

NETPLIST_DIR = FIXTURES / "netplist"
PLISTS = sorted(NETPLIST_DIR.glob("**/*.plist"))
PLIST_IDS = [str(p.relative_to(NETPLIST_DIR).with_suffix("")) for p in PLISTS]


def plist(path: Path) -> dict[str, Any]:
    """A fixture as plistlib reads it (independent of anekit)."""
    with path.open("rb") as handle:
        return plistlib.load(handle)


def network(path: Path) -> dict[str, Any]:
    doc = plist(path)
    return doc[doc["Networks"][0]]


def used_weight_names(path: Path) -> list[str]:
    """Weights entries some unit reads from (by KernelIndex/BiasIndex, default 0)."""
    net = network(path)
    used = set()
    for name in net["Units"]:
        params = net[name].get("Params", {})
        if net[name]["Type"] == "Conv":
            used.add(params.get("KernelIndex", 0))
        group = params.get("BiasScaleGroupData", {})
        for prefix in ("Bias", "Scale"):
            if f"{prefix}Count" in group:
                used.add(group.get(f"{prefix}Index", 0))
    return [net["Weights"][i] for i in sorted(used)]


def missing_weight(path: Path) -> str | None:
    """The first used weight file that is not beside the netplist (None when all are)."""
    for name in used_weight_names(path):
        if name.startswith("/") or not (path.parent / name).is_file():
            return name
    return None


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in graph.inputs:
        if v.dtype.is_float:
            feeds[v.name] = rng.standard_normal(v.shape).astype(v.dtype.numpy)
        else:
            info = np.iinfo(v.dtype.numpy)
            feeds[v.name] = rng.integers(info.min, info.max, v.shape, endpoint=True).astype(
                v.dtype.numpy
            )
    return feeds


def assert_same_graph(a: Graph, b: Graph) -> None:
    """Same inputs, outputs, nodes (op, names, wiring, attributes) and constants."""
    assert [(v.name, v.type) for v in a.inputs] == [(v.name, v.type) for v in b.inputs]
    assert [(v.name, v.type) for v in a.outputs] == [(v.name, v.type) for v in b.outputs]
    assert [(n.op, n.name, n.inputs, n.outputs) for n in a.nodes] == [
        (n.op, n.name, n.inputs, n.outputs) for n in b.nodes
    ]
    for x, y in zip(a.nodes, b.nodes, strict=True):
        assert dict(x.attrs) == dict(y.attrs), x.name
    assert sorted(a.constants) == sorted(b.constants)
    for name, array in a.constants.items():
        other = b.constants[name]
        assert array.dtype == other.dtype and array.shape == other.shape, name
        np.testing.assert_array_equal(array, other, err_msg=name)


def assert_same_outputs(a: Graph, b: Graph, feeds: dict[str, np.ndarray]) -> None:
    ra, rb = a.run(feeds), b.run(feeds)
    assert list(ra) == list(rb)
    for name in ra:
        assert ra[name].dtype == rb[name].dtype, name
        np.testing.assert_array_equal(ra[name], rb[name], err_msg=name)
