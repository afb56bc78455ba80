"""anekit's own .hwx programs run in the emulator within fp16 tolerance of the MIL simulator.

Each model is compiled for m1; `cm.run(feeds, "engine")` emits the engine graph as an H13
program and runs it on the emulator, `cm.run(feeds, "sim")` runs the MIL on the fp16
simulator. Both store fp16 between layers; they differ by accumulation order and by where
an fp32 result is rounded, so the tolerance is a few fp16 ulps of the output's scale.
"""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit.codegen.h13 import EmitError, emit
from anekit.emulator import EngineProgram
from anekit.formats import hwx
from tests.emulator.anecc_checks import convert

ops = anekit.ops
RNG = np.random.default_rng(7)


def _w(*shape: int, scale: float = 0.3) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def _conv_bias_relu():
    x = anekit.input("x", (1, 8, 6, 6))
    return [ops.relu(ops.conv2d(x, _w(16, 8, 3, 3), _w(16), padding=1), name="y")]


def _relu():
    return [ops.relu(anekit.input("x", (1, 4, 3, 20)), name="y")]


def _sigmoid():
    return [ops.sigmoid(anekit.input("x", (1, 2, 2, 33)), name="y")]


def _gemm():  # a fully connected layer: anekit compiles it to a 1x1 conv over [1, 96, 1, 1]
    return [ops.linear(anekit.input("x", (1, 96)), _w(40, 96, scale=0.1), _w(40), name="y")]


def _add():
    return [ops.add(anekit.input("a", (1, 5, 4, 9)), anekit.input("b", (1, 5, 4, 9)), name="y")]


def _mul():
    return [ops.mul(anekit.input("a", (1, 5, 4, 9)), anekit.input("b", (1, 5, 4, 9)), name="y")]


def _concat():
    a, b = anekit.input("a", (1, 3, 4, 5)), anekit.input("b", (1, 6, 4, 5))
    return [ops.concat([a, b], axis=1, name="y")]


def _small_cnn():
    x = anekit.input("x", (1, 3, 16, 16))
    h = ops.relu(ops.conv2d(x, _w(8, 3, 3, 3), _w(8), padding=1))
    h = ops.relu(ops.conv2d(h, _w(16, 8, 3, 3, scale=0.2), _w(16), stride=2, padding=1))
    skip = ops.conv2d(h, _w(16, 16, 1, 1, scale=0.2), _w(16))
    h = ops.add(h, ops.sigmoid(skip))
    return [ops.conv2d(h, _w(10, 16, 1, 1, scale=0.2), _w(10), name="y")]


MODELS = {
    "conv_bias_relu": _conv_bias_relu,
    "relu": _relu,
    "sigmoid": _sigmoid,
    "gemm": _gemm,
    "add": _add,
    "mul": _mul,
    "concat": _concat,
    "small_cnn": _small_cnn,
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_emulated_program_agrees_with_the_simulator(name):
    graph = anekit.graph(MODELS[name]())
    cm = anekit.compile(graph, "m1")
    feeds = {v.name: RNG.standard_normal(v.shape).astype(np.float32) for v in graph.inputs}
    sim = cm.run(feeds, "sim")["y"]
    engine = cm.run(feeds, "engine")["y"]
    assert engine.shape == sim.shape
    scale = float(np.abs(sim).max())
    # sigmoid: the engine's 33-sample table is off by up to 3e-3 from the exact function
    atol = 4e-3 if "sigmoid" in name or name == "small_cnn" else 0.0
    np.testing.assert_allclose(engine, sim, atol=atol + 4 * 2.0**-11 * scale, rtol=0)
    convert(emit(cm.graph))  # the Asahi converter's checks (tests/emulator/anecc_checks.py)


def test_emitted_program_reads_back_with_its_tiles_and_relocations():
    cm = anekit.compile(anekit.graph(_conv_bias_relu()), "m1")
    program = hwx.parse(emit(cm.graph))
    assert program.generation == "h13" and len(program.task_descriptors) == 1
    assert [t.name for t in program.inputs] == ["x"] and program.outputs[0].name == "y@output"
    lanes = sorted(t.lane for t in program.weight_tiles)
    assert lanes == list(range(16))  # 16 output channels, one per lane
    assert {r.register for r in program.relocations} == {
        f"KernelDMASrc.CoeffBaseAddr[{i}]" for i in range(16)
    }
    fields = program.task_descriptors[0].fields
    assert fields["NE.MACCfg.NonlinearMode"] == 1 and fields["NE.MACCfg.BiasMode"] == 1
    assert (fields["Common.ConvCfg.Kh"], fields["Common.ConvCfg.Px"]) == (3, 1)
    EngineProgram(emit(cm.graph))  # the emulator's register policy accepts it


def test_a_layer_without_an_h13_form_is_refused_naming_it():
    x = anekit.input("x", (1, 4, 4, 4))
    cm = anekit.compile(anekit.graph([ops.softmax(x, axis=1, name="y")]), "m1")
    with pytest.raises(EmitError, match="softmax"):
        emit(cm.graph)
