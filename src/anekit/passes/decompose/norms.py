"""Normalisations decomposed: layer/RMS, group, instance and batch norm, softmax, log_softmax, LRN."""

from __future__ import annotations

import numpy as np

from anekit.ir.dtypes import FP16_MAX
from anekit.ir.graph import Node
from anekit.passes.decompose.emit import Emit
from anekit.passes.rewrite import Rewriter, rule

LRN_MAX_CHANNELS = 4096  # the banded window weight is channels x channels


# The deviations are divided by their largest magnitude before they are squared, so no
# intermediate exceeds 1 in magnitude however large the input (a plain d*d overflows fp16
# once |d| > 256: a residual stream at std 100 already does). The peak is floored at
# SCALE_FLOOR so a constant row divides by a finite number: 1/peak <= 128 and
# eps/peak^2 <= 16384 * eps stay finite in fp16. It is capped at fp16's largest finite value
# so an infinite element scales to infinity (inf / inf would be NaN): an L2 norm over it is
# then infinite, as in fp32. The math is exact for any peak:
# (d/p) / sqrt(mean((d/p)^2) + eps/p^2) = d / sqrt(mean(d^2) + eps).
SCALE_FLOOR = 2.0**-7


def peak_scaled(e: Emit, d: str, red: dict) -> tuple[str, str, str]:
    """(d / peak, 1 / peak, peak) with peak = max |d| over the reduced axes, clipped to
    [SCALE_FLOOR, FP16_MAX]."""
    peak = e("reduce_max", [e("abs", [d], tag="magnitude")], red, "peak")
    peak = e("clip", [peak], {"min": SCALE_FLOOR, "max": FP16_MAX}, tag="scale")
    inv = e("reciprocal", [peak], tag="inv_scale")
    return e("mul", [d, inv], tag="unit"), inv, peak  # |d / peak| <= 1


def normalize(e: Emit, x: str, axes: tuple[int, ...], eps: float, center: bool = True) -> str:
    """(x - mean) / sqrt(var + eps) over ``axes`` (or x / sqrt(mean(x^2) + eps) uncentred),
    computed on x scaled by its peak deviation so that it is fp16-safe at any input scale."""
    red = {"axes": axes, "keepdims": True}
    d = e("sub", [x, e("reduce_mean", [x], red, "mean")], tag="centered") if center else x
    u, inv, _ = peak_scaled(e, d, red)
    var = e("reduce_mean", [e("mul", [u, u], tag="square")], red, "var")
    # eps / peak^2 as (inv * eps) * inv: each partial product stays in fp16 range
    eps_u = e("mul", [e("mul", [inv, e.const(eps, "eps")], tag="eps_inv"), inv], tag="eps_scaled")
    std = e("sqrt", [e("add", [var, eps_u], tag="var_eps")], tag="std")
    return e("div", [u, std], tag="normalized")


def per_channel(e: Emit, name: str, rank: int) -> str:
    """A per-channel constant or value reshaped to broadcast over axis 1 of rank ``rank``."""
    shape = (1, -1) + (1,) * (rank - 2)
    c = e.rw.const(name)
    if c is not None:
        return e.rw.constant(c.reshape(shape), f"{e.node.name}/{name.rsplit('/', 1)[-1]}_c")
    return e(
        "reshape", [name], {"shape": (1, e.rw.value(name).numel) + (1,) * (rank - 2)}, "per_channel"
    )


@rule("layer_norm", "rms_norm")
def decompose_layer_norm(rw: Rewriter, node: Node) -> bool:
    e = Emit(rw, node)
    x = node.inputs[0]
    rank = rw.value(x).rank
    axes = tuple(range(node.attrs["axis"] % rank, rank))
    y = normalize(e, x, axes, node.attrs["epsilon"], center=node.op == "layer_norm")
    scale = node.inputs[1] if len(node.inputs) > 1 else ""
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    if scale:
        y = e("mul", [y, scale], tag="scaled")
    if bias:
        y = e("add", [y, bias], tag="shifted")
    return e.done(
        y, f"{node.op} as fp16-safe reductions (scaled by the peak deviation), sqrt and div"
    )


