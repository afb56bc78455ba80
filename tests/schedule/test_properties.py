"""Property tests of the schedule on random engine-layer DAGs (issue 5 acceptance)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from anekit import targets
from anekit.schedule import (
    AllocState,
    LayerDag,
    ScheduleOptions,
    SegmentSchedule,
    schedule_layers,
)
from anekit.schedule.coissue import streams_from_memory
from tests.schedule.dags import layer_dags

M1 = targets.get("m1")  # 2 MB budget: random tensors up to ~2 MB exercise every rule
NO_CHAINING = dataclasses.replace(M1, features=dataclasses.replace(M1.features, l2_chaining=False))

options = st.builds(
    ScheduleOptions,
    margin=st.sampled_from((0.25, 0.5, 0.75, 1.0)),
    tile_bytes=st.sampled_from((1024, 65536, 1 << 20)),
)
target = st.sampled_from((M1, NO_CHAINING))
SETTINGS = settings(max_examples=120, deadline=None)


def positions(s: SegmentSchedule) -> dict[str, int]:
    return {name: k for k, name in enumerate(s.order)}


@SETTINGS
@given(layer_dags(), target, options)
def test_order_is_a_topological_permutation(layers, t, opts):
    s = schedule_layers(layers, t, opts)
    assert sorted(s.order) == sorted(lay.name for lay in layers)
    pos = positions(s)
    for lay in layers:
        for p in lay.producers:
            assert pos[p] < pos[lay.name], f"{p} must run before {lay.name}"


@SETTINGS
@given(layer_dags(), target, options)
def test_partitions_fit_the_budget_unless_one_layer_alone_exceeds_it(layers, t, opts):
    s = schedule_layers(layers, t, opts)
    limit = opts.margin * t.onchip_budget_bytes
    assert s.limit_bytes == limit
    flat = [name for p in s.partitions for name in p.layers]
    assert tuple(flat) == s.order  # partitions cut the order into consecutive runs
    step = 0
    by_name = {lay.name: lay for lay in layers}
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


@SETTINGS
@given(layer_dags(), target, options)
def test_chained_pairs_are_adjacent_single_fanout_same_engine(layers, t, opts):
    s = schedule_layers(layers, t, opts)
    pos = positions(s)
    by_name = {lay.name: lay for lay in layers}
    chained_producers = set()
    for producer, consumer in s.chained:
        p, c = by_name[producer], by_name[consumer]
        assert pos[consumer] == pos[producer] + 1
        assert s.partition_of[producer] == s.partition_of[consumer]
        assert p.consumers == (consumer,) and not p.segment_output
        assert p.unit == c.unit and p.unit in ("mac", "planar")
        assert t.features.l2_chaining
        assert s.states[p.output] == AllocState.L2_CHAINED
        chained_producers.add(producer)
    for lay in layers:  # the state is given exactly to chained producers
        chained_state = s.states[lay.output] == AllocState.L2_CHAINED
        assert chained_state == (lay.name in chained_producers)


@SETTINGS
@given(layer_dags(), target, options)
def test_coissued_pairs_are_independent_mac_planar_and_never_chained(layers, t, opts):
    s = schedule_layers(layers, t, opts)
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


@SETTINGS
@given(layer_dags(), target, options)
def test_states_and_dma_are_consistent(layers, t, opts):
    s = schedule_layers(layers, t, opts)
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


@SETTINGS
@given(layer_dags(), target, options)
def test_schedule_is_deterministic(layers, t, opts):
    first = schedule_layers(layers, t, opts)
    again = schedule_layers(tuple(layers), t, opts)
    assert first.as_dict() == again.as_dict()
    assert first.order == again.order and first.coissue == again.coissue
