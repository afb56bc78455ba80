"""The cost model: rates from the chip database, layer roofs, co-issue overlap, segments, CPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from anekit import targets
from anekit.cost import Rates, default_calibration, estimate_graph, estimate_segments
from anekit.cost.model import LayerCost, prefetch, weight_stream_s
from anekit.cost.workloads import (
    EngineGraphBuilder,
    attention_block,
    conv_stack,
    single_conv,
    single_elementwise,
    single_matmul,
)
from anekit.ir.engine import layer_attrs
from anekit.passes.results import Segment
from anekit.schedule.plan import LayerDma

CAL = default_calibration()


@pytest.mark.parametrize("name", ["m1", "m4", "m5-pro"])
def test_rates_come_from_the_chip_database(name):
    t = targets.get(name)
    r = Rates.of(t, CAL)
    p = t.perf
    assert r.conv_flops_per_s == pytest.approx(p.peak_fp16_tflops * p.util_deep_graph * 1e12)
    assert r.matmul_flops_per_s == pytest.approx(p.gemm_fp16_tflops * p.util_deep_graph * 1e12)
    assert r.ane_bytes_per_s == p.ane_bandwidth_gbps * 1e9
    assert r.dispatch_s == p.dispatch_overhead_us * 1e-6
    assert r.cpu_flops_per_s == p.cpu_gflops * 1e9
    ref = targets.get(CAL.planar_reference_target).perf.peak_fp16_tflops
    assert r.planar_elements_per_s == pytest.approx(
        CAL.planar_elements_per_s * p.peak_fp16_tflops / ref
    )


def test_a_layer_is_the_slower_of_its_compute_and_memory_roofs():
    t = targets.get("m4")
    r = Rates.of(t, CAL)
    est = estimate_graph(single_conv(256, 32, 32, 3), t)
    (seg,) = est.segments
    (lay,) = seg.layers
    assert lay.flops == 2 * 256 * 32 * 32 * 256 * 9
    assert lay.compute_s == pytest.approx((lay.flops + CAL.mac_startup_flops) / r.conv_flops_per_s)
    assert lay.memory_s == pytest.approx(lay.dma.total / r.ane_bytes_per_s)
    assert lay.dma.weight_bytes == 256 * 256 * 9 * 2
    assert lay.bound == "compute"
    crossing = 2 * 256 * 32 * 32  # input and output elements, converted by the CPU
    assert seg.transition_s == pytest.approx(crossing * 6 / (t.perf.bandwidth_gbps * 1e9))
    assert seg.time_s == pytest.approx(r.dispatch_s + lay.time_s + seg.transition_s)
    assert est.total_s == pytest.approx(seg.time_s)


def test_bottlenecks_are_named():
    tiny = estimate_graph(single_elementwise("relu", (1, 16)), "m4")
    assert tiny.bottleneck == "dispatch"
    deep = estimate_graph(conv_stack(16, 256, 32, 32), "m4")
    assert deep.bottleneck == "compute"
    gemv = estimate_graph(single_matmul(1, 4096, 4096), "m4")  # 32 MiB of weights, 1 row
    assert gemv.bottleneck == "memory"
    (lay,) = gemv.segments[0].layers
    assert lay.bound == "memory"


def test_matmul_runs_at_the_gemm_rate_and_conv_at_the_conv_rate():
    t = targets.get("m4")
    r = Rates.of(t, CAL)
    mm = estimate_graph(single_matmul(512, 512, 512), t).segments[0].layers[0]
    assert mm.compute_s == pytest.approx((mm.flops + CAL.mac_startup_flops) / r.matmul_flops_per_s)
    assert r.conv_flops_per_s / r.matmul_flops_per_s == pytest.approx(19.0 / 5.4)


def test_coissued_layers_overlap_in_their_partition():
    est = estimate_graph(attention_block(256, 256), "m4")
    (seg,) = est.segments
    sched = seg.schedule
    assert sched.coissue
    by_name = {c.name: c for c in seg.layers}
    (a, b) = sched.coissue[0]
    assert by_name[a].coissued_with == b and by_name[b].coissued_with == a
    serial = sum(c.time_s for c in seg.layers)
    saved = min(by_name[a].time_s, by_name[b].time_s)
    assert sum(p.time_s for p in seg.partitions) == pytest.approx(serial - saved)


def test_a_streaming_layer_pays_the_spill_factor():
    t = targets.get("m4")
    tight = dataclasses.replace(t, onchip_budget_bytes=256 * 1024)  # the 1 MiB map streams
    roomy = estimate_graph(single_conv(256, 32, 32, 3), t).segments[0].layers[0]
    spilled = estimate_graph(single_conv(256, 32, 32, 3), tight).segments[0].layers[0]
    assert spilled.streaming and not roomy.streaming
    assert spilled.compute_s == pytest.approx(roomy.compute_s / t.perf.spill_throughput_factor)


def test_deep_programs_amortise_the_fixed_costs():
    """Utilisation grows with size and depth towards util_deep_graph (maderix: 30% -> 94%)."""
    t = targets.get("m4")
    utils = [
        estimate_graph(conv_stack(d, 512, 32, 32), t).segments[0].utilisation for d in (1, 4, 32)
    ]
    assert utils[0] < utils[1] < utils[2] < t.perf.util_deep_graph


def test_cpu_segments_and_transitions():
    b = EngineGraphBuilder("mixed")
    x = b.input("x", (1, 64, 8, 8))
    a = b.conv(x, 64, name="a")
    g0 = b.build([a])
    ed = g0.edit()
    (c,) = ed.add("erf", [a], name="c")  # a CPU op between two engine layers
    ed.output_names = [c]
    ed.name_outputs([c])
    g = ed.build()
    ed = g.edit()
    w = ed.add_constant(np.zeros((64, 64, 1, 1), "float32"), "w2")
    (d,) = ed.add("ane_layer", [c, w], layer_attrs("conv", {}, 2), name="d")
    ed.output_names = [d]
    ed.name_outputs([d])
    g = ed.build()
    segs = [
        Segment(0, "ane", ("a",), ("x",), ("a",)),
        Segment(1, "cpu", ("c",), ("a",), ("c",)),
        Segment(2, "ane", ("d",), ("c",), ("d",)),
    ]
    t = targets.get("m4")
    est = estimate_segments(g, segs, t)
    ane0, cpu, ane2 = est.segments
    elems = 64 * 8 * 8
    assert cpu.cpu_s == pytest.approx(
        max(elems / (t.perf.cpu_gflops * 1e9), 2 * elems * 4 / (t.perf.bandwidth_gbps * 1e9))
    )
    conversion = elems * 6 / (t.perf.bandwidth_gbps * 1e9)
    assert ane0.transition_s == pytest.approx(2 * conversion)  # x in, a out to the CPU
    assert ane2.transition_s == pytest.approx(2 * conversion)  # c in from the CPU, d out
    assert est.dispatches == 2
    assert est.total_s == pytest.approx(sum(s.time_s for s in est.segments))
    d = est.as_dict()
    assert [s["device"] for s in d["segments"]] == ["ane", "cpu", "ane"]
    assert d["total_ms"] == pytest.approx(est.total_ms)


def test_a_planar_layer_fed_on_chip_runs_at_the_on_chip_rate():
    # relu reading the program input comes in through memory: the single-program rate
    t = targets.get("m5-pro")
    r = Rates.of(t, CAL)
    assert r.planar_onchip_elements_per_s > r.planar_elements_per_s
    alone = estimate_graph(single_elementwise("sigmoid", (1, 64, 32, 32)), t).segments[0]
    (lay,) = alone.layers
    assert lay.compute_s == pytest.approx(64 * 32 * 32 / r.planar_elements_per_s)
    # the same layer after a convolution reads the convolution's output from L2
    b = EngineGraphBuilder("conv_then_sigmoid")
    y = b.layer("sigmoid", [b.conv(b.input("x", (1, 64, 32, 32)), 64, name="conv")])
    seg = estimate_graph(b.build([y]), t).segments[0]
    planar = [c for c in seg.layers if c.unit == "planar"]
    assert len(planar) == 1
    assert planar[0].compute_s == pytest.approx(64 * 32 * 32 / r.planar_onchip_elements_per_s)


def _layer(name, compute_s, weight_s, other_s=0.0, streaming=False):
    """A LayerCost whose memory time is ``weight_s`` of weights plus ``other_s`` of activations
    (bytes at 1 GB/s, so the split follows the DMA byte counts)."""
    dma = LayerDma(int(other_s * 1e9), int(weight_s * 1e9), 0)
    return LayerCost(name, "mac", 0, 0, dma, compute_s, weight_s + other_s, streaming)


def test_prefetch_hides_the_next_weights_under_a_compute_bound_slot():
    first = _layer("conv", compute_s=10e-6, weight_s=2e-6)
    heavy = _layer("fc", compute_s=1e-6, weight_s=8e-6, other_s=1e-6)
    times, hidden = prefetch([[first], [heavy]])
    assert times[0] == (first.compute_s, first.memory_s)  # the first slot fetches its own
    assert hidden == pytest.approx(8e-6)  # 8 us of idle DMA covers the 8 us of weights
    assert times[1][1] == pytest.approx(1e-6)  # only its activations remain
    assert sum(max(c, m) for c, m in times) < first.time_s + heavy.time_s


def test_prefetch_needs_idle_dma_time_and_spares_streaming_layers():
    busy = _layer("a", compute_s=1e-6, weight_s=5e-6)  # memory-bound: no idle DMA time
    heavy = _layer("b", compute_s=1e-6, weight_s=8e-6)
    assert prefetch([[busy], [heavy]])[1] == 0.0
    idle = _layer("c", compute_s=20e-6, weight_s=1e-6)
    spilled = _layer("d", compute_s=1e-6, weight_s=8e-6, streaming=True)
    assert prefetch([[idle], [spilled]])[1] == 0.0
    part = _layer("e", compute_s=3e-6, weight_s=1e-6)  # 2 us idle: only 2 of 8 us hidden
    times, hidden = prefetch([[part], [heavy]])
    assert hidden == pytest.approx(2e-6) and times[1][1] == pytest.approx(6e-6)


def test_prefetch_runs_further_ahead_only_into_spare_onchip_bytes():
    """Idle DMA time left after the next slot's weights streams a later slot's weights only
    as far as the partition's unused on-chip bytes (``spare_s``) can hold them."""
    a = _layer("a", compute_s=10e-6, weight_s=1e-6)  # 9 us of idle DMA
    b = _layer("b", compute_s=10e-6, weight_s=1e-6)  # takes 1 us of it, idles 10 us more
    c = _layer("c", compute_s=1e-6, weight_s=12e-6)
    slots = [[a], [b], [c]]
    assert prefetch(slots)[1] == pytest.approx(1e-6 + 10e-6)  # no spare room: one slot ahead
    assert prefetch(slots, spare_s=1e-6)[1] == pytest.approx(1e-6 + 11e-6)
    times, hidden = prefetch(slots, spare_s=1.0)
    assert hidden == pytest.approx(1e-6 + 12e-6)  # never more than c's own weights
    assert times[2] == pytest.approx((1e-6, 0.0))


