"""Canonicalize to a fixed point: fold, simplify, cancel layout chains, raise and fold patterns."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from anekit.ir.graph import Graph, Node
from anekit.passes.activations import ACTIVATION_RULES
from anekit.passes.chains import CHAIN_RULES
from anekit.passes.context import PassContext
from anekit.passes.folding import FOLD_RULES
from anekit.passes.motion import MOTION_RULES
from anekit.passes.rewrite import Rewriter, apply_rules
from anekit.passes.simplify import SIMPLIFY_RULES

CANONICAL_RULES = (*SIMPLIFY_RULES, *CHAIN_RULES, *ACTIVATION_RULES, *FOLD_RULES, *MOTION_RULES)
# constants up to this many elements are compared by value when looking for duplicates
CSE_CONST_ELEMENTS = 64


def _key(rw: Rewriter, node: Node) -> Hashable | None:
    """What makes two nodes compute the same thing: op, inputs (small constants by value), attrs."""
    if node.op == "ane_layer" or any(isinstance(v, np.ndarray) for v in node.attrs.values()):
        return None
    ins: list[Hashable] = []
    for i in node.inputs:
        c = rw.const(i)
        if c is not None and c.size <= CSE_CONST_ELEMENTS:
            ins.append((c.dtype.str, c.shape, c.tobytes()))
        else:
            ins.append(i)
    return node.op, tuple(ins), repr(sorted(node.attrs.items()))


def eliminate_common(graph: Graph, ctx: PassContext) -> Graph:
    """Nodes that compute the same value as an earlier node read that node's outputs instead."""
    rw = Rewriter(graph, ctx)
    seen: dict[Hashable, Node] = {}
    for stale in graph.nodes:
        node = rw.node(stale.name)  # its inputs may already read merged values
        key = _key(rw, node)
        if key is None:
            continue
        first = seen.setdefault(key, node)
        if first is node or any(rw.is_output(o) for o in node.outputs):
            continue
        ctx.removing(node.origin, f"computes the same value as '{first.name}'")
        for mine, theirs in zip(node.outputs, first.outputs, strict=True):
            rw.replace_uses(mine, theirs)
        ctx.count("common subexpressions")
    return rw.build()


def canonicalize(graph: Graph, ctx: PassContext) -> Graph:
    """Merge duplicates, then apply every canonical rule until none fires (dead code goes as
    values lose readers)."""
    return apply_rules(eliminate_common(graph, ctx), ctx, CANONICAL_RULES)
