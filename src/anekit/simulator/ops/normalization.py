"""Normalization MIL ops: layer_norm, batch_norm, instance_norm, l2_norm, local_response_norm.

Statistics are computed in float32 (biased variance, as the definitions write it); the result
is rounded to fp16 once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..registry import FLOAT, SimOp, op
from ._util import F32, as_float, as_int, as_ints, axes_of


def _channel(values: Any, x: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=F32)
    if array.shape != (x.shape[1],):
        raise ValueError(f"{name} has shape {list(array.shape)}; it must be [{x.shape[1]}]")
    return array.reshape((1, -1) + (1,) * (x.ndim - 2))


def layer_norm(
    x: np.ndarray,
    axes: Any = None,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    epsilon: Any = 1e-5,
) -> np.ndarray:
    chosen = tuple(range(x.ndim)) if axes is None else axes_of(as_ints(axes), x.ndim)
    normalized = tuple(x.shape[i] if i in chosen else 1 for i in range(x.ndim))
    mean = np.mean(x, axis=chosen, keepdims=True, dtype=F32)
    centered = x - mean
    variance = np.mean(centered * centered, axis=chosen, keepdims=True, dtype=F32)
    out = centered / np.sqrt(variance + F32(as_float(epsilon)))
    want = [x.shape[i] for i in sorted(chosen)]
    for name, values in (("gamma", gamma), ("beta", beta)):
        if values is not None and list(values.shape) != want:
            raise ValueError(f"{name} has shape {list(values.shape)}; it must be {want}")
    if gamma is not None:
        out *= gamma.astype(F32, copy=False).reshape(normalized)
    if beta is not None:
        out += beta.astype(F32, copy=False).reshape(normalized)
    return out


def batch_norm(
    x: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    epsilon: Any = 1e-5,
) -> np.ndarray:
    if not 3 <= x.ndim <= 5:
        raise ValueError(f"x must be rank 3 to 5 [N, C, *D], not {list(x.shape)}")
    scale = np.reciprocal(np.sqrt(_channel(variance, x, "variance") + F32(as_float(epsilon))))
    out = (x - _channel(mean, x, "mean")) * scale
    if gamma is not None:
        out *= _channel(gamma, x, "gamma")
    if beta is not None:
        out += _channel(beta, x, "beta")
    return out


def instance_norm(
    x: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    epsilon: Any = 1e-5,
) -> np.ndarray:
    if not 3 <= x.ndim <= 5:
        raise ValueError(f"x must be rank 3 to 5 [N, C, *D], not {list(x.shape)}")
    spatial = tuple(range(2, x.ndim))
    mean = np.mean(x, axis=spatial, keepdims=True, dtype=F32)
    centered = x - mean
    variance = np.mean(centered * centered, axis=spatial, keepdims=True, dtype=F32)
    out = centered / np.sqrt(variance + F32(as_float(epsilon)))
    if gamma is not None:
        out *= _channel(gamma, x, "gamma")
    if beta is not None:
        out += _channel(beta, x, "beta")
    return out


def l2_norm(x: np.ndarray, epsilon: Any = 1e-6) -> np.ndarray:
    if x.ndim < 3:
        raise ValueError(f"x must be rank 3 or more, not {x.ndim}")
    batch = x.shape[:-3]
    flat = x.reshape(int(np.prod(batch, dtype=np.int64)), -1)
    total = np.sum(flat * flat, axis=1, keepdims=True, dtype=F32) + F32(as_float(epsilon))
    return (flat / np.sqrt(total)).reshape(x.shape)


def local_response_norm(
    x: np.ndarray, size: Any, alpha: Any = 1e-4, beta: Any = 0.75, k: Any = 1.0
) -> np.ndarray:
    if not 3 <= x.ndim <= 5:
        raise ValueError(f"x must be rank 3 to 5 [N, C, *D], not {list(x.shape)}")
    n = as_int(size)
    if n < 1:
        raise ValueError(f"size must be positive, not {n}")
    channels = x.shape[1]
    squares = x * x
    # window [c - before, c + after] (ONNX's LRN); beyond the channels it sums zeros
    before = min((n - 1) // 2, channels)
    after = min(n - 1 - (n - 1) // 2, channels)
    running = np.cumsum(squares, axis=1, dtype=np.float64)  # float64: no cancellation
    running = np.concatenate([np.zeros_like(running[:, :1]), running], axis=1)
    top = np.minimum(np.arange(channels) + after + 1, channels)
    bottom = np.maximum(np.arange(channels) - before, 0)
    window = (np.take(running, top, axis=1) - np.take(running, bottom, axis=1)).astype(F32)
    scale = F32(as_float(k)) + F32(as_float(alpha) / n) * window
    return x / np.power(scale, F32(as_float(beta)))


OPS: tuple[SimOp, ...] = (
    op("layer_norm", "x:T axes?!:int32 gamma?!:U beta?!:U epsilon?!:U", "T", layer_norm,
       T=FLOAT, U=FLOAT),
    op("batch_norm", "x:T mean!:U variance!:U gamma?!:U beta?!:U epsilon?!:U", "T",
       batch_norm, T=FLOAT, U=FLOAT),
    op("instance_norm", "x:T gamma?!:U beta?!:U epsilon?!:U", "T", instance_norm,
       T=FLOAT, U=FLOAT),
    op("l2_norm", "x:T epsilon?!:U", "T", l2_norm, T=FLOAT, U=FLOAT),
    op("local_response_norm", "x:T size!:int32 alpha?!:U beta?!:U k?!:U", "T",
       local_response_norm, T=FLOAT, U=FLOAT),
)  # fmt: skip
