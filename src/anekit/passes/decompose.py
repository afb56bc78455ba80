"""Decompose what the target lacks into ops it has: norms, gated softmax, attention, and friends.

Every decomposition is exact up to fp32 rounding except two, which change the math by
design and say so: exact GELU becomes its tanh form (max |error| 4.74e-4, at x = 2.70) and
a lone erf becomes tanh(a z + b z^3) (max |error| 3.58e-4); both bounds were measured
against math.erf on a 400,001-point grid over [-12, 12] (beyond it both forms agree
to fp32 precision). Attention masks use an additive -1e4 instead of -inf, so a fully
masked row gives a uniform distribution instead of NaN.
"""

from __future__ import annotations

import numpy as np

from anekit.ir.graph import Graph, Node
from anekit.passes.context import PassContext
from anekit.passes.rewrite import Rewriter, apply_rules, rule

GELU_TANH_MAX_ABS_ERROR = 4.74e-4
LRN_MAX_CHANNELS = 4096  # the banded window weight is channels x channels
ERF_TANH_MAX_ABS_ERROR = 3.58e-4
_ERF_A = float(2.0 / np.sqrt(np.pi))
_ERF_B = float(0.044715 * 2.0 * np.sqrt(2.0) * np.sqrt(2.0 / np.pi))


class _Emit:
    """Adds the nodes of one decomposition with the node's origin and a readable name."""

    def __init__(self, rw: Rewriter, node: Node):
        self.rw, self.node = rw, node
        self.dtype = (
            rw.value(node.inputs[0]).dtype.numpy if node.inputs and node.inputs[0] else np.float32
        )

    def __call__(self, op: str, inputs: list[str], attrs: dict | None = None, tag: str = "") -> str:
        n = self.node
        return self.rw.add(
            op, inputs, attrs, hint=f"{n.name}/{tag or op}", origin=n.origin, before=n
        )

    def const(self, value, tag: str) -> str:
        return self.rw.constant(np.asarray(value, dtype=self.dtype), f"{self.node.name}/{tag}")

    def done(self, y: str, what: str) -> bool:
        self.rw.ctx.event(self.node.origin, "decomposed", what)
        self.rw.replace_uses(self.node.output, y)
        return True


def _normalize(e: _Emit, x: str, axes: tuple[int, ...], eps: float, center: bool = True) -> str:
    """(x - mean) / sqrt(var + eps) over ``axes`` (or x / sqrt(mean(x^2) + eps) uncentred)."""
    red = {"axes": axes, "keepdims": True}
    d = e("sub", [x, e("reduce_mean", [x], red, "mean")], tag="centered") if center else x
    var = e("reduce_mean", [e("mul", [d, d], tag="square")], red, "var")
    std = e("sqrt", [e("add", [var, e.const(eps, "eps")], tag="var_eps")], tag="std")
    return e("div", [d, std], tag="normalized")


def _channel(e: _Emit, name: str, rank: int) -> str:
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
    e = _Emit(rw, node)
    x = node.inputs[0]
    rank = rw.value(x).rank
    axes = tuple(range(node.attrs["axis"] % rank, rank))
    y = _normalize(e, x, axes, node.attrs["epsilon"], center=node.op == "layer_norm")
    scale = node.inputs[1] if len(node.inputs) > 1 else ""
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    if scale:
        y = e("mul", [y, scale], tag="scaled")
    if bias:
        y = e("add", [y, bias], tag="shifted")
    return e.done(y, f"{node.op} as reduce_mean, sub, mul, sqrt and div")