@rule("group_norm")
def decompose_group_norm(rw: Rewriter, node: Node) -> bool:
    e = Emit(rw, node)
    x, scale, bias = node.inputs
    shape = rw.shape(x)
    groups = node.attrs["num_groups"]
    grouped = e(
        "reshape", [x], {"shape": (shape[0], groups, int(np.prod(shape[1:])) // groups)}, "grouped"
    )
    y = normalize(e, grouped, (2,), node.attrs["epsilon"])
    y = e("reshape", [y], {"shape": shape}, "ungrouped")
    y = e("mul", [y, per_channel(e, scale, len(shape))], tag="scaled")
    y = e("add", [y, per_channel(e, bias, len(shape))], tag="shifted")
    return e.done(y, "group_norm as reshape, an fp16-safe normalisation and a per-channel affine")


@rule("instance_norm")
def decompose_instance_norm(rw: Rewriter, node: Node) -> bool:
    e = Emit(rw, node)
    x, scale, bias = node.inputs
    rank = rw.value(x).rank
    y = normalize(e, x, tuple(range(2, rank)), node.attrs["epsilon"])
    y = e("mul", [y, per_channel(e, scale, rank)], tag="scaled")
    y = e("add", [y, per_channel(e, bias, rank)], tag="shifted")
    return e.done(y, "instance_norm (not native on this target) as an fp16-safe normalisation")


@rule("batch_norm")
def decompose_batch_norm(rw: Rewriter, node: Node) -> bool:
    """An unfolded BatchNorm is a per-channel affine (it then fuses as a gain/offset)."""
    e = Emit(rw, node)
    x, gamma, beta, mean, var = node.inputs
    rank = rw.value(x).rank
    params = [rw.const(p) for p in (gamma, beta, mean, var)]
    if all(p is not None for p in params):
        g, b, m, v = (p.astype(np.float64) for p in params)
        s = g / np.sqrt(v + node.attrs["epsilon"])
        shape = (1, -1) + (1,) * (rank - 2)
        y = e("mul", [x, e.const(s.reshape(shape), "gain")], tag="gain")
        y = e("add", [y, e.const((b - m * s).reshape(shape), "offset")], tag="offset")
    else:
        std = e(
            "sqrt",
            [e("add", [per_channel(e, var, rank), e.const(node.attrs["epsilon"], "eps")])],
            tag="std",
        )
        y = e(
            "div",
            [e("sub", [x, per_channel(e, mean, rank)], tag="centered"), std],
            tag="normalized",
        )
        y = e(
            "add",
            [e("mul", [y, per_channel(e, gamma, rank)], tag="scaled"), per_channel(e, beta, rank)],
            tag="shifted",
        )
    return e.done(y, "batch_norm as a per-channel gain and offset")


def _softmax_parts(e: Emit, x: str, axis: int) -> tuple[str, str]:
    """(x - max, sum(exp(x - max))) along ``axis``."""
    red = {"axes": (axis,), "keepdims": True}
    shifted = e("sub", [x, e("reduce_max", [x], red, "max")], tag="shifted")
    exp = e("exp", [shifted])
    return shifted, e("reduce_sum", [exp], red, "sum")


@rule("softmax")
def decompose_softmax(rw: Rewriter, node: Node) -> bool:
    e = Emit(rw, node)
    shifted, total = _softmax_parts(e, node.inputs[0], node.attrs["axis"])
    y = e("div", [e("exp", [shifted], tag="exp2"), total], tag="normalized")
    return e.done(
        y, "softmax (not native on this target) as reduce_max, sub, exp, reduce_sum and div"
    )


@rule("log_softmax")
def decompose_log_softmax(rw: Rewriter, node: Node) -> bool:
    e = Emit(rw, node)
    shifted, total = _softmax_parts(e, node.inputs[0], node.attrs["axis"])
    y = e("sub", [shifted, e("log", [total])], tag="normalized")
    return e.done(y, "log_softmax as reduce_max, sub, exp, reduce_sum, log and sub")


@rule("lrn")
def decompose_lrn(rw: Rewriter, node: Node) -> bool:
    """Local response norm: the window sum of squares over channels is a 1x1 conv with a
    banded weight, then x * exp(-beta * log(bias + alpha/size * sum))."""
    x = node.inputs[0]
    shape = rw.shape(x)
    c = shape[1]
    if c > LRN_MAX_CHANNELS:
        return False
    e = Emit(rw, node)
    size, alpha, beta, bias = (node.attrs[k] for k in ("size", "alpha", "beta", "bias"))
    before, after = (size - 1) // 2, size // 2
    k = np.arange(c)
    band = (k[None, :] >= k[:, None] - before) & (k[None, :] <= k[:, None] + after)
    weight = e.const(band.reshape((c, c) + (1,) * (len(shape) - 2)), "window")
    window = e("conv", [e("mul", [x, x], tag="square"), weight], tag="window_sum")
    scaled = e("mul", [window, e.const(alpha / size, "alpha")], tag="scaled")
    base = e("add", [scaled, e.const(bias, "bias")], tag="base")
    power = e("mul", [e("log", [base]), e.const(-beta, "neg_beta")], tag="power")
    y = e("mul", [x, e("exp", [power], tag="factor")], tag="normalized")
    return e.done(y, "lrn as a banded 1x1 conv over channels, log, exp and multiplies")
