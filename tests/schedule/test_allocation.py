"""Allocation states (ane-compiler table 22.2), the chaining conjunction, and DMA accounting."""

from __future__ import annotations

import dataclasses

from anekit import targets
from anekit.cost.workloads import EngineGraphBuilder
from anekit.schedule import AllocState, LayerInfo, Operand, layers_of, link_layers, schedule_layers

M4 = targets.get("m4")


def chain_of(s, producer):
    return next(c for c in s.chains if c.producer == producer)


def two_convs(**kw):
    b = EngineGraphBuilder("pair")
    x = b.input("x", kw.get("shape", (1, 64, 16, 16)))
    a = b.conv(x, kw.get("mid", 64), name="a")
    c = b.conv(a, 64, kernel=kw.get("kernel", 1), name="c")
    outs = [c, b.layer("relu", [a], name="side")] if kw.get("fanout") else [c]
    return layers_of(b.build(outs))


def test_conv_into_conv_is_chained_and_its_consumer_is_l2_dependent():
    b = EngineGraphBuilder("chain3")
    x = b.input("x", (1, 64, 16, 16))
    a = b.conv(x, 64, name="a")
    c = b.conv(a, 64, name="c")
    d = b.layer("transpose", [c], {"perm": (0, 1, 3, 2)}, name="d")  # dma: cannot chain
    s = schedule_layers(layers_of(b.build([d])), M4)
    assert chain_of(s, "a").chained and not chain_of(s, "a").failed()
    assert s.states["a"] == AllocState.L2_CHAINED
    assert s.states["c"] == AllocState.L2_DEPENDENT  # resident, fed by a chained producer
    assert s.dma["a"].write_bytes == 0 and s.dma["c"].read_bytes == 0


def test_each_condition_of_the_conjunction_can_break_the_chain():
    off = dataclasses.replace(M4, features=dataclasses.replace(M4.features, l2_chaining=False))
    assert chain_of(schedule_layers(two_convs(), off), "a").failed() == ("enabled",)
    fan = schedule_layers(two_convs(fanout=True), M4)
    assert "single_fanout" in chain_of(fan, "a").failed()
    # 512 channels x 64 wide = one 64 KiB row per tile; a 3x3 reader needs 2 rows first
    wide = schedule_layers(two_convs(shape=(1, 64, 8, 64), mid=512, kernel=3), M4)
    assert chain_of(wide, "a").failed() == ("covers_first_tile",)
    assert chain_of(schedule_layers(two_convs(kernel=3), M4), "a").chained  # 16 rows/tile


def test_engine_class_and_geometry_conditions():
    b = EngineGraphBuilder("mixed")
    x = b.input("x", (1, 1, 32, 64))
    p = b.linear(x, 64, name="p")
    q = b.layer("relu", [p], name="q")  # planar reader of a mac producer
    r = b.linear(x, 32, name="r")
    w = b.layer("matmul", [b.constant((1, 1, 32, 32)), r], name="mm")  # r read whole (B operand)
    s = schedule_layers(layers_of(b.build([q, w])), M4)
    assert chain_of(s, "p").failed() == ("same_engine",)
    assert "geometry" in chain_of(s, "r").failed()


def test_in_place_states():
    b = EngineGraphBuilder("inplace")
    x = b.input("x", (1, 16, 8, 8))
    a = b.conv(x, 16, name="a")
    r = b.layer("relu", [a], name="r")  # planar, a dies here: in place in L2
    y = b.input("y", (1, 16, 8, 8))
    p1 = b.layer("relu", [y], name="p1")  # planar -> planar: chained
    p2 = b.layer("sigmoid", [p1], name="p2")  # rewrites the chained tensor in place
    out = b.layer("add", [r, p2], name="out")
    side = b.layer("abs", [p2], name="side")  # a second reader: p2 itself cannot chain
    s = schedule_layers(layers_of(b.build([out, side])), M4)
    assert s.states["r"] == AllocState.IN_PLACE
    assert s.states["p1"] == AllocState.L2_CHAINED
    assert s.states["p2"] == AllocState.IN_PLACE_L2_DEPENDENT


def test_in_place_in_dram_and_ring_l2_dependent():
    def lay(name, operands, out_bytes, **kw):
        return LayerInfo(
            name=name,
            unit=kw.pop("unit", "planar"),
            layer_type=kw.pop("layer_type", "neuron"),
            main=kw.pop("main", "relu"),
            flops=1,
            operands=tuple(operands),
            output=name,
            output_bytes=out_bytes,
            out_shape=(1, 1, 1, out_bytes // 2),
            **kw,
        )

    # A streams (its 30 MiB input alone exceeds M4's 24 MiB limit); B rewrites it in DRAM
    a = lay("A", [Operand("in", 30 * 2**20, None, (1, 512))], 1024)
    b = lay("B", [Operand("A", 1024, "A", (1, 512))], 1024, segment_output=True, in_place=True)
    s = schedule_layers(link_layers([a, b]), M4)
    assert s.states["A"] == AllocState.STREAMED and s.states["B"] == AllocState.IN_PLACE_DRAM

    bld = EngineGraphBuilder("ring2")
    x = bld.input("x", (1, 4, 128, 128))
    q = bld.conv(x, 4, name="Q")
    p = bld.conv(q, 64, name="P")  # 2 MiB: a ring on M1, and Q -> P is chained
    c = bld.layer("max_pool", [p], {"kernel": (2, 2), "strides": (2, 2)}, name="C")
    s = schedule_layers(layers_of(bld.build([c])), targets.get("m1"))
    assert s.states["Q"] == AllocState.L2_CHAINED
    assert s.states["P"] == AllocState.RING_L2_DEPENDENT


def test_dma_counts_weights_and_partition_crossings_once():
    b = EngineGraphBuilder("cross")
    x = b.input("x", (1, 64, 32, 32))  # 128 KiB
    a = b.conv(x, 64, name="a")
    c = b.conv(a, 64, name="c")
    d = b.layer("add", [a, c], name="d")
    m = dataclasses.replace(M4, onchip_budget_bytes=400 * 1024)  # 300 KiB: two tensors + one
    s = schedule_layers(layers_of(b.build([d])), m)
    assert len(s.partitions) >= 2
    nbytes = 64 * 32 * 32 * 2
    assert s.dma["a"].weight_bytes == 64 * 64 * 2
    assert s.dma["a"].read_bytes == nbytes  # the graph input
    crossed = [t for t in ("a", "c") if s.states[t].in_memory]
    assert crossed, "a tensor read in a later partition goes through memory"
    for t in crossed:
        assert s.dma[t].write_bytes == nbytes
    assert s.dma["d"].write_bytes == nbytes  # the segment output
    total = sum(s.partition_dma(p.index).total for p in s.partitions)
    assert total == sum(d.total for d in s.dma.values())
