"""Activation MIL ops: relu family, sigmoid/tanh family, gelu, softplus, prelu, softmax (iOS 15-18 defs)."""

from __future__ import annotations

import math

import numpy as np

from .. import window_kernels
from ..registry import FLOAT, SimOp, op
from ._util import F32, as_int, as_str, axis_of
from .elementwise import erf64

_SQRT_2_OVER_PI = F32(np.sqrt(2.0 / np.pi))


def relu(x: np.ndarray) -> np.ndarray:
    out = window_kernels.clamp(x, 0.0, math.inf)  # numpy's maximum in one C pass
    return np.maximum(x, F32(0)) if out is None else out


def relu6(x: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x, F32(0)), F32(6))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(F32(1) + np.exp(-x))


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


def softplus(x: np.ndarray) -> np.ndarray:
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, F32(0))


def softsign(x: np.ndarray) -> np.ndarray:
    return x / (F32(1) + np.abs(x))


def gelu(x: np.ndarray, mode: str = "EXACT") -> np.ndarray:
    # Written without the cancellation in 1 + erf(.) and 1 + tanh(.) for negative x, which in
    # fp32 would cost several fp16 ulps of the (tiny) result: EXACT in float64, TANH as
    # 0.5 x (1 + tanh(z)) = x * sigmoid(2 z).
    mode = as_str(mode)
    if mode == "EXACT":
        wide = x.astype(np.float64)
        return (0.5 * wide * (1.0 + erf64(wide / np.sqrt(2.0)))).astype(F32)
    if mode == "TANH_APPROXIMATION":
        inner = _SQRT_2_OVER_PI * (x + F32(0.044715) * x * x * x)
        return x * sigmoid(F32(2) * inner)
    if mode == "SIGMOID_APPROXIMATION":
        return x * sigmoid(F32(1.702) * x)
    raise ValueError(f"unknown mode {mode!r} (EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION)")


def clamped_relu(x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    positive = np.minimum(np.maximum(x, F32(0)), beta)
    negative = np.minimum(np.minimum(x, F32(0)) * alpha, beta)
    return positive + negative


def elu(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, F32(0))))


def leaky_relu(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, x, x * alpha)


def linear_activation(x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    return alpha * x + beta


def scaled_tanh(x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    return alpha * np.tanh(x * beta)


def sigmoid_hard(x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(alpha * x + beta, F32(0)), F32(1))


def thresholded_relu(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.where(x >= alpha, x, F32(0))


def _per_channel(
    x: np.ndarray, values: np.ndarray, name: str, ranks: tuple[int, ...]
) -> np.ndarray:
    """``values`` (shape [C]) shaped to broadcast along axis 1 of ``x``."""
    if x.ndim not in ranks:
        raise ValueError(f"x must have rank {' or '.join(map(str, ranks))}, not {x.ndim}")
    if values.ndim != 1 or values.shape[0] != x.shape[1]:
        raise ValueError(
            f"{name} has shape {list(values.shape)}; it must be [{x.shape[1]}] (x's channels)"
        )
    return values.reshape((1, -1) + (1,) * (x.ndim - 2))


def prelu(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = _per_channel(x, alpha, "alpha", (3, 4, 5))
    return np.maximum(x, F32(0)) + np.minimum(x, F32(0)) * a


def softplus_parametric(x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    ranks = tuple(range(3, 33))
    a = _per_channel(x, alpha, "alpha", ranks)
    b = _per_channel(x, beta, "beta", ranks)
    return a * softplus(x * b)


def softmax(x: np.ndarray, axis: np.ndarray | int = -1) -> np.ndarray:
    ax = axis_of(as_int(axis), x.ndim)
    shifted = x - np.max(x, axis=ax, keepdims=True)
    e = np.exp(shifted)
    e /= np.sum(e, axis=ax, keepdims=True)
    return e


OPS: tuple[SimOp, ...] = (
    op("relu", "x:T", "T", relu, exact=True, T=FLOAT),
    op("relu6", "x:T", "T", relu6, exact=True, T=FLOAT),
    op("sigmoid", "x:T", "T", sigmoid, T=FLOAT),
    op("silu", "x:T", "T", silu, T=FLOAT),
    op("softplus", "x:T", "T", softplus, T=FLOAT),
    op("softsign", "x:T", "T", softsign, T=FLOAT),
    op("gelu", "x:T mode?!:string", "T", gelu, T=FLOAT),
    op("clamped_relu", "x:T alpha!:U beta!:U", "T", clamped_relu, T=FLOAT, U=FLOAT),
    op("elu", "x:T alpha!:U", "T", elu, T=FLOAT, U=FLOAT),
    op("leaky_relu", "x:T alpha!:U", "T", leaky_relu, T=FLOAT, U=FLOAT),
    op("linear_activation", "x:T alpha!:U beta!:U", "T", linear_activation, T=FLOAT, U=FLOAT),
    op("prelu", "x:T alpha!:U", "T", prelu, T=FLOAT, U=FLOAT),
    op("scaled_tanh", "x:T alpha!:U beta!:U", "T", scaled_tanh, T=FLOAT, U=FLOAT),
    op("sigmoid_hard", "x:T alpha!:U beta!:U", "T", sigmoid_hard, T=FLOAT, U=FLOAT),
    op("softplus_parametric", "x:T alpha!:U beta!:U", "T", softplus_parametric,
       T=FLOAT, U=FLOAT),
    op("thresholded_relu", "x:T alpha!:U", "T", thresholded_relu, exact=True, T=FLOAT, U=FLOAT),
    op("softmax", "x:T axis?!:int32", "T", softmax, T=FLOAT),
)  # fmt: skip
