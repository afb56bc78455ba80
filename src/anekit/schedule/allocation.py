"""The allocator: the nine allocation states of ane-compiler table 22.2, chaining and ring buffers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from enum import IntEnum

from anekit.schedule.dag import LayerDag
from anekit.schedule.layers import LayerInfo
from anekit.schedule.partition import PartitionPlan


class AllocState(IntEnum):
    """ane-compiler table 22.2: the allocation type of a root tensor."""

    RESIDENT = 0  # plain on-chip resident operand
    STREAMED = 1  # streamed from dynamic memory
    L2_CHAINED = 2  # supplies the next operation directly in L2 (double buffer)
    L2_DEPENDENT = 3  # depends on an L2 producer
    IN_PLACE = 4  # in-place rewrite in L2
    IN_PLACE_L2_DEPENDENT = 5  # in-place rewrite, L2-dependent
    RING = 6  # ring-buffer resident
    RING_L2_DEPENDENT = 7  # ring-buffer resident, L2-dependent
    IN_PLACE_DRAM = 8  # in place in dynamic memory

    @property
    def in_memory(self) -> bool:
        """The tensor goes through DRAM (written out and/or read back)."""
        return self in (AllocState.STREAMED, AllocState.IN_PLACE_DRAM)


def tile_rows(layer: LayerInfo, tile_bytes: int) -> int:
    """Output rows per emitted tile: as many whole rows as fit the tile buffer (at least one)."""
    _, _, h, _ = layer.out_shape
    return max(1, min(h, tile_bytes // max(1, layer.row_bytes)))


def ring_candidates(dag: LayerDag, limit: float, tile_bytes: int) -> dict[int, int]:
    """Producers whose output is too large to hold but can be drained row by row.

    A tensor with one reader (inside the segment, not a segment output) that reads it row
    by row in the producer's geometry is held as a ring of the rows the reader needs
    (its first tile plus one emitted tile) when the whole tensor exceeds the limit and
    the ring fits. Returns producer index -> ring bytes.
    """
    rings: dict[int, int] = {}
    for i, lay in enumerate(dag.layers):
        if lay.segment_output or len(dag.succs[i]) != 1 or lay.output_bytes <= limit:
            continue
        reader = dag.layers[dag.succs[i][0]]
        op = reader.operand_of(lay.output)
        if op is None or op.row_geometry != lay.row_geometry:
            continue
        window = (op.first_rows + tile_rows(lay, tile_bytes)) * lay.row_bytes
        if window < lay.output_bytes and window <= limit:
            rings[i] = window
    return rings


@dataclass(frozen=True)
class ChainCheck:
    """The chaining conjunction of ane-compiler for one producer and its next reader."""

    producer: str
    consumer: str
    enabled: bool  # the chip's chaining-enable bit
    single_fanout: bool  # exactly one outgoing layer, and the tensor does not leave the segment
    same_engine: bool  # same engine class (mac/mac or planar/planar)
    geometry: bool  # emitted tile geometry == the reader's declared input geometry
    covers_first_tile: bool  # emitted rows cover the reader's first tile, overlap included
    adjacent: bool  # the reader is scheduled immediately after, in the same partition

    @property
    def chainable(self) -> bool:
        """Every structural condition (all but adjacency)."""
        return all(getattr(self, f.name) for f in fields(self)[2:-1])

    @property
    def chained(self) -> bool:
        return self.chainable and self.adjacent

    def failed(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self)[2:] if not getattr(self, f.name))


def chain_checks(
    dag: LayerDag,
    order: Sequence[int],
    plan: PartitionPlan,
    enabled: bool,
    tile_bytes: int,
) -> tuple[ChainCheck, ...]:
    """One check per producer that has readers: against the reader scheduled first after it."""
    pos = {i: step for step, i in enumerate(order)}
    checks = []
    for i in order:
        if not dag.succs[i]:
            continue
        lay = dag.layers[i]
        j = min(dag.succs[i], key=lambda s: pos[s])
        reader = dag.layers[j]
        op = reader.operand_of(lay.output)
        same_partition = plan.partition_of[lay.name] == plan.partition_of[reader.name]
        checks.append(
            ChainCheck(
                producer=lay.name,
                consumer=reader.name,
                enabled=enabled,
                single_fanout=len(dag.succs[i]) == 1 and not lay.segment_output,
                same_engine=lay.unit == reader.unit and lay.unit in ("mac", "planar"),
                geometry=op is not None and op.row_geometry == lay.row_geometry,
                covers_first_tile=op is not None and tile_rows(lay, tile_bytes) >= op.first_rows,
                adjacent=pos[j] == pos[i] + 1
                and same_partition
                and lay.name not in plan.streaming
                and reader.name not in plan.streaming,
            )
        )
    return tuple(checks)


def assign_states(
    dag: LayerDag,
    order: Sequence[int],
    plan: PartitionPlan,
    chains: Sequence[ChainCheck],
    rings: Mapping[int, int],
    weights: Sequence[str] = (),
) -> dict[str, AllocState]:
    """The allocation state of every tensor the segment touches.

    Weights and tensors read from outside the segment stream from memory. A layer output
    goes through memory when it leaves the segment, is read in a later partition, or its
    producer or a reader is streaming; otherwise it is chained (the full conjunction
    holds), a ring (a ring candidate drained by the next layer), an in-place rewrite of
    an operand that dies here, or plain resident. "L2-dependent" marks outputs of layers
    that read a chained tensor.
    """
    pos = {i: step for step, i in enumerate(order)}
    chained = {c.producer for c in chains if c.chained}
    states: dict[str, AllocState] = dict.fromkeys(weights, AllocState.STREAMED)
    last_reader: dict[str, int] = {}
    for i in order:
        for op in dag.layers[i].operands:
            last_reader[op.tensor] = max(last_reader.get(op.tensor, -1), pos[i])
            if op.producer is None:
                states[op.tensor] = AllocState.STREAMED
    for i in order:
        lay = dag.layers[i]
        part = plan.partition_of[lay.name]
        readers = [dag.layers[s] for s in dag.succs[i]]
        to_memory = (
            lay.segment_output
            or lay.name in plan.streaming
            or any(plan.partition_of[r.name] != part or r.name in plan.streaming for r in readers)
        )
        l2_dependent = any(states.get(op.tensor) == AllocState.L2_CHAINED for op in lay.operands)
        over = _in_place_operand(dag, lay, pos[i], last_reader)
        over_state = states.get(over) if over else None
        if to_memory:
            in_dram = over_state is not None and over_state.in_memory
            state = AllocState.IN_PLACE_DRAM if in_dram else AllocState.STREAMED
        elif lay.name in chained:
            state = AllocState.L2_CHAINED
        elif i in rings and readers and pos[dag.succs[i][0]] == pos[i] + 1:
            state = AllocState.RING_L2_DEPENDENT if l2_dependent else AllocState.RING
        elif over_state is not None and not over_state.in_memory:
            state = AllocState.IN_PLACE_L2_DEPENDENT if l2_dependent else AllocState.IN_PLACE
        else:
            state = AllocState.L2_DEPENDENT if l2_dependent else AllocState.RESIDENT
        states[lay.output] = state
    return states


def _in_place_operand(
    dag: LayerDag, lay: LayerInfo, step: int, last_reader: Mapping[str, int]
) -> str | None:
    """The operand this layer may overwrite: its first, produced here, last read here."""
    if not lay.in_place or not lay.operands:
        return None
    op = lay.operands[0]
    if op.producer is None or op.nbytes != lay.output_bytes or last_reader[op.tensor] != step:
        return None
    if dag.layers[dag.index[op.producer]].segment_output:
        return None
    return op.tensor
