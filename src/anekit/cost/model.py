"""Turning a segment schedule into time: per layer, partition and segment, with the bottleneck."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from anekit import targets
from anekit.cost.calibration import Calibration
from anekit.schedule import LayerInfo, SegmentSchedule
from anekit.schedule.plan import LayerDma
from anekit.targets import Target

Bound = Literal["compute", "memory", "dispatch", "cpu"]


@dataclass(frozen=True)
class Rates:
    """Every rate the model uses for one target, resolved from the chip database and calibration."""

    conv_flops_per_s: float
    matmul_flops_per_s: float
    planar_elements_per_s: float
    planar_onchip_elements_per_s: float
    mac_startup_flops: float
    ane_bytes_per_s: float
    dispatch_s: float
    spill_factor: float
    cpu_flops_per_s: float
    memory_bytes_per_s: float  # the chip's unified memory (CPU segments, conversions)
    transition_bytes_per_element: float
    cpu_bytes_per_element: float

    @classmethod
    def of(cls, target: Target, calibration: Calibration) -> Rates:
        p = target.perf
        ref = targets.get(calibration.planar_reference_target).perf.peak_fp16_tflops
        return cls(
            conv_flops_per_s=p.peak_fp16_tflops * p.util_deep_graph * 1e12,
            matmul_flops_per_s=p.gemm_fp16_tflops * p.util_deep_graph * 1e12,
            planar_elements_per_s=calibration.planar_elements_per_s * p.peak_fp16_tflops / ref,
            planar_onchip_elements_per_s=calibration.planar_onchip_elements_per_s
            * p.peak_fp16_tflops
            / ref,
            mac_startup_flops=calibration.mac_startup_flops,
            ane_bytes_per_s=p.ane_bandwidth_gbps * 1e9,
            dispatch_s=p.dispatch_overhead_us * 1e-6,
            spill_factor=p.spill_throughput_factor,
            cpu_flops_per_s=p.cpu_gflops * 1e9,
            memory_bytes_per_s=p.bandwidth_gbps * 1e9,
            transition_bytes_per_element=calibration.transition_bytes_per_element,
            cpu_bytes_per_element=calibration.cpu_bytes_per_element,
        )


@dataclass(frozen=True)
class LayerCost:
    """One layer's time: compute and memory roofs, the slower one binding."""

    name: str
    unit: str
    partition: int
    flops: int
    dma: LayerDma
    compute_s: float
    memory_s: float
    streaming: bool  # activations over the budget: runs from memory at the spill factor
    coissued_with: str | None = None

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> Bound:
        return "compute" if self.compute_s >= self.memory_s else "memory"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "partition": self.partition,
            "flops": self.flops,
            "time_ms": self.time_s * 1e3,
            "compute_ms": self.compute_s * 1e3,
            "memory_ms": self.memory_s * 1e3,
            "bound": self.bound,
            "read_bytes": self.dma.read_bytes,
            "weight_bytes": self.dma.weight_bytes,
            "write_bytes": self.dma.write_bytes,
            "streaming": self.streaming,
            "coissued_with": self.coissued_with,
        }


def layer_cost(
    layer: LayerInfo,
    sched: SegmentSchedule,
    rates: Rates,
    coissued_with: str | None = None,
    *,
    startup: bool = True,
) -> LayerCost:
    """``startup``: the layer pays the MAC array's fixed start-up (see `pays_startup`)."""
    dma = sched.dma[layer.name]
    streaming = layer.name in sched.streaming
    moved = dma.total
    if layer.unit == "mac":
        # convolutions run at the conv peak; matmul-like layers (matmul, fused attention) at
        # the GEMM rate ([facts] 3: a 1x1 convolution is ~3x faster than the matmul)
        conv_like = layer.main in ("conv", "conv_transpose")
        rate = rates.conv_flops_per_s if conv_like else rates.matmul_flops_per_s
        compute = (layer.flops + (rates.mac_startup_flops if startup else 0.0)) / rate
    elif layer.unit == "planar":
        rate = (
            rates.planar_onchip_elements_per_s
            if fed_on_chip(layer, sched)
            else rates.planar_elements_per_s
        )
        compute = layer.flops / rate
    else:  # the DMA/transpose path moves every byte, on chip or not
        compute = 0.0
        moved = max(moved, layer.input_bytes + layer.output_bytes)
    if streaming:
        compute /= rates.spill_factor
    return LayerCost(
        name=layer.name,
        unit=layer.unit,
        partition=sched.partition_of[layer.name],
        flops=layer.flops,
        dma=dma,
        compute_s=compute,
        memory_s=moved / rates.ane_bytes_per_s,
        streaming=streaming,
        coissued_with=coissued_with,
    )


def fed_on_chip(layer: LayerInfo, sched: SegmentSchedule) -> bool:
    """Every operand of the layer is on chip (chained, ring, resident: ane-compiler's states).

    A planar layer fed from L2 runs several times faster than one whose operand comes in
    through memory: ANEForge's fused neck block (conv, group norm, two GELUs, one
    program) costs a fraction of the same planar layers run as single programs, whose
    element rate is planar_elements_per_s (calibration.json, planar_onchip_elements_per_s).
    """
    states = [sched.states.get(op.tensor) for op in layer.operands]
    return bool(states) and all(s is not None and not s.in_memory for s in states)


