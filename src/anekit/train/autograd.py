"""`grad`: reverse-mode differentiation of an IR graph into more IR.

The gradient nodes are appended to the forward graph, so the result is one graph that
computes the outputs, the loss and the gradients, and compiles and runs like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from anekit.errors import ModelError
from anekit.ir.graph import Graph
from anekit.train.emit import Emitter
from anekit.train.vjp import NON_DIFFERENTIABLE, rule_for


def grad_name(value: str) -> str:
    """The output name of the gradient of ``value``."""
    return f"{value}_grad"


def default_wrt(graph: Graph) -> list[str]:
    """Trainable values: the graph's declared parameters if it has any, else its float
    inputs and its float constants of rank >= 1."""
    declared = graph.metadata.get("parameters")
    if declared:
        return list(declared)
    names = [v.name for v in graph.inputs if v.dtype.is_float]
    names += [n for n, a in graph.constants.items() if a.dtype.kind == "f" and a.ndim >= 1]
    return names


def grad(graph: Graph, loss: str, wrt: Sequence[str] | None = None) -> Graph:
    """A graph computing ``graph``'s outputs, ``loss`` and the gradient of the sum of
    ``loss`` with respect to each value in ``wrt`` (inputs or constants), the gradient of
    ``w`` as the output ``w_grad``. Raises UnsupportedModelError naming the first node on
    the way whose op has no gradient rule."""
    if loss not in graph.values:
        raise ModelError(f"graph '{graph.name}' has no value named '{loss}' to differentiate")
    if not graph.values[loss].dtype.is_float:
        raise ModelError(f"the loss '{loss}' is {graph.values[loss].dtype}, not a float")
    wrt = list(default_wrt(graph) if wrt is None else wrt)
    for w in wrt:
        if w not in graph.values or (w not in graph.constants and w not in graph.input_names):
            raise ModelError(
                f"cannot differentiate with respect to '{w}'",
                hint="name graph inputs or constants (parameters) of the graph",
            )
    ed = graph.edit()
    e = Emitter(ed)
    grads = backprop(e, graph.nodes, loss, wrt)
    outs = list(graph.output_names)
    if loss not in outs:
        outs.append(loss)
    for w in wrt:
        g = grads.get(w)
        if g is None:  # the loss does not depend on w
            v = graph.values[w]
            g = e.const(np.zeros(v.shape, v.dtype.numpy), hint="zero")
        (named,) = ed.add("identity", [g], outputs=[grad_name(w)], name=f"grad/{w}")
        outs.append(named)
    ed.output_names = outs
    ed.name_outputs(outs)
    ed.metadata["gradients"] = {w: grad_name(w) for w in wrt}
    return ed.build()


def backprop(e: Emitter, nodes: Iterable, loss: str, wrt: Sequence[str]) -> dict[str, str]:
    """Append gradient nodes for ``loss`` (seeded with ones) to ``e``; return value -> its
    gradient for every value on a path from ``wrt`` to ``loss``."""
    nodes = list(nodes)
    needs = set(wrt)
    for n in nodes:  # values that depend on a wrt value
        if any(i in needs for i in n.inputs if i):
            needs.update(n.outputs)
    v = e.ed.values[loss]
    contributions: dict[str, list[str]] = {
        loss: [e.const(np.ones(v.shape, v.dtype.numpy), hint="seed")]
    }
    for node in reversed(nodes):
        if not any(o in contributions for o in node.outputs):
            continue
        if not any(i in needs for i in node.inputs if i) or node.op in NON_DIFFERENTIABLE:
            continue
        gys = [_total(e, contributions.get(o)) for o in node.outputs]
        gxs = rule_for(node)(e, node, gys)
        for i, gx in zip(node.inputs, gxs, strict=False):
            if i and gx is not None and i in needs:
                contributions.setdefault(i, []).append(gx)
    return {k: _total(e, parts) for k, parts in contributions.items() if k in needs or k == loss}


def _total(e: Emitter, parts: list[str] | None) -> str | None:
    if not parts:
        return None
    if len(parts) > 1:
        parts[:] = [e.accumulate(parts)]
    return parts[0]
