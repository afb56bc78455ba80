"""Normalisations and softmax: batch/layer/group/instance/RMS norm, softmax, log-softmax."""

from __future__ import annotations

import numpy as np

from anekit.ir.ops._infer import Attrs, Types, float_only, normalize_axis
from anekit.ir.registry import Attr, InferError, TensorType, declare


def _softmax_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    float_only(ins)
    normalize_axis(attrs["axis"], max(ins[0].rank, 1))
    return [ins[0]]


@declare(
    "softmax",
    inputs=("x",),
    attrs=(Attr("axis", "int", -1),),
    infer=_softmax_infer,
    layer_type="softmax",
)
def softmax(x, axis):
    """e^x / sum(e^x) along axis (max-subtracted)"""
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(m), m, 0))
    return e / np.sum(e, axis=axis, keepdims=True)


@declare(
    "log_softmax",
    inputs=("x",),
    attrs=(Attr("axis", "int", -1),),
    infer=_softmax_infer,
)
def log_softmax(x, axis):
    """x - log(sum(e^x)) along axis"""
    m = np.max(x, axis=axis, keepdims=True)
    shifted = x - np.where(np.isfinite(m), m, 0)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _channel_param_check(ins: Types, channels: int, names: tuple[str, ...], first: int) -> None:
    for name, t in zip(names, ins[first:], strict=False):
        if t is not None and t.numel != channels:
            raise InferError(
                f"{name} has {t.numel} elements, expected {channels} (one per channel)"
            )


def _batch_norm_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    float_only(ins, range(len(ins)))
    x = ins[0]
    if x.rank < 2:
        raise InferError("batch_norm input needs rank >= 2 (N, C, ...)")
    _channel_param_check(ins, x.shape[1], ("scale", "bias", "mean", "var"), 1)
    return [x]


def _per_channel(p: np.ndarray, rank: int) -> np.ndarray:
    return p.reshape((1, -1) + (1,) * (rank - 2))


@declare(
    "batch_norm",
    inputs=("x", "scale", "bias", "mean", "var"),
    attrs=(Attr("epsilon", "float", 1e-5),),
    infer=_batch_norm_infer,
)
def batch_norm(x, scale, bias, mean, var, epsilon):
    """inference batch norm: (x - mean) / sqrt(var + eps) * scale + bias, per channel (axis 1)"""
    r = x.ndim
    inv = scale / np.sqrt(var + np.float32(epsilon))
    return (x - _per_channel(mean, r)) * _per_channel(inv, r) + _per_channel(bias, r)


def _instance_norm_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    float_only(ins, range(len(ins)))
    x = ins[0]
    if x.rank < 3:
        raise InferError("instance_norm input needs rank >= 3 (N, C, spatial...)")
    _channel_param_check(ins, x.shape[1], ("scale", "bias"), 1)
    return [x]


@declare(
    "instance_norm",
    layer_type="norm",
    inputs=("x", "scale", "bias"),
    attrs=(Attr("epsilon", "float", 1e-5),),
    infer=_instance_norm_infer,
)
def instance_norm(x, scale, bias, epsilon):
    """normalise each (n, c) plane over its spatial axes, then per-channel scale and bias"""
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.float32(epsilon))
    return y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)


def _layer_norm_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    float_only(ins, range(len(ins)))
    x = ins[0]
    axis = normalize_axis(attrs["axis"], x.rank)
    norm_shape = x.shape[axis:]
    for name, t in zip(("scale", "bias"), ins[1:], strict=False):
        if t is not None:
            try:
                np.broadcast_shapes(t.shape, norm_shape)
            except ValueError:
                raise InferError(
                    f"{name} shape {list(t.shape)} does not broadcast to {list(norm_shape)}"
                ) from None
            if (
                len(t.shape) > len(norm_shape)
                or np.broadcast_shapes(t.shape, norm_shape) != norm_shape
            ):
                raise InferError(
                    f"{name} shape {list(t.shape)} does not broadcast to {list(norm_shape)}"
                )
    return [x]


@declare(
    "layer_norm",
    inputs=("x", "scale?", "bias?"),
    attrs=(Attr("axis", "int", -1), Attr("epsilon", "float", 1e-5)),
    infer=_layer_norm_infer,
)
def layer_norm(x, scale, bias, axis, epsilon):
    """normalise over axes [axis, rank), then scale and bias"""
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.float32(epsilon))
    if scale is not None:
        y = y * scale
    if bias is not None:
        y = y + bias
    return y


@declare(
    "rms_norm",
    inputs=("x", "scale?"),
    attrs=(Attr("axis", "int", -1), Attr("epsilon", "float", 1e-5)),
    infer=_layer_norm_infer,
)
def rms_norm(x, scale, axis, epsilon):
    """x / sqrt(mean(x^2) + eps) over axes [axis, rank), then scale"""
    axes = tuple(range(axis % x.ndim, x.ndim))
    y = x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + np.float32(epsilon))
    return y * scale if scale is not None else y


def _group_norm_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    float_only(ins, range(len(ins)))
    x = ins[0]
    g = attrs["num_groups"]
    if x.rank < 3:
        raise InferError("group_norm input needs rank >= 3 (N, C, spatial...)")
    if g <= 0 or x.shape[1] % g:
        raise InferError(f"{x.shape[1]} channels do not divide into {g} groups")
    _channel_param_check(ins, x.shape[1], ("scale", "bias"), 1)
    return [x]


@declare(
    "group_norm",
    inputs=("x", "scale", "bias"),
    attrs=(Attr("num_groups", "int"), Attr("epsilon", "float", 1e-5)),
    infer=_group_norm_infer,
)
def group_norm(x, scale, bias, num_groups, epsilon):
    """normalise each group of channels over (channels in group, spatial), then per-channel affine"""
    n, c = x.shape[:2]
    g = x.reshape(n, num_groups, -1)
    mean = g.mean(axis=-1, keepdims=True)
    var = ((g - mean) ** 2).mean(axis=-1, keepdims=True)
    y = ((g - mean) / np.sqrt(var + np.float32(epsilon))).reshape(x.shape)
    return y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)


def _lrn_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    float_only(ins)
    if ins[0].rank < 3:
        raise InferError(f"lrn input needs rank >= 3 (N, C, spatial...), got {ins[0]}")
    if attrs["size"] <= 0:
        raise InferError(f"size must be positive, got {attrs['size']}")
    return [ins[0]]


@declare(
    "lrn",
    inputs=("x",),
    attrs=(
        Attr("size", "int"),
        Attr("alpha", "float", 1e-4),
        Attr("beta", "float", 0.75),
        Attr("bias", "float", 1.0),
    ),
    infer=_lrn_infer,
)
def lrn(x, size, alpha, beta, bias):
    """local response norm across channels: x / (bias + alpha/size * sum of x^2 over the window)^beta"""
    before, after = (
        (size - 1) // 2,
        size // 2,
    )  # window [c - floor((size-1)/2), c + ceil((size-1)/2)]
    sq = np.pad(x * x, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    window = np.zeros_like(x)
    for k in range(size):  # one shifted slice per window offset
        window += sq[:, k : k + c]
    return x / (np.float32(bias) + np.float32(alpha / size) * window) ** np.float32(beta)
