"""Folding into weights: BatchNorm and zero pads into convolutions and linears, and channel
slices pushed up into the weights they cut (a fused QKV projection becomes three)."""

from __future__ import annotations

import numpy as np

from anekit.ir.engine import is_activation
from anekit.ir.graph import Node
from anekit.ir.ops.shape import slice_bounds
from anekit.passes.chains import is_unit_reshape, reshape_groups
from anekit.passes.rewrite import Rewriter, live_and_const, rule


@rule("batch_norm")
def fold_batch_norm(rw: Rewriter, node: Node) -> bool:
    """BatchNorm after a conv or a linear (matmul [+ bias] with a constant weight) goes into
    its weights and bias: W' = W * s, b' = (b - mean) * s + beta with s = gamma / sqrt(var + eps)."""
    x, gamma, beta, mean, var = node.inputs
    params = [rw.const(p) for p in (gamma, beta, mean, var)]
    if any(p is None for p in params) or not rw.single_use(x):
        return False
    g, beta_v, mu, var_v = (p.astype(np.float64).reshape(-1) for p in params)
    s = g / np.sqrt(var_v + node.attrs["epsilon"])
    shift = beta_v - mu * s
    prod = rw.producer(x)
    if prod is None:
        return False
    if (
        prod.op == "conv"
        and rw.is_const(prod.inputs[1])
        and (len(prod.inputs) < 3 or not prod.inputs[2] or rw.is_const(prod.inputs[2]))
    ):
        w = rw.const(prod.inputs[1])
        b = (
            rw.const(prod.inputs[2])
            if len(prod.inputs) > 2 and prod.inputs[2]
            else np.zeros(w.shape[0])
        )
        w2 = (w * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        b2 = (b * s + shift).astype(w.dtype)
        ins = [
            prod.inputs[0],
            rw.constant(w2, f"{prod.name}/w_bn"),
            rw.constant(b2, f"{prod.name}/b_bn"),
        ]
        y = rw.add(
            "conv", ins, prod.attrs, hint=prod.name, origin=prod.origin + node.origin, before=prod
        )
    else:
        linear = _linear_of(rw, x)
        if linear is None:
            return False
        mm, bias_node, w, b = linear
        w2 = (w * s.reshape(1, -1)).astype(w.dtype)
        b2 = ((b.reshape(-1) if b is not None else 0.0) * s + shift).astype(w.dtype)
        origin = mm.origin + (bias_node.origin if bias_node else ()) + node.origin
        h = rw.add(
            "matmul",
            [mm.inputs[0], rw.constant(w2, f"{mm.name}/w_bn")],
            hint=mm.name,
            origin=origin,
            before=mm,
        )
        y = rw.add(
            "add",
            [h, rw.constant(b2, f"{mm.name}/b_bn")],
            hint=node.name,
            origin=origin,
            before=node,
        )
    rw.ctx.absorbed.update(node.origin)
    rw.ctx.event(node.origin, "folded", f"folded into the weights and bias of '{prod.name}'")
    rw.replace_uses(node.output, y)
    return True


def _linear_of(
    rw: Rewriter, v: str
) -> tuple[Node, Node | None, np.ndarray, np.ndarray | None] | None:
    """(matmul, bias add or None, weight, bias) when ``v`` is a rank-2 x @ W (+ b), W constant."""
    p = rw.producer(v)
    bias_node, bias = None, None
    if p is not None and p.op == "add":
        found = live_and_const(rw, p)
        if found is None or not rw.single_use(found[0]):
            return None
        bias_node, bias = p, found[1]
        p = rw.producer(found[0])
    if p is None or p.op != "matmul" or rw.value(p.output).rank != 2:
        return None
    w = rw.const(p.inputs[1])
    if w is None or w.ndim != 2 or rw.is_const(p.inputs[0]):
        return None
    if bias is not None and bias.size not in (1, w.shape[1]):
        return None
    return p, bias_node, w, bias


@rule("conv")
def fold_pad_into_conv(rw: Rewriter, node: Node) -> bool:
    """A zero constant pad of the spatial axes before a conv becomes the conv's own pads."""
    pad = rw.producer(node.inputs[0])
    if pad is None or pad.op != "pad" or not rw.single_use(node.inputs[0]):
        return False
    if pad.attrs["mode"] != "constant" or pad.attrs["value"] != 0.0:
        return False
    r = rw.value(node.inputs[0]).rank
    pads = pad.attrs["pads"]
    begins, ends = pads[:r], pads[r:]
    if any(begins[:2]) or any(ends[:2]) or min(pads) < 0:
        return False
    sp = r - 2
    own = node.attrs["pads"] or (0,) * (2 * sp)
    merged = tuple(own[i] + begins[2 + i] for i in range(sp)) + tuple(
        own[sp + i] + ends[2 + i] for i in range(sp)
    )
    attrs = {**node.attrs, "pads": merged}
    y = rw.add(
        "conv",
        [pad.inputs[0], *node.inputs[1:]],
        attrs,
        hint=node.name,
        origin=node.origin + pad.origin,
        before=node,
    )
    rw.ctx.absorbed.update(pad.origin)
    rw.ctx.event(pad.origin, "folded", f"folded into the padding of conv '{node.name}'")
    rw.replace_uses(node.output, y)
    return True


# --- channel slices pushed into weights -----------------------------------------------------


def _slices_of(rw: Rewriter, v: str) -> tuple[int, list[tuple[Node, int, int]]] | None:
    """(axis, [(slice, start, end)]) when every reader of ``v`` is a unit-step slice of one axis."""
    users = rw.users(v)
    if not users or rw.is_output(v):
        return None
    shape = rw.shape(v)
    axis = None
    found = []
    for u in users:
        if u.op != "slice":
            return None
        axes = u.attrs["axes"] or tuple(range(len(u.attrs["starts"])))
        steps = u.attrs["steps"] or (1,) * len(axes)
        spans = [
            (a % len(shape), slice_bounds(shape[a % len(shape)], s, e, st))
            for a, s, e, st in zip(axes, u.attrs["starts"], u.attrs["ends"], steps, strict=True)
        ]
        cut = [(a, b) for a, b in spans if (b[0], b[2]) != (0, shape[a])]
        if len(cut) != 1 or any(st != 1 for st in steps):
            return None
        a, (start, _end, length) = cut[0]
        if axis is not None and a != axis:
            return None
        axis = a
        found.append((u, start, start + length))
    return (axis, found) if axis is not None else None


def _take(array: np.ndarray, axis: int, rank: int, start: int, end: int) -> np.ndarray:
    """Slice a constant that broadcasts against a rank-``rank`` tensor along ``axis``."""
    a = array.reshape((1,) * (rank - array.ndim) + array.shape)
    if a.shape[axis] == 1:
        return array
    return a[(slice(None),) * axis + (slice(start, end),)]


@rule("slice")
def push_slices_up(rw: Rewriter, node: Node) -> bool:
    """Slices of one axis that read the output of a conv, a linear, or an elementwise op
    on a single-use input are pushed into the producer: weights are cut, ops are repeated.

    This turns a fused QKV projection followed by a split into three projections.
    """
    v = node.inputs[0]
    found = _slices_of(rw, v)
    prod = rw.producer(v)
    if found is None or prod is None:
        return False
    axis, slices = found
    rank = rw.value(v).rank
    make = _slice_maker(rw, prod, axis, rank)
    if make is None:
        return False
    for sl, start, end in slices:
        y = make(start, end, sl)
        rw.replace_uses(sl.output, y)
        if prod.op in ("conv", "matmul"):  # the slice is now part of the weights it cut
            rw.ctx.absorbed.update(sl.origin)
            rw.ctx.event(
                sl.origin, "folded", f"folded into the weights of '{prod.name}' (cut per slice)"
            )
    rw.ctx.event(prod.origin, "split", f"cut into {len(slices)} parts by the slices that read it")
    return True


def _slice_maker(rw: Rewriter, prod: Node, axis: int, rank: int):
    """A function (start, end, slice node) -> value computing prod's output[start:end] on axis."""
    o = prod.origin

    def cut(x: str, start: int, end: int, sl: Node) -> str:
        return rw.add(
            "slice",
            [x],
            {"starts": (start,), "ends": (end,), "axes": (axis,)},
            hint=sl.name,
            origin=sl.origin,
            before=sl,
        )

    if prod.op == "conv" and axis == 1 and prod.attrs["group"] == 1 and rw.is_const(prod.inputs[1]):
        w = rw.const(prod.inputs[1])
        b = rw.const(prod.inputs[2]) if len(prod.inputs) > 2 and prod.inputs[2] else None
        if len(prod.inputs) > 2 and prod.inputs[2] and b is None:
            return None

        def conv_part(start: int, end: int, sl: Node) -> str:
            ins = [prod.inputs[0], rw.constant(w[start:end], f"{prod.name}/w{start}")]
            if b is not None:
                ins.append(rw.constant(b[start:end], f"{prod.name}/b{start}"))
            return rw.add(
                "conv",
                ins,
                prod.attrs,
                hint=f"{prod.name}/{start}",
                origin=o + sl.origin,
                before=sl,
            )

        return conv_part
    if prod.op == "matmul":
        a, bb = prod.inputs
        ca, cb = rw.const(a), rw.const(bb)
        if ca is not None and cb is None and ca.ndim == 2 and axis == rank - 2:
            return lambda s, e, sl: rw.add(
                "matmul",
                [rw.constant(ca[s:e], f"{prod.name}/w{s}"), bb],
                hint=f"{prod.name}/{s}",
                origin=o + sl.origin,
                before=sl,
            )
        if cb is not None and ca is None and cb.ndim == 2 and axis == rank - 1:
            return lambda s, e, sl: rw.add(
                "matmul",
                [a, rw.constant(cb[:, s:e], f"{prod.name}/w{s}")],
                hint=f"{prod.name}/{s}",
                origin=o + sl.origin,
                before=sl,
            )
        return None
    if prod.op in ("add", "sub", "mul", "div"):
        found = live_and_const(rw, prod)
        if (
            found is None
            or not rw.single_use(found[0])
            or rw.value(found[0]).shape != rw.value(prod.output).shape
        ):
            return None
        live, c, ci = found

        def binary_part(start: int, end: int, sl: Node) -> str:
            part = cut(live, start, end, sl)
            k = rw.constant(_take(c, axis, rank, start, end), f"{prod.name}/c{start}")
            ins = [k, part] if ci == 0 else [part, k]
            return rw.add(prod.op, ins, hint=f"{prod.name}/{start}", origin=o, before=sl)

        return binary_part
    if (is_activation(prod.op) or prod.op == "identity") and len(prod.inputs) == 1:
        if not rw.single_use(prod.inputs[0]):
            return None
        return lambda s, e, sl: rw.add(
            prod.op,
            [cut(prod.inputs[0], s, e, sl)],
            prod.attrs,
            hint=f"{prod.name}/{s}",
            origin=o,
            before=sl,
        )
    if prod.op == "reshape" and rw.single_use(prod.inputs[0]):
        src = rw.shape(prod.inputs[0])
        dst = rw.shape(prod.output)
        if not is_unit_reshape(src, dst) or dst[axis] == 1:
            return None
        groups = reshape_groups(src, dst)
        src_axis = next(g[0][0] for g in groups if g[1] == [axis])

        def reshape_part(start: int, end: int, sl: Node) -> str:
            part = rw.add(
                "slice",
                [prod.inputs[0]],
                {"starts": (start,), "ends": (end,), "axes": (src_axis,)},
                hint=sl.name,
                origin=sl.origin,
                before=sl,
            )
            return rw.add(
                "reshape",
                [part],
                {"shape": rw.shape(sl.output)},
                hint=f"{prod.name}/{start}",
                origin=o,
                before=sl,
            )

        return reshape_part
    return None


FOLD_RULES = (fold_batch_norm, fold_pad_into_conv, push_slices_up)
