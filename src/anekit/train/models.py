"""Small trainable models built with the builder (examples and benchmarks), initialised as
torch initialises nn.Linear and nn.Conv2d (uniform within 1/sqrt(fan_in)), so that a torch
twin can start from the very same numbers (`weights` of each)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import anekit
from anekit.frontend.builder import ops
from anekit.frontend.builder.tensor import record


def _uniform(rng: np.random.Generator, shape: Sequence[int], fan_in: int) -> np.ndarray:
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def mlp_weights(sizes: Sequence[int], seed: int = 0) -> dict[str, np.ndarray]:
    """``w{i}`` [in, out] and ``b{i}`` per layer."""
    rng = np.random.default_rng(seed)
    out = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        out[f"w{i}"] = _uniform(rng, (a, b), a)
        out[f"b{i}"] = _uniform(rng, (b,), a)
    return out


def mlp(
    batch: int, weights: dict[str, np.ndarray], input_shape: Sequence[int] = ()
) -> anekit.Graph:
    """Linear layers with ReLU between; the input is flattened from ``input_shape``."""
    shape = tuple(input_shape) or (weights["w0"].shape[0],)
    x = anekit.input("x", (batch, *shape))
    h = ops.reshape(x, (batch, weights["w0"].shape[0])) if len(shape) > 1 else x
    layers = len(weights) // 2
    for i in range(layers):
        w = anekit.parameter(weights[f"w{i}"], name=f"w{i}")
        h = h @ w + anekit.parameter(weights[f"b{i}"], name=f"b{i}")
        if i < layers - 1:
            h = ops.relu(h)
    return anekit.graph([h], name="mlp")


def cnn_weights(channels: Sequence[int] = (1, 16, 32), classes: int = 10, side: int = 28,
                seed: int = 0) -> dict[str, np.ndarray]:  # fmt: skip
    """3x3 convolutions ``c{i}``/``cb{i}`` (each followed by ReLU and 2x2 max pooling), then a
    linear classifier ``fc``/``fcb``."""
    rng = np.random.default_rng(seed)
    out = {}
    for i, (a, b) in enumerate(zip(channels[:-1], channels[1:], strict=True)):
        out[f"c{i}"] = _uniform(rng, (b, a, 3, 3), a * 9)
        out[f"cb{i}"] = _uniform(rng, (b,), a * 9)
        side //= 2
    features = channels[-1] * side * side
    out["fc"] = _uniform(rng, (features, classes), features)
    out["fcb"] = _uniform(rng, (classes,), features)
    return out


def cnn(batch: int, weights: dict[str, np.ndarray], side: int = 28) -> anekit.Graph:
    convs = sum(1 for k in weights if k.startswith("c") and not k.startswith("cb"))
    cin = weights["c0"].shape[1]
    x = anekit.input("x", (batch, cin, side, side))
    h = x
    for i in range(convs):
        w = anekit.parameter(weights[f"c{i}"], name=f"c{i}")
        b = anekit.parameter(weights[f"cb{i}"], name=f"cb{i}")
        h = ops.relu(record("conv", [h, w, b], {"pads": (1, 1, 1, 1)}))
        h = record("max_pool", [h], {"kernel": (2, 2), "strides": (2, 2)})
    h = ops.reshape(h, (batch, weights["fc"].shape[0]))
    h = h @ anekit.parameter(weights["fc"], name="fc") + anekit.parameter(
        weights["fcb"], name="fcb"
    )
    return anekit.graph([h], name="cnn")
