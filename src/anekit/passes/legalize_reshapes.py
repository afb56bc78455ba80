"""Layout-free reshapes folded into the layer that produces them.

A reduction with keepdims=False followed by a reshape that puts the reduced unit axes back
(global average pooling to [N, C] and then [N, C, 1, 1] for a classifier's 1x1 conv) is the
same reduction with keepdims=True: the reshape moves no data in the engine's [N, C, H, W]
layout but would cost an engine layer of its own (a residual CNN's 11 layers where 10 do).
"""

from __future__ import annotations

from anekit.ir.graph import Graph, Node
from anekit.passes.context import PassContext
from anekit.passes.rewrite import Rewriter, apply_rules, rule

_REDUCTIONS = frozenset({"reduce_sum", "reduce_mean", "reduce_max", "reduce_min"})


@rule("reshape")
def reshape_into_keepdims(rw: Rewriter, node: Node) -> bool:
    src = rw.producer(node.inputs[0])
    if src is None or src.op not in _REDUCTIONS or src.attrs.get("keepdims", True):
        return False
    if not rw.single_use(src.output) or src.attrs.get("noop_with_empty_axes"):
        return False
    x = src.inputs[0]
    rank = rw.value(x).rank
    axes = {a % rank for a in (src.attrs["axes"] or range(rank))}
    kept = tuple(1 if i in axes else d for i, d in enumerate(rw.shape(x)))
    if kept != rw.shape(node.output):
        return False
    y = rw.add(
        src.op, list(src.inputs), {**src.attrs, "keepdims": True},
        hint=src.name, origin=src.origin + node.origin, before=src,
    )  # fmt: skip
    rw.ctx.event(node.origin, "folded", f"reshape folded into '{src.name}' (keepdims)")
    rw.replace_uses(node.output, y)
    return True


def fold_reshapes(graph: Graph, ctx: PassContext) -> Graph:
    """Fold reshapes that only restore a reduction's unit axes into the reduction."""
    return apply_rules(graph, ctx, (reshape_into_keepdims,))
