"""Estimates of models compiled by the middle-end, and the compile report's estimate."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit.compiler import compile as compile_model
from anekit.cost import estimate_compiled
from anekit.frontend.builder import ops


def small_transformer_block(seq: int = 32, dim: int = 64) -> anekit.Graph:
    rng = np.random.default_rng(0)

    def w(*shape):
        return anekit.constant(rng.standard_normal(shape).astype(np.float32) * 0.05)

    x = anekit.input("x", (1, seq, dim))
    h = ops.layer_norm(x, w(dim), w(dim), axis=-1)
    q, k, v = (ops.linear(h, w(dim, dim), w(dim)) for _ in range(3))
    att = ops.softmax(ops.matmul(q, ops.transpose(k, (0, 2, 1))) * 0.125, axis=-1)
    y = ops.add(x, ops.linear(ops.matmul(att, v), w(dim, dim), w(dim)))
    z = ops.gelu(ops.linear(y, w(4 * dim, dim), w(4 * dim)))
    return anekit.graph(ops.add(y, ops.linear(z, w(dim, 4 * dim), w(dim))))


@pytest.fixture(scope="module")
def compiled():
    return compile_model(small_transformer_block(), "m4")


def test_estimate_covers_every_segment_of_the_compiled_model(compiled):
    est = estimate_compiled(compiled)
    assert est.target == "m4"
    assert [s.index for s in est.segments] == [s.index for s in compiled.segments]
    assert [s.device for s in est.segments] == [s.device for s in compiled.segments]
    ane_nodes = sum(len(s.nodes) for s in compiled.segments if s.device == "ane")
    assert sum(len(s.layers) for s in est.segments) == ane_nodes
    assert est.total_s == pytest.approx(sum(s.time_s for s in est.segments))
    assert est.dispatches == sum(1 for s in compiled.segments if s.device == "ane")
    assert est.bottleneck in ("compute", "memory", "dispatch", "cpu")


def test_the_compile_report_holds_the_estimate(compiled):
    report = compiled.report["estimate"]
    direct = estimate_compiled(compiled)
    assert report["target"] == "m4"
    assert report["total_ms"] == pytest.approx(direct.total_ms)
    assert report["summary"] == direct.summary()
    assert report["summary"].startswith("estimated ") and "-bound" in report["summary"]


def test_another_chip_of_the_same_generation_differs_only_by_its_figures(compiled):
    m4, m4max = estimate_compiled(compiled), estimate_compiled(compiled, "m4-max")
    assert m4max.target == "m4-max"
    assert m4max.partitions == m4.partitions and m4max.peak_onchip_bytes == m4.peak_onchip_bytes
    # same engine figures; the M4 Max only has more unified-memory bandwidth (CPU, transfers)
    assert m4max.total_s <= m4.total_s
