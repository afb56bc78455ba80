"""The node builder every decomposition uses: the replaced node's origin, readable names, events."""

from __future__ import annotations

import numpy as np

from anekit.ir.graph import Node
from anekit.passes.rewrite import Rewriter


class Emit:
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
