"""`anekit inspect` of netplists (Apple's plist network descriptions): detection and the tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anekit.cli.inspect_kinds.base import Kind, Node, add_limited, without_bom_or_space


def is_plist(path: Path, head: bytes) -> bool:
    text = without_bom_or_space(head)
    return (
        head.startswith(b"bplist00")
        or (text.startswith(b"<?xml") and b"<plist" in head)
        or text.startswith(b"<plist")
    )


def describe_netplist(path: Path) -> dict[str, Any]:
    from anekit.formats.netplist.describe import describe

    return describe(path)


def _params(params: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return str(v)

    return " · ".join(f"{k}={value(v)}" for k, v in params.items()) or "none"


def render_netplist(doc: dict[str, Any]) -> Node:
    root = Node(
        f"netplist {doc['version']}, {len(doc['networks'])} network(s), {doc['size']} bytes"
    )
    for net in doc["networks"]:
        _add_network(root.add(f"network {net['name']} ({net['layout']})"), net)
    return root


def _add_network(node: Node, net: dict[str, Any]) -> None:
    inputs = node.add(f"inputs ({len(net['inputs'])})")
    for port in net["inputs"]:
        s = port["shape"]
        depth = f" D {s['depth']}" if net["rank"] == 5 else ""
        inputs.add(
            f"{port['name']}: {port['type']} [N {s['batch']} C {s['channels']}{depth} "
            f"H {s['height']} W {s['width']}]"
        )
    outputs = node.add(f"outputs ({len(net['outputs'])})")
    for port in net["outputs"]:
        outputs.add(f"{port['name']} ← {port['bottom']} ({port['type'] or 'as computed'})")
    files = node.add(f"weight files ({len(net['weights'])})")
    for w in net["weights"]:
        state = f"{w['size']} bytes" if w["problem"] is None else w["problem"]
        files.add(f"[{w['index']}] {w['name']}: {state}")
    units = node.add(f"units ({len(net['units'])})")
    for unit in net["units"]:
        shape = "x".join(map(str, unit["shape"])) if unit["shape"] else "?"
        child = units.add(
            f"{unit['name']}: {unit['type']} ← {', '.join(unit['bottoms'])}"
            + (f" → {unit['layer']} → {unit['dtype']}[{shape}]" if unit["layer"] else "")
            + ("" if unit["certainty"] == "attested" else f" ({unit['certainty']} parameters)")
        )
        child.add(f"params: {_params(unit['params'])}")
        for w in unit["weights"]:
            child.add(
                f"{w['role']}: {w['count']} × {w['dtype']} ({w['bytes']} bytes) at offset "
                f"{w['offset']} of [{w['index']}] {w['file']}"
            )
    graph = net["graph"]
    if graph["runs"]:
        node.add("reads into a graph that runs on the reference backend")
    else:
        problems = node.add("does not read into a runnable graph")
        add_limited(
            problems,
            [graph["error"], *graph["weight_problems"]]
            if graph["error"]
            else graph["weight_problems"],
            str,
        )
    if net["ignored_keys"]:
        node.add("unused entries: " + ", ".join(net["ignored_keys"]))


KIND = Kind("netplist", is_plist, describe_netplist, render_netplist, (".plist",))