def test_a_compute_bound_layer_hides_the_next_layers_weights_in_a_program():
    """Chaining: the 1x1 layer's 2 MiB kernel streams while the 3x3 layer computes."""
    b = EngineGraphBuilder("prefetch")
    x = b.input("x", (1, 256, 32, 32))
    y = b.conv(b.conv(x, 256, kernel=3), 4096, kernel=1, stride=8)
    (seg,) = estimate_graph(b.build([y]), "m5-pro").segments
    (part,) = seg.partitions
    first, second = seg.layers
    assert first.bound == "compute" and second.bound == "memory"
    assert part.prefetched_s == pytest.approx(weight_stream_s(second))
    assert part.time_s < first.time_s + second.time_s
    alone = estimate_graph(single_conv(256, 32, 32, 3), "m5-pro").segments[0]
    assert alone.partitions[0].prefetched_s == 0.0
    assert alone.partitions[0].time_s == pytest.approx(alone.layers[0].time_s)


def test_weights_wait_on_chip_only_where_the_budget_leaves_room():
    """Two compute-bound 3x3 layers, then a 1x1 layer with 8 MiB of weights that one layer's
    idle DMA time cannot cover: on the M5 Pro (32 MB budget) the idle time of both streams
    them all; on the M1 (2 MB) only as much more than one slot's as its spare bytes hold."""
    b = EngineGraphBuilder("lookahead")
    x = b.input("x", (1, 256, 32, 32))
    y = b.conv(b.conv(b.conv(x, 256, kernel=3), 256, kernel=3), 16384, kernel=1, stride=8)
    graph = b.build([y])
    for chip, all_hidden in (("m5-pro", True), ("m1", False)):
        (seg,) = estimate_graph(graph, chip).segments
        (part,) = seg.partitions
        _, second, last = seg.layers
        assert second.compute_s - second.memory_s < weight_stream_s(last)  # one slot: too little
        both = weight_stream_s(second) + weight_stream_s(last)
        one_slot = prefetch([[c] for c in seg.layers])[1]
        spare_s = (seg.schedule.limit_bytes - part.peak_onchip_bytes) / (
            targets.get(chip).perf.ane_bandwidth_gbps * 1e9
        )
        assert one_slot < part.prefetched_s <= one_slot + spare_s + 1e-12
        if all_hidden:
            assert part.prefetched_s == pytest.approx(both)
        else:
            assert part.prefetched_s < both


def test_weight_bound_estimates_follow_each_variants_engine_bandwidth():
    """ANEMLL-Bench: the M1 streams weights faster than the M1 Pro/Max/Ultra, the M3 Max and
    M4 Pro about twice as fast as their base chips; a GEMV follows the database."""
    gemv = single_matmul(1, 4096, 4096)
    mem = {
        n: estimate_graph(gemv, n).segments[0].memory_s
        for n in ("m1", "m1-max", "m1-ultra", "m3", "m3-max", "m4", "m4-pro")
    }
    for a, b in (("m1", "m1-max"), ("m1", "m1-ultra"), ("m3", "m3-max"), ("m4", "m4-pro")):
        ratio = targets.get(b).perf.ane_bandwidth_gbps / targets.get(a).perf.ane_bandwidth_gbps
        assert mem[a] / mem[b] == pytest.approx(ratio)
    assert mem["m1"] < mem["m1-max"] and mem["m3-max"] < mem["m3"] / 1.5
