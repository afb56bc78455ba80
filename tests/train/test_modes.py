"""Training-mode rewrites against torch: batch statistics (and running-stat updates),
trained convolutions as patches and matmuls, fp16 clamps."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import anekit
from anekit.frontend.builder.tensor import record
from anekit.train.modes import batch_statistics, clamp_for_fp16, convs_as_matmuls


def test_batch_norm_uses_batch_statistics_and_updates_running_ones():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32) * 2 + 1
    mean, var = np.zeros(3, np.float32), np.ones(3, np.float32)
    scale, bias = (
        rng.standard_normal(3).astype(np.float32),
        rng.standard_normal(3).astype(np.float32),
    )
    xi = anekit.input("x", x.shape)
    y = record("batch_norm", [xi, anekit.constant(scale, name="s"), anekit.constant(bias, name="b"),
                              anekit.constant(mean, name="rm"), anekit.constant(var, name="rv")])  # fmt: skip
    graph, updates = batch_statistics(anekit.graph([y]))
    assert updates == {"rm": "rm.next", "rv": "rv.next"}
    out = graph.run({"x": x})
    rm, rv = torch.tensor(mean), torch.tensor(var)
    ref = F.batch_norm(torch.tensor(x), rm, rv, torch.tensor(scale), torch.tensor(bias), True, 0.1)
    np.testing.assert_allclose(out[graph.output_names[0]], ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(out["rm.next"], rm.numpy(), atol=1e-6)
    np.testing.assert_allclose(out["rv.next"], rv.numpy(), atol=1e-5)


def test_trained_convolution_as_patches_and_matmul():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    attrs = {"strides": (2, 1), "pads": (1, 0, 1, 1), "dilations": (1, 2), "group": 2}
    xi = anekit.input("x", x.shape)
    y = record("conv", [xi, anekit.constant(w, name="w"), anekit.constant(b, name="b")], attrs)
    graph = anekit.graph([y])
    rewritten = convs_as_matmuls(graph, ["w"])
    assert "conv" in {n.op for n in rewritten.nodes} and "matmul" in {n.op for n in rewritten.nodes}
    assert all(n.inputs[1] != "w" for n in rewritten.nodes if n.op == "conv")
    ref = F.conv2d(F.pad(torch.tensor(x), (0, 1, 1, 1)), torch.tensor(w), torch.tensor(b),
                   stride=(2, 1), dilation=(1, 2), groups=2)  # fmt: skip
    np.testing.assert_allclose(rewritten.run({"x": x})[rewritten.output_names[0]], ref.numpy(),
                               atol=1e-5)  # fmt: skip


def test_fp16_clamp_before_softmax_and_norms():
    xi = anekit.input("x", (2, 3))
    graph = clamp_for_fp16(anekit.graph([anekit.ops.softmax(xi * 1e6)]))
    clip = [n for n in graph.nodes if n.op == "clip"]
    assert len(clip) == 1 and clip[0].attrs["max"] == 65504.0
    out = graph.run({"x": np.array([[1, 0, -1], [0, 0, 0]], np.float32)})[graph.output_names[0]]
    assert np.isfinite(out).all()


def test_batch_norm_training_gradients_match_torch():
    from anekit.frontend.builder import ops
    from anekit.train import grad

    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 2, 4, 4)).astype(np.float32)
    r = rng.standard_normal(x.shape).astype(np.float32)
    scale, bias = (
        rng.standard_normal(2).astype(np.float32),
        rng.standard_normal(2).astype(np.float32),
    )
    xi, ri = anekit.input("x", x.shape), anekit.input("r", x.shape)
    y = record("batch_norm", [xi, anekit.parameter(scale, name="s"), anekit.parameter(bias, name="b"),
                              anekit.constant(np.zeros(2, np.float32), name="rm"),
                              anekit.constant(np.ones(2, np.float32), name="rv")])  # fmt: skip
    graph, _ = batch_statistics(anekit.graph([ops.reduce_sum(y * ri, keepdims=False)]))
    out = grad(graph, graph.output_names[0], ["x", "s", "b"]).run({"x": x, "r": r})
    tx, ts, tb = (torch.tensor(a.astype(np.float64), requires_grad=True) for a in (x, scale, bias))
    ref = F.batch_norm(tx, None, None, ts, tb, training=True)
    (ref * torch.tensor(r, dtype=torch.float64)).sum().backward()
    for name, t in (("x", tx), ("s", ts), ("b", tb)):
        np.testing.assert_allclose(out[f"{name}_grad"], t.grad.numpy(), rtol=1e-3, atol=1e-5)
