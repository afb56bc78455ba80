"""Co-issue discovery (ane-compiler phase 3): a mac layer and a planar layer that run at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from anekit.schedule.allocation import AllocState, ChainCheck
from anekit.schedule.dag import LayerDag
from anekit.schedule.layers import LayerInfo
from anekit.schedule.partition import PartitionPlan


def streams_from_memory(layer: LayerInfo, states: Mapping[str, AllocState]) -> bool:
    """The layer moves data over the shared memory channel: an operand or its output is in DRAM.

    A matmul's resident weight (its B operand) is exempt, so it does not block its partner.
    """
    if states[layer.output].in_memory:
        return True
    return any(states[op.tensor].in_memory for op in layer.operands if not op.weight_operand)


def coissue_blockers(
    a: LayerInfo,
    b: LayerInfo,
    dag: LayerDag,
    plan: PartitionPlan,
    chain_endpoints: frozenset[str],
    states: Mapping[str, AllocState],
) -> tuple[str, ...]:
    """Why two layers adjacent in the order cannot co-issue (empty: they can).

    The seed's filter: one multiply-accumulate and one planar layer (two operations on one
    engine cannot overlap), both in the same program and partition, no producer-consumer
    path between them, neither pipelined into a neighbour (chained or chainable: chaining
    and co-issue are exclusive), and not both streaming over the memory channel.
    """
    why = []
    if {a.unit, b.unit} != {"mac", "planar"}:
        why.append("same-engine-class")
    if plan.partition_of[a.name] != plan.partition_of[b.name]:
        why.append("different-partition")
    if a.name in plan.streaming or b.name in plan.streaming:
        why.append("streaming-layer")
    if not dag.independent(dag.index[a.name], dag.index[b.name]):
        why.append("producer-consumer")
    if a.name in chain_endpoints or b.name in chain_endpoints:
        why.append("chained-or-chainable")
    if streams_from_memory(a, states) and streams_from_memory(b, states):
        why.append("both-stream-from-memory")
    return tuple(why)


def find_coissue(
    dag: LayerDag,
    order: Sequence[int],
    plan: PartitionPlan,
    chains: Sequence[ChainCheck],
    states: Mapping[str, AllocState],
) -> tuple[tuple[str, str], ...]:
    """Pairs of consecutive layers of the order that co-issue, scanned left to right.

    A pair takes one slot of the order; each layer is in at most one pair.
    """
    endpoints = frozenset(
        name for c in chains if c.chainable or c.chained for name in (c.producer, c.consumer)
    )
    pairs = []
    step = 0
    while step + 1 < len(order):
        a, b = dag.layers[order[step]], dag.layers[order[step + 1]]
        if not coissue_blockers(a, b, dag, plan, endpoints, states):
            pairs.append((a.name, b.name))
            step += 2
        else:
            step += 1
    return tuple(pairs)
