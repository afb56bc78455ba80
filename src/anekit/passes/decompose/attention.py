"""Attention decomposed where the fused layer would not be exact, and fp16-safe -inf masks."""

from __future__ import annotations

import numpy as np

from anekit.ir.graph import Node
from anekit.passes.decompose.emit import Emit
from anekit.passes.rewrite import Rewriter, rule


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
    e = Emit(rw, node)
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
