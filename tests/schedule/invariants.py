"""The schedule's invariants, shared by the property and real-model tests."""

from __future__ import annotations

from collections.abc import Sequence

from anekit.schedule import AllocState, LayerDag, LayerInfo, SegmentSchedule
from anekit.schedule.coissue import streams_from_memory


def positions(s: SegmentSchedule) -> dict[str, int]:
    return {name: k for k, name in enumerate(s.order)}


def check_topological(layers: Sequence[LayerInfo], s: SegmentSchedule) -> None:
    assert sorted(s.order) == sorted(lay.name for lay in layers)
    pos = positions(s)
    for lay in layers:
        for p in lay.producers:
            assert pos[p] < pos[lay.name], f"{p} must run before {lay.name}"


def check_partitions(layers: Sequence[LayerInfo], s: SegmentSchedule, limit: float) -> None:
    assert s.limit_bytes == limit
    assert tuple(n for p in s.partitions for n in p.layers) == s.order  # consecutive runs
    by_name = {lay.name: lay for lay in layers}
    step = 0
    for part in s.partitions:
        steps = s.pressure[step : step + len(part.layers)]
        step += len(part.layers)
        assert part.peak_bytes == max(steps)
        if part.streaming:
            (only,) = part.layers
            lay = by_name[only]
            assert lay.input_bytes + lay.output_bytes > limit  # ring windows only shrink it
            assert only in s.streaming
        else:
            assert part.peak_bytes <= limit
            assert not set(part.layers) & s.streaming
    assert s.streaming == {n for p in s.partitions if p.streaming for n in p.layers}


def check_chains(layers: Sequence[LayerInfo], s: SegmentSchedule, enabled: bool) -> None:
    pos = positions(s)
    by_name = {lay.name: lay for lay in layers}
    chained = set()
    for producer, consumer in s.chained:
        p, c = by_name[producer], by_name[consumer]
        assert pos[consumer] == pos[producer] + 1
        assert s.partition_of[producer] == s.partition_of[consumer]
        assert p.consumers == (consumer,) and not p.segment_output
        assert p.unit == c.unit and p.unit in ("mac", "planar")
        assert enabled
        chained.add(producer)
    for lay in layers:  # the state is given exactly to chained producers
        assert (s.states[lay.output] == AllocState.L2_CHAINED) == (lay.name in chained)


def check_coissue(layers: Sequence[LayerInfo], s: SegmentSchedule) -> None:
    dag = LayerDag(layers)
    pos = positions(s)
    by_name = {lay.name: lay for lay in layers}
    endpoints = {n for c in s.chains if c.chainable for n in (c.producer, c.consumer)}
    seen: set[str] = set()
    for a, b in s.coissue:
        assert {by_name[a].unit, by_name[b].unit} == {"mac", "planar"}
        assert dag.independent(dag.index[a], dag.index[b])
        assert abs(pos[a] - pos[b]) == 1 and s.partition_of[a] == s.partition_of[b]
        assert not {a, b} & endpoints, "chaining and co-issue are exclusive"
        assert not (
            streams_from_memory(by_name[a], s.states) and streams_from_memory(by_name[b], s.states)
        )
        assert not {a, b} & seen
        seen |= {a, b}


def check_states_and_dma(layers: Sequence[LayerInfo], s: SegmentSchedule) -> None:
    for lay in layers:
        state = s.states[lay.output]
        dma = s.dma[lay.name]
        assert dma.weight_bytes == lay.weight_bytes
        assert dma.write_bytes == (lay.output_bytes if state.in_memory else 0)
        if lay.segment_output or lay.name in s.streaming:
            assert state.in_memory
        for op in lay.operands:
            if op.producer is None:
                assert s.states[op.tensor] == AllocState.STREAMED
        # nothing produced earlier in the same partition is read back from memory
        same = [
            op.nbytes
            for op in lay.operands
            if op.producer
            and s.partition_of[op.producer] == s.partition_of[lay.name]
            and lay.name not in s.streaming
            and op.producer not in s.streaming
        ]
        assert dma.read_bytes <= lay.input_bytes - sum(same)
    for part in s.partitions:
        total = s.partition_dma(part.index)
        assert total.read_bytes == sum(s.dma[n].read_bytes for n in part.layers)
        assert total.write_bytes == sum(s.dma[n].write_bytes for n in part.layers)


def check_all(layers: Sequence[LayerInfo], s: SegmentSchedule, limit: float, enabled: bool) -> None:
    check_topological(layers, s)
    check_partitions(layers, s, limit)
    check_chains(layers, s, enabled)
    check_coissue(layers, s)
    check_states_and_dma(layers, s)
