"""Written-out norms, softmaxes and attention raised to the fused op, so that they lower through
decompose's fp16-safe forms.

Exporters often spell a LayerNorm as primitive ops: mean, ``x - mean``, a variance as the
mean of squared deviations or as ``E[x^2] - E[x]^2``, ``sqrt(var + eps)`` and a divide (or
a multiply by its reciprocal). Computed so in fp16 the squares overflow once |x| > 256 and
``E[x^2] - E[x]^2`` loses the variance to cancellation; the fused op's decomposition scales
the deviations by their peak first (`anekit.passes.decompose.norms`). The same holds for
flax's LayerNorm as jax2tf writes it (means as sums times 1/n, the
variance clamped by ``max(var, 0)``, gamma multiplied into the inverse std), for
RMSNorm (``x * rsqrt(mean(x^2) + eps)``), for group and instance norms written as a mean over
trailing axes (of the grouped or spatial axes), for softmax and log-softmax written with exp,
sum and divide (with or without the max subtracted; ``log(softmax(x))`` too), and for
attention written as matmul, scale, mask, softmax, matmul.

Every rewrite is exact up to fp32 rounding (a softmax written without its max subtracted
overflows fp32 past 88, where the raised op does not). The raised op's origin is the union of
the matched nodes' origins, so reports and numerics findings name the original nodes.

GELU in its erf and tanh forms is raised by canonicalize (`anekit.passes.activations`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from anekit.errors import AnekitError
from anekit.ir.graph import Graph, Node
from anekit.ir.registry import InferError
from anekit.passes.context import PassContext
from anekit.passes.rewrite import (
    Rewriter,
    apply_rules,
    infer_one,
    is_close,
    live_and_const,
    rule,
    scalar_value,
)


def _producer(rw: Rewriter, value: str | None, *ops: str) -> Node | None:
    p = rw.producer(value)
    return p if p is not None and p.op in ops else None


def _trailing_axes(rw: Rewriter, node: Node) -> int | None:
    """The first axis of a keepdims reduction over the trailing axes of its input (else None)."""
    if not node.attrs.get("keepdims", True):
        return None
    rank = rw.value(node.inputs[0]).rank
    axes = node.attrs.get("axes")
    if not axes or rank == 0:
        return None
    norm = sorted({a % rank for a in axes})
    if norm != list(range(norm[0], rank)):
        return None
    return norm[0]


def _single_axis(rw: Rewriter, node: Node) -> int | None:
    """The axis of a keepdims reduction over exactly one axis (else None)."""
    axes = node.attrs.get("axes")
    if not node.attrs.get("keepdims", True) or not axes or len(axes) != 1:
        return None
    return axes[0] % rw.value(node.inputs[0]).rank


def _square_of(rw: Rewriter, value: str) -> tuple[str, Node] | None:
    """(v, node) when ``value`` is v * v (canonicalize writes pow(v, 2) so)."""
    p = _producer(rw, value, "mul")
    if p is not None and p.inputs[0] == p.inputs[1]:
        return p.inputs[0], p
    p = _producer(rw, value, "pow")
    if p is not None and scalar_value(rw.const(p.inputs[1])) == 2.0:
        return p.inputs[0], p
    return None


def _mean_of(rw: Rewriter, value: str, axis: int | None = None) -> tuple[str, int, Node] | None:
    """(x, first axis, node) when ``value`` is a keepdims mean of x over trailing axes."""
    p = _producer(rw, value, "reduce_mean")
    if p is None:
        return None
    first = _trailing_axes(rw, p)
    if first is None or (axis is not None and first != axis):
        return None
    return p.inputs[0], first, p


def _same_mean(rw: Rewriter, a: str, b: str) -> bool:
    """Whether values ``a`` and ``b`` are the same mean (one node, or two identical ones)."""
    if a == b:
        return True
    pa, pb = rw.producer(a), rw.producer(b)
    return (
        pa is not None and pb is not None and pa.op == pb.op == "reduce_mean"
        and pa.inputs == pb.inputs and dict(pa.attrs) == dict(pb.attrs)
    )  # fmt: skip


def _deviation(rw: Rewriter, value: str) -> tuple[str, str, Node] | None:
    """(x, mean value, node) when ``value`` is x - mean(x) over trailing axes."""
    p = _producer(rw, value, "sub")
    if p is None:
        return None
    x, mean = p.inputs
    found = _mean_of(rw, mean)
    if found is None or found[0] != x:
        return None
    return x, mean, p


def _variance(rw: Rewriter, value: str, x: str, mean: str | None, axis: int) -> list[Node] | None:
    """The nodes computing ``value`` as the variance of x over axes ``axis``.. (centred: mean
    of squared deviations from ``mean``, or E[x^2] - E[x]^2) or, with ``mean`` None, as the
    mean of x^2 (RMSNorm's)."""
    if mean is not None:
        sub = _producer(rw, value, "sub")
        if sub is not None:  # E[x^2] - E[x]^2
            ex2 = _mean_of(rw, sub.inputs[0], axis)
            m2 = _square_of(rw, sub.inputs[1])
            sq = _square_of(rw, ex2[0]) if ex2 is not None else None
            if ex2 and m2 and sq and sq[0] == x and _same_mean(rw, m2[0], mean):
                return [sub, ex2[2], m2[1], sq[1]]
            return None
    found = _mean_of(rw, value, axis)
    if found is None:
        return None
    sq = _square_of(rw, found[0])
    if sq is None:
        return None
    if mean is None:
        return [found[2], sq[1]] if sq[0] == x else None
    dev = _deviation(rw, sq[0])
    if sq[0] != x and dev is not None and dev[0] == x and _same_mean(rw, dev[1], mean):
        return [found[2], sq[1], dev[2]]
    return None


def _std_of(rw: Rewriter, value: str) -> tuple[str, float, list[Node]] | None:
    """(var, eps, nodes) when ``value`` is sqrt(var + eps)."""
    sqrt = _producer(rw, value, "sqrt")
    add = _producer(rw, sqrt.inputs[0], "add") if sqrt is not None else None
    if add is None:
        return None
    found = live_and_const(rw, add)
    eps = scalar_value(found[1]) if found is not None else None
    if eps is None or eps < 0:
        return None
    return found[0], eps, [sqrt, add]


def _inverse_std(rw: Rewriter, value: str) -> tuple[str, float, list[Node]] | None:
    """(var, eps, nodes) when ``value`` is 1 / sqrt(var + eps) (reciprocal or 1 / ...)."""
    p = _producer(rw, value, "reciprocal", "div")
    if p is None:
        return None
    if p.op == "div":
        if scalar_value(rw.const(p.inputs[0])) != 1.0:
            return None
        found = _std_of(rw, p.inputs[1])
    else:
        found = _std_of(rw, p.inputs[0])
    return None if found is None else (found[0], found[1], [p, *found[2]])


def _normalized(rw: Rewriter, node: Node) -> tuple[str, str, str, float, list[Node]] | None:
    """(numerator, var, how, eps, nodes) for node = n / sqrt(var + eps) or n * 1/sqrt(...)."""
    if node.op == "div":
        found = _std_of(rw, node.inputs[1])
        if found is not None:
            return node.inputs[0], found[0], "div", found[1], found[2]
        return None
    for i in (0, 1):
        found = _inverse_std(rw, node.inputs[i])
        if found is not None:
            return node.inputs[1 - i], found[0], "mul", found[1], found[2]
    return None


def _raise(
    rw: Rewriter, node: Node, op: str, inputs: list[str], attrs: dict, matched: Iterable[Node],
    what: str,
) -> bool:  # fmt: skip
    types = [rw.value(i).type if i else None for i in inputs]
    try:
        if infer_one(op, types, attrs) != rw.value(node.output).type:
            return False
    except (AnekitError, InferError):
        return False  # shapes the fused op does not take (e.g. a mask that does not broadcast)
    origin = [o for n in (*matched, node) for o in n.origin]
    y = rw.add(op, inputs, attrs, hint=f"{node.name}/{op}", origin=origin, before=node)
    rw.ctx.event(dict.fromkeys(origin), "rewritten", f"{what} recognised as {op}")
    rw.replace_uses(node.output, y)
    return True


@rule("div", "mul")
def raise_layer_norm(rw: Rewriter, node: Node) -> bool:
    """(x - mean) / sqrt(var + eps) -> layer_norm; x / sqrt(mean(x^2) + eps) -> rms_norm."""
    if not rw.value(node.output).dtype.is_float:
        return False
    found = _normalized(rw, node)
    if found is None:
        return False
    num, var, _, eps, nodes = found
    dev = _deviation(rw, num)
    if dev is not None:
        x, mean, sub = dev
        axis = _mean_of(rw, mean)[1]
        parts = _variance(rw, var, x, mean, axis)
        if parts is None or rw.shape(x) != rw.shape(node.output):
            return False
        matched = [*nodes, *parts, sub, rw.producer(mean)]
        attrs = {"axis": axis, "epsilon": eps}
        return _raise(
            rw, node, "layer_norm", [x, "", ""], attrs, matched, "a written-out layer norm"
        )
    mean_sq = _mean_of(rw, var)
    if mean_sq is None or rw.shape(num) != rw.shape(node.output):
        return False
    parts = _variance(rw, var, num, None, mean_sq[1])
    if parts is None:
        return False
    return _raise(rw, node, "rms_norm", [num, ""], {"axis": mean_sq[1], "epsilon": eps},
                  [*nodes, *parts], "a written-out RMS norm")  # fmt: skip


def _any_mean(rw: Rewriter, value: str) -> tuple[str, tuple[int, ...], list[Node]] | None:
    """(x, axes, nodes) when ``value`` is a mean of x, kept dims or not: reduce_mean, or
    reduce_sum times 1/count (jax2tf folds ``sum / n`` to a multiply)."""
    p = _producer(rw, value, "reduce_mean", "mul")
    if p is None:
        return None
    nodes = [p]
    if p.op == "mul":
        found = live_and_const(rw, p)
        s = _producer(rw, found[0], "reduce_sum") if found is not None else None
        if s is None:
            return None
        p, nodes = s, [p, s]
    axes = p.attrs.get("axes")
    if not axes:
        return None
    shape = rw.shape(p.inputs[0])
    axes = tuple(sorted({a % len(shape) for a in axes}))
    if nodes[0].op == "mul":
        count = int(np.prod([shape[a] for a in axes]))
        if not is_close(scalar_value(found[1]), 1.0 / count):
            return None
    return p.inputs[0], axes, nodes


def _through(rw: Rewriter, value: str, *ops: str) -> tuple[str, list[Node]]:
    """``value`` with reshapes (and a Maximum(v, 0) clamp if "maximum" is in ``ops``) peeled."""
    nodes: list[Node] = []
    while (p := _producer(rw, value, *ops)) is not None:
        if p.op == "maximum":
            found = live_and_const(rw, p)
            if found is None or scalar_value(found[1]) != 0.0:
                break
            value = found[0]
        else:
            value = p.inputs[0]
        nodes.append(p)
    return value, nodes


def _moments_variance(
    rw: Rewriter, value: str
) -> tuple[str, tuple[int, ...], str, list[Node]] | None:
    """(x, axes, mean value, nodes) when ``value`` is E[x^2] - E[x]^2, any mean form, with
    reshapes and a Maximum(var, 0) clamp around it (flax's LayerNorm, as jax2tf writes it)."""
    value, peeled = _through(rw, value, "reshape", "maximum")
    sub = _producer(rw, value, "sub")
    if sub is None:
        return None
    ex2, m2 = _any_mean(rw, sub.inputs[0]), _square_of(rw, sub.inputs[1])
    sq = _square_of(rw, ex2[0]) if ex2 is not None else None
    mean = _any_mean(rw, m2[0]) if m2 is not None else None
    if not (ex2 and sq and mean) or sq[0] != mean[0] or ex2[1] != mean[1]:
        return None
    return mean[0], mean[1], m2[0], [*peeled, sub, *ex2[2], m2[1], sq[1], *mean[2]]


@rule("mul")
def raise_moments_layer_norm(rw: Rewriter, node: Node) -> bool:
    """(x - mean) * (gamma *) 1/sqrt(max(E[x^2] - E[x]^2, 0) + eps), means as sums times 1/n
    and reshapes between -> layer_norm (moved to the last axes when the normalised axes are
    not trailing), then gamma."""
    if not rw.value(node.output).dtype.is_float:
        return False
    for i in (0, 1):
        dev = _producer(rw, node.inputs[i], "sub")
        scale = node.inputs[1 - i]
        gamma, head = None, []
        g = _producer(rw, scale, "mul")
        if g is not None and (found := live_and_const(rw, g)) is not None:
            gamma, scale, head = g.inputs[found[2]], found[0], [g]
        inv = _inverse_std(rw, scale)
        if dev is None or inv is None:
            continue
        var = _moments_variance(rw, inv[0])
        if var is None:
            continue
        x, axes, mean, parts = var
        mean_b, peeled = _through(rw, dev.inputs[1], "reshape")
        if dev.inputs[0] != x or mean_b != mean or rw.shape(x) != rw.shape(node.output):
            continue
        kept = tuple(1 if a in axes else d for a, d in enumerate(rw.shape(x)))
        if rw.shape(dev.inputs[1]) != kept or rw.shape(inv[2][0].output) != kept:
            continue
        return _raise_moved(rw, node, x, axes, inv[1], gamma,
                            [*head, *inv[2], *parts, dev, *peeled])  # fmt: skip
    return False


def _raise_moved(
    rw: Rewriter, node: Node, x: str, axes: tuple[int, ...], eps: float, gamma: str | None,
    matched: list[Node],
) -> bool:  # fmt: skip
    """layer_norm of x over ``axes`` (contiguous), transposed to the end and back when they
    are not trailing, times ``gamma``."""
    rank, shape = rw.value(x).rank, rw.shape(x)
    if list(axes) != list(range(axes[0], axes[-1] + 1)):
        return False
    if gamma is not None and np.broadcast_shapes(shape, rw.shape(gamma)) != shape:
        return False
    origin = [o for n in (*matched, node) for o in n.origin]
    hint = f"{node.name}/layer_norm"
    perm = tuple(a for a in range(rank) if a not in axes) + axes
    moved = perm != tuple(range(rank))
    if moved:
        x = rw.add("transpose", [x], {"perm": perm}, hint=f"{hint}/in", origin=origin, before=node)
    y = rw.add("layer_norm", [x, "", ""], {"axis": rank - len(axes), "epsilon": eps}, hint=hint,
               origin=origin, before=node)  # fmt: skip
    if moved:
        back = tuple(int(i) for i in np.argsort(perm))
        y = rw.add("transpose", [y], {"perm": back}, hint=f"{hint}/out", origin=origin, before=node)
    if gamma is not None:
        y = rw.add("mul", [y, gamma], hint=f"{hint}/scale", origin=origin, before=node)
    rw.ctx.event(dict.fromkeys(origin), "rewritten",
                 "a written-out layer norm (moments, clamped) recognised as layer_norm")  # fmt: skip
    rw.replace_uses(node.output, y)
    return True


def _exp_parts(rw: Rewriter, value: str) -> tuple[str, int | None, list[Node]] | None:
    """(x, axis of the max or None, nodes) when ``value`` is x - max(x) (or x itself: the
    axis is then the sum's)."""
    sub = _producer(rw, value, "sub")
    peak = _producer(rw, sub.inputs[1], "reduce_max") if sub is not None else None
    if peak is not None and peak.inputs[0] == sub.inputs[0]:
        axis = _single_axis(rw, peak)
        return (sub.inputs[0], axis, [sub, peak]) if axis is not None else None
    return value, None, []


def _sum_of_exp(rw: Rewriter, total: str, shifted: str) -> tuple[int, list[Node]] | None:
    """(axis, nodes) when ``total`` is sum(exp(shifted)) over one axis, keepdims."""
    s = _producer(rw, total, "reduce_sum")
    if s is None:
        return None
    e = _producer(rw, s.inputs[0], "exp")
    axis = _single_axis(rw, s)
    if e is None or axis is None or e.inputs[0] != shifted:
        return None
    return axis, [s, e]


def _raise_normalized_exp(
    rw: Rewriter, node: Node, op: str, head: Node, total: str, shifted: str, what: str
) -> bool:
    """Raise ``node`` to softmax / log_softmax of x when ``total`` is sum(exp(shifted)) and
    ``shifted`` is x - max(x) over the same axis (or x itself)."""
    found = _sum_of_exp(rw, total, shifted)
    parts = _exp_parts(rw, shifted)
    if found is None or parts is None or parts[1] not in (None, found[0]):
        return False
    matched = [head, *found[1], *parts[2]]
    return _raise(rw, node, op, [parts[0]], {"axis": found[0]}, matched, what)


@rule("div")
def raise_softmax(rw: Rewriter, node: Node) -> bool:
    """exp(x - max(x)) / sum(exp(x - max(x))) (the max optional) -> softmax."""
    e = _producer(rw, node.inputs[0], "exp")
    if e is None:
        return False
    return _raise_normalized_exp(
        rw, node, "softmax", e, node.inputs[1], e.inputs[0], "a written-out softmax"
    )


@rule("sub", "log")
def raise_log_softmax(rw: Rewriter, node: Node) -> bool:
    """(x - max) - log(sum(exp(x - max))) (the max optional), or log(softmax(x)) -> log_softmax."""
    if node.op == "log":
        sm = _producer(rw, node.inputs[0], "softmax")
        if sm is None or not rw.single_use(sm.output):
            return False
        return _raise(rw, node, "log_softmax", [sm.inputs[0]], dict(sm.attrs), [sm],
                      "log of a softmax")  # fmt: skip
    log = _producer(rw, node.inputs[1], "log")
    if log is None:
        return False
    return _raise_normalized_exp(
        rw, node, "log_softmax", log, log.inputs[0], node.inputs[0], "a written-out log-softmax"
    )


def _transposed_last(rw: Rewriter, value: str) -> str | None:
    """k when ``value`` is k with its last two axes swapped."""
    t = _producer(rw, value, "transpose")
    if t is None:
        return None
    rank = rw.value(value).rank
    swap = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    return t.inputs[0] if tuple(p % rank for p in t.attrs["perm"]) == swap else None


@rule("matmul")
def raise_attention(rw: Rewriter, node: Node) -> bool:
    """softmax(q k^T * scale + mask) v, scale a multiply or divide by a constant, the mask
    additive and optional -> attention."""
    sm = _producer(rw, node.inputs[0], "softmax")
    v = node.inputs[1]
    if sm is None or not rw.single_use(sm.output) or rw.value(v).rank < 3:
        return False
    if sm.attrs["axis"] % rw.value(sm.output).rank != rw.value(sm.output).rank - 1:
        return False
    matched, scores, mask = [sm], sm.inputs[0], ""
    add = _producer(rw, scores, "add")
    if add is not None and rw.single_use(add.output):
        for i in (0, 1):
            if _producer(rw, add.inputs[i], "mul", "div", "matmul") is not None:
                scores, mask = add.inputs[i], add.inputs[1 - i]
                matched.append(add)
                break
    if mask and not rw.value(mask).dtype.is_float:
        return False
    scale = 1.0
    scaled = _producer(rw, scores, "mul", "div")
    if scaled is not None and rw.single_use(scaled.output):
        found = live_and_const(rw, scaled)
        c = scalar_value(found[1]) if found is not None else None
        if c is None or c == 0 or (scaled.op == "div" and found[2] == 0):
            return False
        scale = c if scaled.op == "mul" else 1.0 / c
        scores = found[0]
        matched.append(scaled)
    qk = _producer(rw, scores, "matmul")
    if qk is None or not rw.single_use(qk.output):
        return False
    q, k = qk.inputs[0], _transposed_last(rw, qk.inputs[1])
    if k is None or not rw.value(q).rank == rw.value(k).rank == rw.value(v).rank:
        return False
    matched += [qk, rw.producer(qk.inputs[1])]
    ins = [q, k, v, *([mask] if mask else [])]
    return _raise(rw, node, "attention", ins, {"scale": float(scale), "causal": False},
                  matched, "written-out attention")  # fmt: skip


RECOGNIZE_RULES = (
    raise_layer_norm,
    raise_moments_layer_norm,
    raise_softmax,
    raise_log_softmax,
    raise_attention,
)


def recognize(graph: Graph, ctx: PassContext) -> Graph:
    """Raise written-out norms, softmaxes and attention to their fused ops."""
    return apply_rules(graph, ctx, RECOGNIZE_RULES)
