"""Segmentation: order the engine graph so that nodes of one device run together, cut it into
ANE and CPU segments (one dispatch per ANE segment), and place every node."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from anekit.ir.engine import UNITS, LayerView
from anekit.ir.graph import Graph, Node
from anekit.passes.context import PassContext
from anekit.passes.results import Placement, Segment, Verdict

LAYOUT_ONLY_REASON = "a layout-only layer between CPU ops runs on the CPU (saves a dispatch)"


def _class_of(node: Node, device: str) -> str:
    """Grouping class: the device, except that a fused attention layer is a segment of its own
    (seed 000: scaled-dot-product attention is a hard cut between programs)."""
    if device == "ane" and node.attrs.get("layer_type") == "sdpa":
        return f"sdpa:{node.name}"
    return device


def group_by_device(graph: Graph, device: Mapping[str, str]) -> list[tuple[str, list[Node]]]:
    """A topological order that switches device as rarely as the dependencies allow.

    Greedy: keep taking ready nodes of the current class (in original order); when none is
    ready, switch to the class of the earliest ready node.
    """
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    producer = {o: n.name for n in graph.nodes for o in n.outputs}
    deps: dict[str, int] = {}
    users: dict[str, list[str]] = {n.name: [] for n in graph.nodes}
    for n in graph.nodes:
        preds = {producer[i] for i in n.inputs if i in producer}
        deps[n.name] = len(preds)
        for p in preds:
            users[p].append(n.name)
    klass = {n.name: _class_of(n, device[n.name]) for n in graph.nodes}
    ready: dict[str, list[tuple[int, str]]] = {}
    for n in graph.nodes:
        if not deps[n.name]:
            heapq.heappush(ready.setdefault(klass[n.name], []), (index[n.name], n.name))
    groups: list[tuple[str, list[Node]]] = []
    current = None
    while any(ready.values()):
        if current is None or not ready.get(current):
            current = min((h[0][0], k) for k, h in ready.items() if h)[1]
            groups.append((current, []))
        _, name = heapq.heappop(ready[current])
        groups[-1][1].append(graph.nodes[index[name]])
        for u in users[name]:
            deps[u] -= 1
            if not deps[u]:
                heapq.heappush(ready.setdefault(klass[u], []), (index[u], u))
    return groups


def _layout_only(nodes: list[Node]) -> bool:
    return all(n.op == "ane_layer" and UNITS[LayerView(n).layer_type] == "dma" for n in nodes)


def _next_to_cpu(nodes: list[Node], graph: Graph, device: Mapping[str, str]) -> bool:
    """All of the group's inputs come from CPU nodes, or all its outputs go only to CPU nodes."""
    names = {n.name for n in nodes}
    outs = {o for n in nodes for o in n.outputs}
    feeders = {
        graph.producer(i)
        for n in nodes
        for i in n.inputs
        if i and i not in outs and graph.producer(i)
    }
    readers = {u for o in outs for u in graph.consumers(o) if u.name not in names}
    from_cpu = bool(feeders) and all(device[p.name] == "cpu" for p in feeders)
    to_cpu = bool(readers) and all(device[u.name] == "cpu" for u in readers)
    return from_cpu or to_cpu


def _io(graph: Graph, nodes: list[Node]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    names = {n.name for n in nodes}
    made = {o for n in nodes for o in n.outputs}
    inputs = dict.fromkeys(
        i for n in nodes for i in n.inputs if i and i not in made and i not in graph.constants
    )
    graph_outputs = set(graph.output_names)
    outputs = dict.fromkeys(
        o for n in nodes for o in n.outputs
        if o in graph_outputs or any(u.name not in names for u in graph.consumers(o))
    )  # fmt: skip
    return tuple(inputs), tuple(outputs)


def segment(
    graph: Graph, ctx: PassContext, verdicts: Mapping[str, Verdict]
) -> tuple[Graph, dict[str, Any]]:
    """Place every node, cut ANE/CPU segments with the fewest transitions, count dispatches.
    Needs validate's ``verdicts``; provides ``placement`` and ``segments``."""
    device: dict[str, str] = {}
    reason: dict[str, str | None] = {}
    for n in graph.nodes:
        verdict = verdicts[n.name]  # validate judged every node of this graph
        ok = n.op == "ane_layer" and verdict is None
        device[n.name] = "ane" if ok else "cpu"
        reason[n.name] = None if ok else verdict[1]
    groups = group_by_device(graph, device)
    moved = True
    while moved:  # layout-only engine segments next to CPU work join the CPU
        moved = False
        for klass, nodes in groups:
            if klass == "ane" and _layout_only(nodes) and _next_to_cpu(nodes, graph, device):
                for n in nodes:
                    device[n.name], reason[n.name] = "cpu", LAYOUT_ONLY_REASON
                ctx.count("layout-only layers moved to the CPU", len(nodes))
                moved = True
        if moved:
            groups = group_by_device(graph, device)
    placement: dict[str, Placement] = {}
    segments: list[Segment] = []
    order: list[Node] = []
    for i, (klass, nodes) in enumerate(groups):
        dev = "cpu" if klass == "cpu" else "ane"
        inputs, outputs = _io(graph, nodes)
        segments.append(Segment(i, dev, tuple(n.name for n in nodes), inputs, outputs))
        for n in nodes:
            placement[n.name] = Placement(dev, i, reason[n.name])
        order += nodes
    ane = sum(1 for s in segments if s.device == "ane")
    ctx.note(f"{ane} ANE segment(s) = {ane} dispatch(es), {len(segments) - ane} CPU segment(s)")
    facts = {"placement": MappingProxyType(placement), "segments": tuple(segments)}
    return graph.replace(nodes=order), facts
