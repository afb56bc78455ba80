"""`input_scales`: an input multiplied by a power of two and the factor absorbed exactly.

A graph mixing every kind of op the factor meets (convolution with bias, ReLU, max pool, a
sum of two scaled branches, a constant added, a product of two scaled values, a square root,
a log, a layer norm, a sigmoid that must read unscaled values, a graph output) compiled with
and without ``input_scales``: the engine graphs agree in fp32 to rounding, and on the fp16
simulator the squares that overflowed unscaled fit."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import ops
from anekit.compiler import compile as compile_model
from anekit.errors import AnekitError
from tests.passes.support import rel_err

RNG = np.random.default_rng(24)


def _w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _graph() -> anekit.Graph:
    x = anekit.input("x", (1, 2, 8, 8))
    a = ops.relu(ops.conv2d(x, _w(4, 2, 3, 3), _w(4), padding=1))
    b = ops.max_pool2d(ops.conv2d(x, _w(4, 2, 3, 3), padding=1), 2, 2)
    a = ops.max_pool2d(a, 2, 2)
    s = ops.add(ops.add(a, b), np.float32(3.0))  # two scaled branches, then a constant
    power = ops.add(ops.mul(s, s), np.float32(1e-3))
    log = ops.log(ops.sqrt(power))
    norm = ops.layer_norm(
        ops.reshape(s, (1, 4, 16)), np.ones(16, np.float32), np.zeros(16, np.float32)
    )
    gate = ops.sigmoid(s)  # reads its input unscaled
    return anekit.graph([log, norm, ops.mul(gate, s)])


def test_input_scales_are_exact() -> None:
    graph = _graph()
    x = (RNG.standard_normal((1, 2, 8, 8)) * 1000).astype(np.float32)
    want = graph.run({"x": x})
    for chip in ("m1", "m4"):
        cm = compile_model(graph, chip, input_scales={"x": 2.0**-10})
        got = cm.run({"x": x})
        assert list(got) == list(want)  # the outputs keep their names
        for name in want:
            assert rel_err(got[name], want[name]) < 1e-5, (chip, name)
        # on fp16 the unscaled squares (~1e7) overflow; scaled by 2^-10 they fit
        log = next(iter(want))
        before = compile_model(graph, chip).run({"x": x}, "sim")[log]
        assert rel_err(np.nan_to_num(before.astype(np.float32)), want[log]) > 0.1, chip
        after = cm.run({"x": x}, "sim")[log].astype(np.float32)
        assert rel_err(after, want[log]) < 1e-2, chip


@pytest.mark.parametrize("scales", [{"y": 0.5}, {"x": 0.0}, {"x": float("nan")}])
def test_bad_input_scales_are_refused(scales) -> None:
    with pytest.raises(AnekitError):
        compile_model(_graph(), "m4", input_scales=scales)
