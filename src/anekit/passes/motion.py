"""Moving ops to where they fuse: scalar factors out of matmuls (and merged), and unit-axis
reshapes after a matmul below its elementwise epilogue."""

from __future__ import annotations

import numpy as np

from anekit.ir.engine import is_activation
from anekit.ir.graph import Node
from anekit.passes.chains import is_unit_reshape, reshape_groups
from anekit.passes.rewrite import Rewriter, live_and_const, rule


def _scalar_mul(rw: Rewriter, v: str) -> tuple[Node, str, np.ndarray] | None:
    p = rw.producer(v)
    if p is None or p.op != "mul" or not rw.single_use(v):
        return None
    found = live_and_const(rw, p)
    if found is None or found[1].size != 1:
        return None
    return p, found[0], found[1]


@rule("matmul")
def scalars_out_of_matmul(rw: Rewriter, node: Node) -> bool:
    """matmul(a * s, b * t) -> matmul(a, b) * (s t) for scalar constants s, t."""
    a, b = node.inputs
    fa, fb = _scalar_mul(rw, a), _scalar_mul(rw, b)
    if fa is None and fb is None:
        return False
    scale = np.float32(1.0)
    origin = []  # the scalars' own nodes: they become the product's scale
    if fa is not None:
        a, scale = fa[1], scale * np.float32(fa[2].reshape(()))
        origin += fa[0].origin
    if fb is not None:
        b, scale = fb[1], scale * np.float32(fb[2].reshape(()))
        origin += fb[0].origin
    if rw.value(a).dtype != rw.value(node.output).dtype:
        return False
    mm = rw.add("matmul", [a, b], hint=node.name, origin=node.origin, before=node)
    k = rw.constant(np.asarray(scale, dtype=rw.value(mm).dtype.numpy), f"{node.name}/scale")
    y = rw.add("mul", [mm, k], hint=f"{node.name}/scaled", origin=origin, before=node)
    rw.replace_uses(node.output, y)
    return True


@rule("mul")
def merge_scalar_muls(rw: Rewriter, node: Node) -> bool:
    """(x * s) * t -> x * (s t) for scalar constants."""
    found = live_and_const(rw, node)
    if found is None or found[1].size != 1:
        return False
    inner = _scalar_mul(rw, found[0])
    if inner is None or rw.value(inner[1]).type != rw.value(node.output).type:
        return False
    scale = (inner[2].reshape(()) * found[1].reshape(())).astype(found[1].dtype)
    k = rw.constant(scale, f"{node.name}/scale")
    y = rw.add(
        "mul", [inner[1], k], hint=node.name, origin=node.origin + inner[0].origin, before=node
    )
    rw.replace_uses(node.output, y)
    return True


def _from_matmul(rw: Rewriter, v: str, depth: int = 8) -> bool:
    """``v`` is a matmul output, possibly through single-use elementwise epilogue ops."""
    for _ in range(depth):
        p = rw.producer(v)
        if p is None:
            return False
        if p.op == "matmul":
            return True
        if is_activation(p.op) and len(p.inputs) == 1:
            v = p.inputs[0]
        elif p.op in ("add", "sub", "mul", "div") and live_and_const(rw, p) is not None:
            v = live_and_const(rw, p)[0]
        else:
            return False
    return False


@rule("reshape")
def sink_unit_reshape(rw: Rewriter, node: Node) -> bool:
    """A reshape that only adds unit axes after a matmul moves below the elementwise ops that
    follow, so that they can join the matmul's epilogue."""
    x = node.inputs[0]
    src, dst = rw.shape(x), rw.shape(node.output)
    if not is_unit_reshape(src, dst) or not rw.single_use(x) or not _from_matmul(rw, x):
        return False
    nxt = rw.sole_user(node.output)
    if nxt is None:
        return False
    if is_activation(nxt.op) and len(nxt.inputs) == 1:
        y = rw.add(nxt.op, [x], nxt.attrs, hint=nxt.name, origin=nxt.origin, before=nxt)
    elif nxt.op in ("add", "sub", "mul", "div"):
        found = live_and_const(rw, nxt)
        if found is None or found[0] != node.output or rw.value(nxt.output).shape != dst:
            return False
        live, c, ci = found
        c_dst = c.reshape((1,) * (len(dst) - c.ndim) + c.shape)
        groups = reshape_groups(src, dst)
        shape = [1] * len(src)
        for gs, gd in groups:
            shape[gs[0]] = c_dst.shape[gd[0]]
        k = rw.constant(c_dst.reshape(shape), f"{nxt.name}/c")
        ins = [k, x] if ci == 0 else [x, k]
        y = rw.add(nxt.op, ins, hint=nxt.name, origin=nxt.origin, before=nxt)
    else:
        return False
    r = rw.add("reshape", [y], {"shape": dst}, hint=node.name, origin=node.origin, before=nxt)
    rw.replace_uses(nxt.output, r)
    return True


MOTION_RULES = (scalars_out_of_matmul, merge_scalar_muls, sink_unit_reshape)
