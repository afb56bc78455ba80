"""Small trainable models built with the builder (examples and benchmarks), initialised as
torch initialises nn.Linear and nn.Conv2d (uniform within 1/sqrt(fan_in)), so that a torch
twin can start from the very same numbers (`weights` of each)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import anekit
from anekit.frontend.builder import ops
from anekit.frontend.builder.tensor import record
from anekit.ir.dtypes import MASK_VALUE


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


def char_transformer_weights(vocab: int, d: int = 64, layers: int = 2, seq: int = 64,
                             seed: int = 0) -> dict[str, np.ndarray]:  # fmt: skip
    """A pre-norm decoder: token and position embeddings, per layer q/k/v/o projections and
    a 4x GELU MLP, a final norm and an untied classifier."""
    rng = np.random.default_rng(seed)
    w = {"tok": (rng.standard_normal((vocab, d)) * 0.02).astype(np.float32),
         "pos": (rng.standard_normal((seq, d)) * 0.02).astype(np.float32)}  # fmt: skip
    for i in range(layers):
        for name in ("q", "k", "v", "o"):
            w[f"l{i}.{name}"] = _uniform(rng, (d, d), d)
        w[f"l{i}.ln1"], w[f"l{i}.ln2"] = np.ones(d, np.float32), np.ones(d, np.float32)
        w[f"l{i}.up"], w[f"l{i}.upb"] = _uniform(rng, (d, 4 * d), d), np.zeros(4 * d, np.float32)
        w[f"l{i}.down"], w[f"l{i}.downb"] = (
            _uniform(rng, (4 * d, d), 4 * d),
            np.zeros(d, np.float32),
        )
    w["lnf"] = np.ones(d, np.float32)
    w["head"] = _uniform(rng, (d, vocab), d)
    return w


def char_transformer(
    batch: int, seq: int, weights: dict[str, np.ndarray], heads: int = 4
) -> anekit.Graph:
    """Logits [batch, seq, vocab] for token ids [batch, seq] (causal self-attention)."""
    vocab, d = weights["tok"].shape
    layers = sum(1 for k in weights if k.endswith(".q"))
    hd = d // heads
    p = {k: anekit.parameter(v, name=k) for k, v in weights.items()}
    ids = anekit.input("ids", (batch, seq), "int32")
    pos = ops.slice(p["pos"], [0], [seq], [0]) if weights["pos"].shape[0] != seq else p["pos"]
    h = ops.gather(p["tok"], ids, axis=0) + pos
    mask = np.triu(np.full((seq, seq), MASK_VALUE, np.float32), 1)  # fp16-safe, never -inf
    causal = anekit.constant(mask, name="causal_mask")

    def split(t):  # [B, T, d] -> [B, H, T, hd]
        return ops.transpose(ops.reshape(t, (batch, seq, heads, hd)), (0, 2, 1, 3))

    for i in range(layers):
        x = ops.layer_norm(h, p[f"l{i}.ln1"], None)
        q, k, v = (split(x @ p[f"l{i}.{n}"]) for n in ("q", "k", "v"))
        scores = q @ ops.transpose(k, (0, 1, 3, 2)) * float(1 / np.sqrt(hd)) + causal
        att = ops.softmax(scores, -1) @ v
        att = ops.reshape(ops.transpose(att, (0, 2, 1, 3)), (batch, seq, d))
        h = h + att @ p[f"l{i}.o"]
        x = ops.layer_norm(h, p[f"l{i}.ln2"], None)
        x = ops.gelu(x @ p[f"l{i}.up"] + p[f"l{i}.upb"], approximate="tanh")
        h = h + x @ p[f"l{i}.down"] + p[f"l{i}.downb"]
    h = ops.layer_norm(h, p["lnf"], None)
    return anekit.graph([h @ p["head"]], name="char_transformer")
