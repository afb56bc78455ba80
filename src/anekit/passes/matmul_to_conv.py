"""ReplaceMatmulWithConv (ane-compiler): a constant-weight matmul whose weight fits on chip becomes
a resident 1x1 convolution; a larger weight stays a tiled matmul layer."""

from __future__ import annotations

from anekit.ir.graph import Graph, Node
from anekit.passes.context import PassContext
from anekit.passes.rewrite import Rewriter

FP16_BYTES = 2


def weight_budget(ctx: PassContext) -> int:
    """Bytes of fp16 weight that still count as resident (margin x on-chip budget)."""
    return int(ctx.options.onchip_margin * ctx.target.onchip_budget_bytes)


def _convert(rw: Rewriter, node: Node, budget: int) -> None:
    a, x = node.inputs
    w = rw.const(a)
    if w is None or w.ndim != 2 or rw.is_const(x) or rw.value(x).rank != 3:
        return
    n, k = w.shape
    nbytes = n * k * FP16_BYTES
    if nbytes > budget:
        rw.ctx.event(
            node.origin, "rewritten",
            f"stays a tiled matmul: its {nbytes / 2**20:.1f} MiB fp16 weight exceeds the "
            f"{budget / 2**20:.0f} MiB on-chip budget",
        )  # fmt: skip
        rw.ctx.count("kept as matmul (weight above the on-chip budget)")
        return
    lead, _, s = rw.shape(x)
    x4 = rw.add(
        "reshape",
        [x],
        {"shape": (lead, k, 1, s)},
        hint=f"{node.name}/x4",
        before=node,
    )
    w4 = rw.constant(w.reshape(n, k, 1, 1), f"{a}/conv")
    y4 = rw.add("conv", [x4, w4], hint=node.name, origin=node.origin, before=node)
    y = rw.add(
        "reshape",
        [y4],
        {"shape": (lead, n, s)},
        hint=f"{node.name}/y3",
        before=node,
    )
    rw.replace_uses(node.output, y)
    rw.ctx.count("matmul to 1x1 conv")


def matmul_to_conv(graph: Graph, ctx: PassContext) -> Graph:
    """Rewrite matmul(W [N, K] constant, x [L, K, S]) as a 1x1 conv when W fits the budget."""
    rw = Rewriter(graph, ctx)
    budget = weight_budget(ctx)
    for node in graph.nodes:
        if node.op == "matmul" and rw.has(node.name):
            _convert(rw, rw.node(node.name), budget)
    return rw.build()
