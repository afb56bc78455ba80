"""Scheduling one ANE segment end to end: order, partitions, allocation states, co-issue, DMA."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from anekit.errors import TargetError
from anekit.schedule.allocation import (
    AllocState,
    ChainCheck,
    assign_states,
    chain_checks,
    ring_candidates,
)
from anekit.schedule.coissue import find_coissue
from anekit.schedule.dag import LayerDag
from anekit.schedule.layers import LayerInfo
from anekit.schedule.partition import Partition, plan_partitions
from anekit.schedule.scheduler import list_schedule
from anekit.targets import Target

# ane-compiler closes a partition at "margin x budget" with a margin below one but gives no
# value. 0.75 keeps a quarter of the budget for what the pressure model does not track
# step by step: DMA staging tiles, the second half of double buffers, and the padding of
# every surface to the engine's alignment (FACTS 3: ~49 KB minimum I/O surfaces).
DEFAULT_MARGIN = 0.75
# The engine emits outputs in tiles of whole rows; no source gives the tile buffer size.
# Assumed 64 KiB: a [1, 512, H, 64] fp16 map is emitted one row per tile.
DEFAULT_TILE_BYTES = 64 * 1024


@dataclass(frozen=True)
class ScheduleOptions:
    """Knobs of the scheduler; the defaults are documented above."""

    margin: float = DEFAULT_MARGIN
    tile_bytes: int = DEFAULT_TILE_BYTES

    def __post_init__(self) -> None:
        if not 0 < self.margin <= 1:
            raise TargetError(f"the partition margin must be in (0, 1], got {self.margin}")
        if self.tile_bytes <= 0:
            raise TargetError(f"the tile buffer must be positive, got {self.tile_bytes}")


@dataclass(frozen=True)
class LayerDma:
    """Bytes one layer moves between DRAM and the engine."""

    read_bytes: int  # activations read from memory
    weight_bytes: int  # weights streamed from memory
    write_bytes: int  # output written to memory

    @property
    def total(self) -> int:
        return self.read_bytes + self.weight_bytes + self.write_bytes


@dataclass(frozen=True)
class SegmentSchedule:
    """Everything the schedule decides for one segment."""

    layers: Mapping[str, LayerInfo]
    order: tuple[str, ...]
    partitions: tuple[Partition, ...]
    partition_of: Mapping[str, int]
    pressure: tuple[int, ...]  # on-chip bytes at each position of the order
    streaming: frozenset[str]
    states: Mapping[str, AllocState]
    chains: tuple[ChainCheck, ...]
    coissue: tuple[tuple[str, str], ...]
    dma: Mapping[str, LayerDma]
    rings: Mapping[str, int]  # ring-buffered tensors -> ring bytes
    budget_bytes: int
    limit_bytes: float
    options: ScheduleOptions = field(default_factory=ScheduleOptions)

    @property
    def peak_bytes(self) -> int:
        return max(self.pressure, default=0)

    @property
    def chained(self) -> tuple[tuple[str, str], ...]:
        return tuple((c.producer, c.consumer) for c in self.chains if c.chained)

    def partition_dma(self, index: int) -> LayerDma:
        members = [self.dma[n] for n in self.partitions[index].layers]
        return LayerDma(
            sum(d.read_bytes for d in members),
            sum(d.weight_bytes for d in members),
            sum(d.write_bytes for d in members),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "order": list(self.order),
            "budget_bytes": self.budget_bytes,
            "limit_bytes": self.limit_bytes,
            "peak_onchip_bytes": self.peak_bytes,
            "partitions": [
                {
                    "index": p.index,
                    "layers": list(p.layers),
                    "peak_onchip_bytes": p.peak_bytes,
                    "streaming": p.streaming,
                    **_dma_dict(self.partition_dma(p.index)),
                }
                for p in self.partitions
            ],
            "states": {t: s.name.lower() for t, s in self.states.items()},
            "chained": [list(c) for c in self.chained],
            "coissue": [list(c) for c in self.coissue],
            "rings": dict(self.rings),
        }


def _dma_dict(d: LayerDma) -> dict[str, int]:
    return {
        "read_bytes": d.read_bytes,
        "weight_bytes": d.weight_bytes,
        "write_bytes": d.write_bytes,
    }


def schedule_layers(
    layers: Sequence[LayerInfo], target: Target, options: ScheduleOptions | None = None
) -> SegmentSchedule:
    """Schedule the layers of one ANE segment (listed producers first) for ``target``."""
    options = options or ScheduleOptions()
    dag = LayerDag(layers)
    budget = target.onchip_budget_bytes
    limit = options.margin * budget
    rings = ring_candidates(dag, limit, options.tile_bytes)
    onchip_by_layer = [rings.get(i, lay.output_bytes) for i, lay in enumerate(dag.layers)]
    members = frozenset(m for i in rings for m in (i, dag.succs[i][0]))
    order = list_schedule(dag, onchip_by_layer, limit, members)
    onchip = {dag.layers[i].output: b for i, b in rings.items()}
    plan = plan_partitions(dag, order, onchip, limit)
    chains = chain_checks(dag, order, plan, target.features.l2_chaining, options.tile_bytes)
    weights = sorted({w for lay in dag.layers for w, _ in lay.weights})
    states = assign_states(dag, order, plan, chains, rings, weights)
    coissue = find_coissue(dag, order, plan, chains, states)
    dma = {}
    for step, i in enumerate(order):
        lay = dag.layers[i]
        sizes = {op.tensor: op.nbytes for op in lay.operands}
        dma[lay.name] = LayerDma(
            read_bytes=sum(sizes[t] for t in plan.loads[step]),
            weight_bytes=lay.weight_bytes,
            write_bytes=lay.output_bytes if states[lay.output].in_memory else 0,
        )
    live_rings = {
        dag.layers[i].output: b
        for i, b in rings.items()
        if states[dag.layers[i].output] in (AllocState.RING, AllocState.RING_L2_DEPENDENT)
    }
    return SegmentSchedule(
        layers=MappingProxyType({lay.name: lay for lay in dag.layers}),
        order=tuple(dag.layers[i].name for i in order),
        partitions=plan.partitions,
        partition_of=MappingProxyType(dict(plan.partition_of)),
        pressure=plan.pressure,
        streaming=plan.streaming,
        states=MappingProxyType(states),
        chains=chains,
        coissue=coissue,
        dma=MappingProxyType(dma),
        rings=MappingProxyType(live_rings),
        budget_bytes=budget,
        limit_bytes=limit,
        options=options,
    )