def pays_startup(sched: SegmentSchedule) -> frozenset[str]:
    """The MAC layers that pay the fixed start-up: the first of each partition.

    Chaining: within a partition the engine runs layers back to back from on-chip memory,
    and the next layer's start-up (kernel fetch, pipeline fill) overlaps the running
    layer's work; only a partition's first MAC layer starts from an idle array. The
    start-up itself is measured on one-layer programs (calibration.json), where the two
    readings coincide, so the per-op anchors do not move.
    """
    first = []
    for part in sched.partitions:
        macs = [n for n in part.layers if sched.layers[n].unit == "mac"]
        first += macs[:1]
    return frozenset(first)


@dataclass(frozen=True)
class PartitionCost:
    """A partition's time: its slots in order, a co-issued pair taking the longer of the two."""

    index: int
    layers: tuple[str, ...]
    time_s: float
    compute_s: float  # time of slots bound by compute
    memory_s: float  # time of slots bound by memory
    peak_onchip_bytes: int
    dma: LayerDma
    streaming: bool
    prefetched_s: float = 0.0  # weight streaming hidden under earlier slots (`prefetch`)

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "layers": len(self.layers),
            "time_ms": self.time_s * 1e3,
            "prefetched_ms": self.prefetched_s * 1e3,
            "peak_onchip_bytes": self.peak_onchip_bytes,
            "read_bytes": self.dma.read_bytes,
            "weight_bytes": self.dma.weight_bytes,
            "write_bytes": self.dma.write_bytes,
            "streaming": self.streaming,
        }


def weight_stream_s(cost: LayerCost) -> float:
    """The part of a layer's memory time spent streaming its weights."""
    total = cost.dma.total
    return cost.memory_s * cost.dma.weight_bytes / total if total else 0.0


def prefetch(
    slots: Sequence[Sequence[LayerCost]], spare_s: float = 0.0
) -> tuple[list[tuple[float, float]], float]:
    """Each slot's (compute, memory) time once weights are fetched ahead, and the total
    weight time hidden that way.

    Chaining: a partition runs its layers back to back from on-chip memory, and the DMA
    engine that streams a layer's weights is idle whenever the running slot is bound by
    compute. That idle time streams the weights of the slots that follow, in order: always
    the next slot's (one kernel of look-ahead, as the start-up overlap of `pays_startup`),
    and further ahead only as far as ``spare_s`` (DMA seconds' worth of the partition's
    unused on-chip bytes) holds the weights fetched early. The first slot of a partition
    fetches all of its own weights (one-layer programs, the calibration anchors, are
    unchanged), streaming layers (whose activations already occupy the DMA engine) are not
    prefetched, and nothing crosses a partition boundary.
    """
    out: list[tuple[float, float]] = []
    banked = hidden = 0.0  # DMA time already spent on the weights of slots still to run
    for slot in slots:
        compute = max(c.compute_s for c in slot)
        memory = max(c.memory_s for c in slot)
        early = 0.0
        if not any(c.streaming for c in slot):
            early = min(sum(weight_stream_s(c) for c in slot), banked)
            memory -= early
            hidden += early
        out.append((compute, memory))
        # what the next slot does not take must wait on chip, in the spare bytes
        banked = min(banked - early, spare_s) + max(0.0, compute - memory)
    return out, hidden


def partition_costs(
    sched: SegmentSchedule, costs: Mapping[str, LayerCost], ane_bytes_per_s: float = 0.0
) -> tuple[PartitionCost, ...]:
    """``ane_bytes_per_s``: the weight-streaming rate; with it, weights are fetched ahead into
    each partition's unused on-chip bytes (`prefetch`), without it one slot ahead only."""
    partner = {a: b for a, b in sched.coissue} | {b: a for a, b in sched.coissue}
    out = []
    for part in sched.partitions:
        slots: list[list[LayerCost]] = []
        done: set[str] = set()
        for name in part.layers:
            if name in done:
                continue
            slot = [costs[name]] + ([costs[partner[name]]] if name in partner else [])
            done.update(c.name for c in slot)
            slots.append(slot)
        spare = max(0.0, sched.limit_bytes - part.peak_bytes)
        times, hidden = prefetch(slots, spare / ane_bytes_per_s if ane_bytes_per_s else 0.0)
        compute = sum(c for c, m in times if c >= m)
        memory = sum(m for c, m in times if c < m)
        out.append(
            PartitionCost(
                index=part.index,
                layers=part.layers,
                time_s=compute + memory,
                compute_s=compute,
                memory_s=memory,
                peak_onchip_bytes=part.peak_bytes,
                dma=sched.partition_dma(part.index),
                streaming=part.streaming,
                prefetched_s=hidden,
            )
        )
    return tuple(out)


def bottleneck(parts: Mapping[Bound, float]) -> Bound:
    """The largest contributor (ties go to the first in compute, memory, dispatch, cpu)."""
    order: tuple[Bound, ...] = ("compute", "memory", "dispatch", "cpu")
    return max(order, key=lambda k: (parts.get(k, 0.0), -order.index(k)))
