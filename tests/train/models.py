"""Small models for the training tests, built with anekit's builder and mirrored in torch."""

from __future__ import annotations

import numpy as np

import anekit
from anekit.frontend.builder import ops


def digits(n_train: int = 1024):
    """scikit-learn's digits (1797 8x8 images shipped with the package), scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    return {"x": x[:n_train], "target": y[:n_train]}, {"x": x[n_train:], "target": y[n_train:]}


def mlp_weights(sizes=(64, 32, 10), seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        bound = 1 / np.sqrt(a)
        out[f"w{i}"] = rng.uniform(-bound, bound, (a, b)).astype(np.float32)
        out[f"b{i}"] = rng.uniform(-bound, bound, (b,)).astype(np.float32)
    return out


def mlp(batch: int, weights: dict[str, np.ndarray], dropout: float = 0.0) -> anekit.Graph:
    x = anekit.input("x", (batch, weights["w0"].shape[0]))
    h = x
    layers = len(weights) // 2
    for i in range(layers):
        h = h @ anekit.parameter(weights[f"w{i}"], name=f"w{i}") + anekit.parameter(
            weights[f"b{i}"], name=f"b{i}"
        )
        if i < layers - 1:
            h = ops.relu(h)
            if dropout:
                from anekit.train import dropout as drop

                h = drop(h, dropout, name=f"drop{i}")
    return anekit.graph([h], name="mlp")

