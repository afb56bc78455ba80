"""Estimates for a whole model: every segment scheduled and costed, ANE/CPU transitions, the total."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from anekit import targets
from anekit.cost.calibration import Calibration, default_calibration
from anekit.cost.model import (
    Bound,
    LayerCost,
    PartitionCost,
    Rates,
    bottleneck,
    layer_cost,
    partition_costs,
    pays_startup,
)
from anekit.ir.graph import Graph, Node
from anekit.schedule import (
    ScheduleOptions,
    SegmentSchedule,
    layers_of,
    node_flops,
    schedule_layers,
)
from anekit.targets import Target


class SegmentLike(Protocol):
    """What the estimator reads of a segment (passes.results.Segment has it)."""

    index: int
    device: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class WholeGraph:
    """A graph estimated as one ANE segment (hand-built engine graphs)."""

    index: int
    device: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class SegmentCost:
    """One segment's estimate: its parts, partitions and layers."""

    index: int
    device: str
    nodes: int
    dispatch_s: float
    compute_s: float
    memory_s: float
    transition_s: float  # fp32 <-> fp16 conversion of the tensors crossing devices
    cpu_s: float
    flops: int
    dram_bytes: int
    peak_onchip_bytes: int
    peak_flops_per_s: float
    partitions: tuple[PartitionCost, ...] = ()
    layers: tuple[LayerCost, ...] = ()
    schedule: SegmentSchedule | None = None

    @property
    def time_s(self) -> float:
        return self.dispatch_s + self.compute_s + self.memory_s + self.transition_s + self.cpu_s

    @property
    def parts(self) -> dict[Bound, float]:
        return {
            "compute": self.compute_s,
            "memory": self.memory_s + self.transition_s,
            "dispatch": self.dispatch_s,
            "cpu": self.cpu_s,
        }

    @property
    def bottleneck(self) -> Bound:
        return bottleneck(self.parts)

    @property
    def utilisation(self) -> float:
        """Fraction of the engine's peak the segment reaches end to end (0 for CPU segments)."""
        if self.device != "ane" or self.time_s <= 0:
            return 0.0
        return self.flops / self.time_s / self.peak_flops_per_s

    def as_dict(self, detail: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "device": self.device,
            "nodes": self.nodes,
            "time_ms": self.time_s * 1e3,
            "bottleneck": self.bottleneck,
            "dispatch_ms": self.dispatch_s * 1e3,
            "compute_ms": self.compute_s * 1e3,
            "memory_ms": self.memory_s * 1e3,
            "transition_ms": self.transition_s * 1e3,
            "cpu_ms": self.cpu_s * 1e3,
            "flops": self.flops,
            "dram_bytes": self.dram_bytes,
            "peak_onchip_bytes": self.peak_onchip_bytes,
            "utilisation": self.utilisation,
            "partitions": [p.as_dict() for p in self.partitions],
        }
        if detail and self.schedule is not None:
            out["layers"] = [c.as_dict() for c in self.layers]
            out["schedule"] = self.schedule.as_dict()
        return out


@dataclass(frozen=True)
class Estimate:
    """A model's estimated latency on one target."""

    target: str
    segments: tuple[SegmentCost, ...]

    @property
    def total_s(self) -> float:
        return sum(s.time_s for s in self.segments)

    @property
    def total_ms(self) -> float:
        return self.total_s * 1e3

    @property
    def bottleneck(self) -> Bound:
        parts: dict[Bound, float] = {}
        for s in self.segments:
            for k, v in s.parts.items():
                parts[k] = parts.get(k, 0.0) + v
        return bottleneck(parts)

    @property
    def partitions(self) -> int:
        return sum(len(s.partitions) for s in self.segments)

    @property
    def peak_onchip_bytes(self) -> int:
        return max((s.peak_onchip_bytes for s in self.segments), default=0)

    @property
    def flops(self) -> int:
        return sum(s.flops for s in self.segments)

    @property
    def dispatches(self) -> int:
        return sum(1 for s in self.segments if s.device == "ane")

    def summary(self) -> str:
        """One line: the total, where it is bound, and the schedule's shape."""
        d, p = self.dispatches, self.partitions
        return (
            f"estimated {self.total_ms:.3f} ms on {self.target} ({self.bottleneck}-bound; "
            f"{d} dispatch{'' if d == 1 else 'es'}, {p} partition{'' if p == 1 else 's'}, "
            f"peak on-chip {self.peak_onchip_bytes / 2**20:.2f} MiB)"
        )

    def as_dict(self, detail: bool = False) -> dict[str, Any]:
        return {
            "target": self.target,
            "total_ms": self.total_ms,
            "bottleneck": self.bottleneck,
            "partitions": self.partitions,
            "peak_onchip_bytes": self.peak_onchip_bytes,
            "dispatches": self.dispatches,
            "flops": self.flops,
            "segments": [s.as_dict(detail) for s in self.segments],
        }


