"""Where every original node went: on the engine, on the CPU, folded into a layer, or removed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from anekit.ir.engine import LayerView
from anekit.ir.graph import Graph, Node
from anekit.passes.context import DEAD_CODE, PassContext
from anekit.passes.results import PipelineResult

MAX_LAYER_NAMES = 3
_LAYOUT_OPS = frozenset({"reshape", "transpose", "expand"})


@dataclass(frozen=True)
class OpReport:
    """One row of `anekit check`: an original node, where it runs, in which layer, and why."""

    node: str
    op: str
    placement: str  # "ane" | "cpu" | "folded" | "removed"
    layer: str | None
    reason: str | None

    def as_dict(self) -> dict:
        return {
            "node": self.node,
            "op": self.op,
            "placement": self.placement,
            "layer": self.layer,
            "reason": self.reason,
        }


def _names(nodes: Sequence[Node]) -> str:
    shown = ", ".join(n.name for n in nodes[:MAX_LAYER_NAMES])
    return shown if len(nodes) <= MAX_LAYER_NAMES else f"{shown}, ... ({len(nodes)} layers)"


def _notes(ctx: PassContext, origin: str, kinds: tuple[str, ...]) -> str | None:
    seen = [e.detail for e in ctx.events.get(origin, ()) if e.kind in kinds]
    return "; ".join(dict.fromkeys(seen)) or None


def _folded_reason(ctx: PassContext, origin: str, holders: Sequence[Node]) -> str | None:
    """A fold into weights (logged by the folding pass), else the epilogue slot it fills."""
    into_weights = [e for e in ctx.events.get(origin, ()) if e.kind == "folded" and e.layer is None]
    if into_weights:
        return into_weights[-1].detail
    for h in holders:
        if h.op != "ane_layer":
            continue
        for step in LayerView(h).epilogue:
            if origin in step.origin:
                return f"{step.slot.name.lower().replace('_', '-')} slot of layer '{h.name}'"
    return _notes(ctx, origin, ("folded",))


def _primary(node: Node) -> tuple[str, ...]:
    """The original nodes a node implements itself (a layer's epilogue and weights excluded)."""
    return node.attrs["main_origin"] if node.op == "ane_layer" else node.origin


def _device(result: PipelineResult, node: Node) -> str:
    """Where the segment pass placed ``node`` (before it runs: layers on the engine)."""
    placed = result.placement.get(node.name)
    if placed is not None:
        return placed.device
    return "ane" if node.op == "ane_layer" else "cpu"


def _reason(result: PipelineResult, node: Node) -> str | None:
    placed = result.placement.get(node.name)
    if placed is not None:
        return placed.reason
    verdict = result.verdicts.get(node.name)
    return verdict[1] if verdict else None


def explain(source: Graph, result: PipelineResult, ctx: PassContext) -> list[OpReport]:
    """One OpReport per node of ``source`` (whose node names are the origins in the result's
    graph), from the pipeline's facts and the context's event log."""
    holders = _holders(result.graph)
    rows = []
    for s in source.nodes:
        hs = holders.get(s.name, [])
        if not hs:
            ev = ctx.last_event(s.name, ("removed",))
            detail = ev.detail if ev else "removed"
            if detail == DEAD_CODE and s.op in _LAYOUT_OPS:
                detail = "a layout change the engine layout made unnecessary"
            reason = f"{detail} ({ev.pass_name})" if ev else detail
            rows.append(OpReport(s.name, s.op, "removed", None, reason))
            continue
        mains = [h for h in hs if s.name in _primary(h)]
        cpu_mains = [h for h in mains if _device(result, h) == "cpu"]
        if cpu_mains:
            rows.append(
                OpReport(s.name, s.op, "cpu", _names(cpu_mains), _reason(result, cpu_mains[0]))
            )
        elif mains:
            note = _notes(ctx, s.name, ("split", "decomposed", "rewritten"))
            rows.append(OpReport(s.name, s.op, "ane", _names(mains), note))
        elif all(_device(result, h) == "cpu" for h in hs):
            why = f"folded into '{hs[0].name}', which runs on the CPU: {_reason(result, hs[0])}"
            rows.append(OpReport(s.name, s.op, "cpu", _names(hs), why))
        else:
            notes = [
                _folded_reason(ctx, s.name, hs),
                _notes(ctx, s.name, ("decomposed", "rewritten")),
            ]
            reason = "; ".join(n for n in notes if n) or None
            rows.append(OpReport(s.name, s.op, "folded", _names(hs), reason))
    return _with_import_notes(rows, source)


def _with_import_notes(rows: list[OpReport], source: Graph) -> list[OpReport]:
    """What the importer said about a node (an ``If`` computed both ways) leads its reason."""
    notes = {node: message for _, node, message, _ in source.metadata.get("import_notes", ())}
    if not notes:
        return rows
    return [
        replace(r, reason="; ".join(x for x in (notes[r.node], r.reason) if x))
        if r.node in notes else r
        for r in rows
    ]  # fmt: skip


def _holders(graph: Graph) -> dict[str, list[Node]]:
    """Each original node's name -> the nodes of ``graph`` that carry it (by origin)."""
    holders: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for o in n.origin:
            holders.setdefault(o, []).append(n)
    return holders


def _cpu_nodes(source: Graph, result: PipelineResult) -> int:
    """How many of ``source``'s nodes run (in whole or in part) on the CPU: a node split into
    many CPU pieces counts once, a node folded into a CPU op counts as the CPU's."""
    holders = _holders(result.graph)
    count = 0
    for s in source.nodes:
        hs = holders.get(s.name, [])
        mains = [h for h in hs if s.name in _primary(h)]
        on_cpu = [h for h in (mains or hs) if _device(result, h) == "cpu"]
        count += bool(on_cpu) and (bool(mains) or len(on_cpu) == len(hs))
    return count


def summarize(source: Graph, result: PipelineResult) -> dict[str, int]:
    """The check summary: nodes, engine layers, segments, CPU ops (the engine graph's ops
    that run on the CPU) and CPU nodes (the model's nodes they come from), dispatches."""
    graph = result.graph
    ane_layers = sum(1 for n in graph.nodes if n.op == "ane_layer" and _device(result, n) == "ane")
    ane_segments = sum(1 for s in result.segments if s.device == "ane")
    return {
        "nodes": len(source.nodes),
        "engine_layers": ane_layers,
        "ane_segments": ane_segments,
        "cpu_segments": len(result.segments) - ane_segments,
        "cpu_ops": sum(1 for n in graph.nodes if _device(result, n) == "cpu"),
        "cpu_nodes": _cpu_nodes(source, result),
        "dispatches": ane_segments,
    }


def summary_line(summary: dict[str, int]) -> str:
    s = summary
    ops, nodes = s["cpu_ops"], s.get("cpu_nodes", s["cpu_ops"])
    if ops == nodes:
        cpu = f"{ops} op{'s' if ops != 1 else ''} on the CPU"
    else:  # one wide convolution split into many CPU pieces; a CPU join of engine pieces
        cpu = f"{nodes} of the model's nodes on the CPU (as {ops} op{'s' if ops != 1 else ''})"
    return (
        f"{s['nodes']} nodes -> {s['engine_layers']} engine layers in {s['ane_segments']} ANE "
        f"segment{'s' if s['ane_segments'] != 1 else ''}, {cpu}, {s['dispatches']} dispatch"
        f"{'es' if s['dispatches'] != 1 else ''}"
    )
