"""Property tests of the schedule on random engine-layer DAGs."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from anekit import targets
from anekit.schedule import ScheduleOptions, schedule_layers
from tests.schedule import invariants
from tests.schedule.dags import layer_dags

M1 = targets.get("m1")  # 2 MB budget: random tensors up to ~2 MB exercise every rule
NO_CHAINING = dataclasses.replace(M1, features=dataclasses.replace(M1.features, l2_chaining=False))

options = st.builds(
    ScheduleOptions,
    margin=st.sampled_from((0.25, 0.5, 0.75, 1.0)),
    tile_bytes=st.sampled_from((1024, 65536, 1 << 20)),
)
target = st.sampled_from((M1, NO_CHAINING))
SETTINGS = settings(max_examples=100, deadline=None)


@SETTINGS
@given(layer_dags(), target, options)
def test_order_is_a_topological_permutation(layers, t, opts):
    invariants.check_topological(layers, schedule_layers(layers, t, opts))


@SETTINGS
@given(layer_dags(), target, options)
def test_partitions_fit_the_budget_unless_one_layer_alone_exceeds_it(layers, t, opts):
    s = schedule_layers(layers, t, opts)
    invariants.check_partitions(layers, s, opts.margin * t.onchip_budget_bytes)


@SETTINGS
@given(layer_dags(), target, options)
def test_chained_pairs_are_adjacent_single_fanout_same_engine(layers, t, opts):
    s = schedule_layers(layers, t, opts)
    invariants.check_chains(layers, s, t.features.l2_chaining)


@SETTINGS
@given(layer_dags(), target, options)
def test_coissued_pairs_are_independent_mac_planar_and_never_chained(layers, t, opts):
    invariants.check_coissue(layers, schedule_layers(layers, t, opts))


@SETTINGS
@given(layer_dags(), target, options)
def test_states_and_dma_are_consistent(layers, t, opts):
    invariants.check_states_and_dma(layers, schedule_layers(layers, t, opts))


@SETTINGS
@given(layer_dags(), target, options)
def test_schedule_is_deterministic(layers, t, opts):
    first = schedule_layers(layers, t, opts)
    again = schedule_layers(tuple(layers), t, opts)
    assert first.as_dict() == again.as_dict()
    assert first.order == again.order and first.coissue == again.coissue