def estimate_segments(
    graph: Graph,
    segments: Sequence[SegmentLike],
    target: Target | str,
    *,
    calibration: Calibration | None = None,
    options: ScheduleOptions | None = None,
    weight_bytes: Mapping[str, int] | None = None,
) -> Estimate:
    """Estimate a placed engine graph: ANE segments scheduled, CPU segments at the CPU's rate.

    ``weight_bytes`` gives the stored size of weights that are not fp16 (compressed ones)."""
    t = targets.get(target)
    rates = Rates.of(t, calibration or default_calibration())
    nodes = {n.name: n for n in graph.nodes}
    cpu_nodes = {n for s in segments if s.device != "ane" for n in s.nodes}
    ane_values = {
        o for s in segments if s.device == "ane" for n in s.nodes for o in nodes[n].outputs
    }
    costs = []
    for seg in segments:
        if seg.device == "ane":
            crossing = [v for v in seg.inputs if v not in ane_values and not graph.is_constant(v)]
            crossing += [
                v
                for v in seg.outputs
                if v in graph.output_names or any(c.name in cpu_nodes for c in graph.consumers(v))
            ]
            elements = sum(graph.value(v).numel for v in dict.fromkeys(crossing))
            costs.append(_ane_segment(graph, seg, t, rates, options, elements, weight_bytes))
        else:
            costs.append(_cpu_segment(graph, [nodes[n] for n in seg.nodes], seg, rates, t))
    return Estimate(t.name, tuple(costs))


def estimate_graph(
    graph: Graph,
    target: Target | str,
    *,
    calibration: Calibration | None = None,
    options: ScheduleOptions | None = None,
) -> Estimate:
    """Estimate an engine graph as one ANE program (every node an engine layer)."""
    whole = WholeGraph(
        0, "ane", tuple(n.name for n in graph.nodes), graph.input_names, graph.output_names
    )
    return estimate_segments(graph, [whole], target, calibration=calibration, options=options)


def estimate_compiled(
    cm: Any,
    target: Target | str | None = None,
    *,
    calibration: Calibration | None = None,
    options: ScheduleOptions | None = None,
) -> Estimate:
    """Estimate a CompiledModel (its graph and segments) on its target or on ``target``.

    Another target should share the compiled model's engine generation and limits (the
    placement and legalization depend on them); only the performance figures differ.
    """
    return estimate_segments(
        cm.graph,
        cm.segments,
        target if target is not None else cm.target,
        calibration=calibration,
        options=options,
        weight_bytes=getattr(cm, "weight_bytes", None),
    )


def report_estimate(cm: Any) -> dict[str, Any]:
    """The estimate for a CompiledModel's report (``cm.report["estimate"]``), on its target."""
    est = estimate_compiled(cm)
    return {**est.as_dict(), "summary": est.summary()}


def _ane_segment(
    graph: Graph,
    seg: SegmentLike,
    target: Target,
    rates: Rates,
    options: ScheduleOptions | None,
    crossing_elements: int,
    weight_bytes: Mapping[str, int] | None = None,
) -> SegmentCost:
    layers = layers_of(graph, seg, weight_bytes)  # type: ignore[arg-type]
    sched = schedule_layers(layers, target, options)
    partner = {a: b for a, b in sched.coissue} | {b: a for a, b in sched.coissue}
    starts = pays_startup(sched)
    costs = {
        lay.name: layer_cost(lay, sched, rates, partner.get(lay.name), startup=lay.name in starts)
        for lay in layers
    }
    parts = partition_costs(sched, costs, rates.ane_bytes_per_s)
    return SegmentCost(
        index=seg.index,
        device="ane",
        nodes=len(seg.nodes),
        dispatch_s=rates.dispatch_s,
        compute_s=sum(p.compute_s for p in parts),
        memory_s=sum(p.memory_s for p in parts),
        transition_s=crossing_elements
        * rates.transition_bytes_per_element
        / rates.memory_bytes_per_s,
        cpu_s=0.0,
        flops=sum(lay.flops for lay in layers if lay.unit == "mac"),
        dram_bytes=sum(d.total for d in sched.dma.values()),
        peak_onchip_bytes=sched.peak_bytes,
        peak_flops_per_s=target.perf.peak_fp16_tflops * 1e12,
        partitions=parts,
        layers=tuple(costs[n] for n in sched.order),
        schedule=sched,
    )


_INDEXING = frozenset({"gather", "gather_elements", "slice", "expand", "tile"})


def _cpu_segment(
    graph: Graph, nodes: Sequence[Node], seg: SegmentLike, rates: Rates, target: Target
) -> SegmentCost:
    total = 0.0
    flops = 0
    moved = 0
    for node in nodes:
        f = node_flops(graph, node)
        out_elems = sum(graph.value(v).numel for v in node.outputs if v)
        elems = out_elems
        for v in node.inputs:
            if not v:
                continue
            n = graph.value(v).numel
            # an indexing op reads the rows it gathers, not its whole (constant) table
            elems += min(n, out_elems) if node.op in _INDEXING and graph.is_constant(v) else n
        b = int(elems * rates.cpu_bytes_per_element)
        total += max(f / rates.cpu_flops_per_s, b / rates.memory_bytes_per_s)
        flops += f
        moved += b
    return SegmentCost(
        index=seg.index,
        device=seg.device,
        nodes=len(seg.nodes),
        dispatch_s=0.0,
        compute_s=0.0,
        memory_s=0.0,
        transition_s=0.0,
        cpu_s=total,
        flops=flops,
        dram_bytes=moved,
        peak_onchip_bytes=0,
        peak_flops_per_s=target.perf.cpu_gflops * 1e9,
    )