@rule("group_norm")
def decompose_group_norm(rw: Rewriter, node: Node) -> bool:
    e = _Emit(rw, node)
    x, scale, bias = node.inputs
    shape = rw.shape(x)
    groups = node.attrs["num_groups"]
    grouped = e(
        "reshape", [x], {"shape": (shape[0], groups, int(np.prod(shape[1:])) // groups)}, "grouped"
    )
    y = _normalize(e, grouped, (2,), node.attrs["epsilon"])
    y = e("reshape", [y], {"shape": shape}, "ungrouped")
    y = e("mul", [y, _channel(e, scale, len(shape))], tag="scaled")
    y = e("add", [y, _channel(e, bias, len(shape))], tag="shifted")
    return e.done(
        y, "group_norm as reshape, reduce_mean, sub, mul, sqrt, div and a per-channel affine"
    )


@rule("instance_norm")
def decompose_instance_norm(rw: Rewriter, node: Node) -> bool:
    if rw.ctx.target.features.instance_norm:
        return False
    e = _Emit(rw, node)
    x, scale, bias = node.inputs
    rank = rw.value(x).rank
    y = _normalize(e, x, tuple(range(2, rank)), node.attrs["epsilon"])
    y = e("mul", [y, _channel(e, scale, rank)], tag="scaled")
    y = e("add", [y, _channel(e, bias, rank)], tag="shifted")
    return e.done(
        y, "instance_norm (not native on this target) as reduce_mean, sub, mul, sqrt and div"
    )


@rule("batch_norm")
def decompose_batch_norm(rw: Rewriter, node: Node) -> bool:
    """An unfolded BatchNorm is a per-channel affine (it then fuses as a gain/offset)."""
    e = _Emit(rw, node)
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
            [e("add", [_channel(e, var, rank), e.const(node.attrs["epsilon"], "eps")])],
            tag="std",
        )
        y = e(
            "div", [e("sub", [x, _channel(e, mean, rank)], tag="centered"), std], tag="normalized"
        )
        y = e(
            "add",
            [e("mul", [y, _channel(e, gamma, rank)], tag="scaled"), _channel(e, beta, rank)],
            tag="shifted",
        )
    return e.done(y, "batch_norm as a per-channel gain and offset")


def _softmax_parts(e: _Emit, x: str, axis: int) -> tuple[str, str]:
    """(x - max, sum(exp(x - max))) along ``axis``."""
    red = {"axes": (axis,), "keepdims": True}
    shifted = e("sub", [x, e("reduce_max", [x], red, "max")], tag="shifted")
    exp = e("exp", [shifted])
    return shifted, e("reduce_sum", [exp], red, "sum")


@rule("softmax")
def decompose_softmax(rw: Rewriter, node: Node) -> bool:
    if rw.ctx.target.features.softmax or not rw.ctx.options.decompose_gated_softmax:
        return False
    e = _Emit(rw, node)
    shifted, total = _softmax_parts(e, node.inputs[0], node.attrs["axis"])
    y = e("div", [e("exp", [shifted], tag="exp2"), total], tag="normalized")
    return e.done(
        y, "softmax (not native on this target) as reduce_max, sub, exp, reduce_sum and div"
    )


@rule("log_softmax")
def decompose_log_softmax(rw: Rewriter, node: Node) -> bool:
    e = _Emit(rw, node)
    shifted, total = _softmax_parts(e, node.inputs[0], node.attrs["axis"])
    y = e("sub", [shifted, e("log", [total])], tag="normalized")
    return e.done(y, "log_softmax as reduce_max, sub, exp, reduce_sum, log and sub")


def keeps_fused_attention(rw: Rewriter, node: Node) -> bool:
    """The fused attention layer is kept only where it is exact: no causal flag (the fused op
    ignores it) and a mask only when the target honours masks."""
    f = rw.ctx.target.features
    mask = node.inputs[3] if len(node.inputs) > 3 else ""
    if not f.sdpa or node.attrs["causal"] or rw.value(node.inputs[0]).rank > 4:
        return False
    return not mask or (f.sdpa_mask and rw.value(mask).dtype.is_float)


@rule("attention")
def decompose_attention(rw: Rewriter, node: Node) -> bool:
    """softmax(q k^T * scale + mask) v with an explicit additive mask (-1e4, never -inf)."""
    if keeps_fused_attention(rw, node):
        return False
    e = _Emit(rw, node)
    q, k, v = node.inputs[:3]
    mask = node.inputs[3] if len(node.inputs) > 3 else ""
    rank = rw.value(k).rank
    lq, dk = rw.shape(q)[-2:]
    lk = rw.shape(k)[-2]
    fill = rw.ctx.options.mask_value
    perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    scores = e("matmul", [q, e("transpose", [k], {"perm": perm}, "k_t")], tag="scores")
    scale = node.attrs["scale"] if node.attrs["scale"] is not None else 1.0 / np.sqrt(dk)
    scores = e("mul", [scores, e.const(scale, "scale")], tag="scaled")
    if node.attrs["causal"]:
        keep = np.tril(np.ones((lq, lk), dtype=bool), k=lk - lq)
        scores = e("add", [scores, e.const(np.where(keep, 0.0, fill), "causal_mask")], tag="causal")
    if mask:
        m = rw.const(mask)
        if rw.value(mask).dtype.is_float:
            additive = mask
        elif m is not None:
            additive = e.const(np.where(m, 0.0, fill), "mask")
        else:
            additive = e("where", [mask, e.const(0.0, "zero"), e.const(fill, "fill")], tag="mask")
        scores = e("add", [scores, additive], tag="masked")
    probs = e("softmax", [scores], {"axis": -1}, "probs")
    y = e("matmul", [probs, v], tag="context")
    return e.done(y, "attention as matmul, scale, additive mask, softmax and matmul")


@rule("gelu")
def approximate_gelu(rw: Rewriter, node: Node) -> bool:
    if (
        node.attrs["approximate"] != "none"
        or rw.ctx.target.features.gelu
        or not rw.ctx.options.approximate_gelu
    ):
        return False
    e = _Emit(rw, node)
    y = e("gelu", [node.inputs[0]], {"approximate": "tanh"}, "tanh")
    return e.done(
        y, f"exact GELU replaced by its tanh form (max abs error {GELU_TANH_MAX_ABS_ERROR:g})"
    )


@rule("erf")
def approximate_erf(rw: Rewriter, node: Node) -> bool:
    if not rw.ctx.options.approximate_gelu:
        return False
    e = _Emit(rw, node)
    z = node.inputs[0]
    poly = e(
        "add",
        [
            e("mul", [e("mul", [z, z], tag="z2"), e.const(_ERF_B, "b")], tag="bz2"),
            e.const(_ERF_A, "a"),
        ],
        tag="poly",
    )
    y = e("tanh", [e("mul", [z, poly], tag="arg")])
    return e.done(y, f"erf as tanh(a z + b z^3) (max abs error {ERF_TANH_MAX_ABS_ERROR:g})")


@rule("hard_swish", "mish", "selu", "celu", "softsign", "prelu")
def decompose_activation(rw: Rewriter, node: Node) -> bool:
    """Activations without an engine lookup table, written with ones that have one."""
    e = _Emit(rw, node)
    x = node.inputs[0]
    op = node.op
    if op == "hard_swish":
        y = e("mul", [x, e("hard_sigmoid", [x], {"alpha": 1.0 / 6.0, "beta": 0.5})], tag="product")
    elif op == "mish":
        y = e("mul", [x, e("tanh", [e("softplus", [x])])], tag="product")
    elif op == "selu":
        y = e(
            "mul",
            [e("elu", [x], {"alpha": node.attrs["alpha"]}), e.const(node.attrs["gamma"], "gamma")],
            tag="scaled",
        )
    elif op == "celu":
        a = node.attrs["alpha"]
        y = e(
            "mul",
            [
                e(
                    "elu",
                    [e("mul", [x, e.const(1.0 / a, "inv_alpha")], tag="scaled_in")],
                    {"alpha": 1.0},
                ),
                e.const(a, "alpha"),
            ],
            tag="scaled",
        )
    elif op == "softsign":
        y = e(
            "div",
            [x, e("add", [e("abs", [x]), e.const(1.0, "one")], tag="denominator")],
            tag="ratio",
        )
    else:  # prelu: relu(x) - slope * relu(-x); a live slope stays on the CPU
        slope = rw.const(node.inputs[1])
        if slope is None:
            return False
        neg = e(
            "mul",
            [e("relu", [e("neg", [x])], tag="relu_neg"), e.const(slope, "slope")],
            tag="negative_part",
        )
        y = e("sub", [e("relu", [x]), neg], tag="combined")
    return e.done(y, f"{op} written with engine activations")


@rule("split")
def split_as_slices(rw: Rewriter, node: Node) -> bool:
    x = node.inputs[0]
    axis = node.attrs["axis"] % rw.value(x).rank
    start = 0
    for out, size in zip(node.outputs, node.attrs["sizes"], strict=True):
        part = rw.add(
            "slice",
            [x],
            {"starts": (start,), "ends": (start + size,), "axes": (axis,)},
            hint=out,
            origin=node.origin,
            before=node,
        )
        start += size
        rw.replace_uses(out, part)
    rw.ctx.event(node.origin, "decomposed", f"split as {len(node.outputs)} slices")
    return True


@rule("reduce_l1", "reduce_l2", "reduce_sum_square", "reduce_log_sum", "reduce_log_sum_exp")
def decompose_reduction(rw: Rewriter, node: Node) -> bool:
    x = node.inputs[0]
    if not rw.value(x).dtype.is_float:
        return False
    e = _Emit(rw, node)
    attrs = dict(node.attrs)
    op = node.op
    if op == "reduce_l1":
        y = e("reduce_sum", [e("abs", [x])], attrs, "sum")
    elif op in ("reduce_l2", "reduce_sum_square"):
        y = e("reduce_sum", [e("mul", [x, x], tag="square")], attrs, "sum")
        y = e("sqrt", [y]) if op == "reduce_l2" else y
    elif op == "reduce_log_sum":
        y = e("log", [e("reduce_sum", [x], attrs, "sum")])
    else:
        keep = {**attrs, "keepdims": True}
        m = e("reduce_max", [x], keep, "max")
        s = e("reduce_sum", [e("exp", [e("sub", [x, m], tag="shifted")])], keep, "sum")
        y = e("add", [e("log", [s]), m], tag="lse")
        if not attrs["keepdims"]:
            y = e("reshape", [y], {"shape": rw.shape(node.output)}, "squeeze")
    return e.done(y, f"{op} as elementwise ops and a plain reduction")


@rule("add")
def finite_mask(rw: Rewriter, node: Node) -> bool:
    """-inf entries of a constant added before a softmax become the fp16-safe mask value."""
    users = rw.users(node.output)
    if not users or not all(u.op == "softmax" for u in users):
        return False
    for i, c in enumerate(rw.const(n) for n in node.inputs):
        if c is not None and c.dtype.kind == "f" and np.isneginf(c).any():
            fixed = np.where(np.isneginf(c), np.asarray(rw.ctx.options.mask_value, c.dtype), c)
            ins = list(node.inputs)
            ins[i] = rw.constant(fixed, f"{node.name}/mask")
            y = rw.add("add", ins, hint=node.name, origin=node.origin, before=node)
            rw.ctx.event(
                node.origin,
                "rewritten",
                f"-inf mask entries set to {rw.ctx.options.mask_value:g} (fp16-safe)",
            )
            rw.replace_uses(node.output, y)
            return True
    return False


@rule("expand")
def expand_as_broadcast(rw: Rewriter, node: Node) -> bool:
    """An expand that only prepends unit axes is a reshape; a float one that broadcasts is
    a multiply by ones (the engine broadcasts elementwise operands; x * 1 is exact)."""
    x = node.inputs[0]
    src, dst = rw.shape(x), rw.shape(node.output)
    out = rw.value(node.output)
    if rw.value(x).numel == out.numel and dst[len(dst) - len(src) :] == src:
        y = rw.add("reshape", [x], {"shape": dst}, hint=node.name, origin=node.origin, before=node)
        what = "a reshape"
    elif out.dtype.is_float and out.numel <= rw.ctx.options.fold_limit:
        ones = rw.constant(np.ones(dst, out.dtype.numpy), f"{node.name}/ones")
        y = rw.add("mul", [x, ones], hint=node.name, origin=node.origin, before=node)
        what = "a broadcast multiply by ones"
    else:
        return False
    rw.ctx.event(node.origin, "decomposed", f"expand as {what}")
    rw.replace_uses(node.output, y)
    return True


@rule("lrn")
def decompose_lrn(rw: Rewriter, node: Node) -> bool:
    """Local response norm: the window sum of squares over channels is a 1x1 conv with a
    banded weight, then x * exp(-beta * log(bias + alpha/size * sum))."""
    x = node.inputs[0]
    shape = rw.shape(x)
    c = shape[1]
    if c > LRN_MAX_CHANNELS:
        return False
    e = _Emit(rw, node)
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


DECOMPOSE_RULES = (
    decompose_layer_norm,
    decompose_group_norm,
    decompose_instance_norm,
    decompose_batch_norm,
    decompose_softmax,
    decompose_log_softmax,
    decompose_attention,
    approximate_gelu,
    approximate_erf,
    decompose_activation,
    split_as_slices,
    decompose_reduction,
    finite_mask,
    expand_as_broadcast,
    decompose_lrn,
)


def decompose(graph: Graph, ctx: PassContext) -> Graph:
    """Rewrite ops the target lacks (or that have no engine form) into ones it has."""
    return apply_rules(graph, ctx, DECOMPOSE_RULES)
