"""Inputs rescaled exactly: the program multiplies an input by a factor on the way in and the
graph absorbs it, so values too large for fp16 (int16-scale audio through an STFT) shrink
without changing the answer.

The factor travels forward through ops that are homogeneous in it: data movement, pooling,
ReLU and sums pass it on; a convolution or matmul with constant weights passes it on with its
bias scaled; products multiply factors, a square root halves its exponent; a constant added to
a scaled value is scaled with it. It is absorbed exactly where an op allows: a log adds
-log(factor); a norm takes its epsilon times factor^2 and is scale-free. Anywhere else (and
at the outputs) the value is divided by its factor before it is read. With a power of two
every step is exact in binary floating point.
"""

from __future__ import annotations

import math

import numpy as np

from anekit.errors import AnekitError
from anekit.ir.graph import Graph, Node
from anekit.passes.context import PassContext
from anekit.passes.rewrite import Rewriter

# ops whose output carries the factor of their first input unchanged
_PASS_FIRST = frozenset({
    "reshape", "transpose", "slice", "identity", "expand", "tile", "max_pool", "avg_pool",
    "relu", "depth_to_space", "space_to_depth", "split", "gather", "resize",
    "reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
})  # fmt: skip
_NORMS = frozenset({"layer_norm", "rms_norm", "instance_norm", "group_norm"})


def _const(rw: Rewriter, value: float, like: str, hint: str) -> str:
    return rw.constant(np.asarray(value, dtype=rw.value(like).dtype.numpy), hint)


def _unscaled(rw: Rewriter, node: Node, scale: dict[str, float]) -> None:
    """Divide every scaled input of ``node`` by its factor before the node reads it."""
    ins = list(node.inputs)
    for k, name in enumerate(ins):
        s = scale.get(name, 1.0)
        if name and s != 1.0:
            c = _const(rw, 1.0 / s, name, f"{name}/unscale")
            ins[k] = rw.add(
                "mul", [name, c], hint=f"{name}/unscaled", origin=node.origin, before=node
            )
    rw.put(node.with_(inputs=tuple(ins)))


def _scaled_const(rw: Rewriter, node: Node, index: int, s: float) -> None:
    ins = list(node.inputs)
    ins[index] = rw.constant(np.asarray(rw.const(ins[index]) * s, rw.const(ins[index]).dtype),
                             f"{node.name}/scaled")  # fmt: skip
    rw.put(node.with_(inputs=tuple(ins)))


def _propagate(rw: Rewriter, node: Node, scale: dict[str, float]) -> float | None:
    """The factor of ``node``'s output, rewriting the node to absorb or pass its inputs'
    factors; None: the node cannot, and reads its inputs unscaled."""
    op, ins = node.op, node.inputs
    s = [scale.get(i, 1.0) if i else 1.0 for i in ins]
    live = [k for k, i in enumerate(ins) if i and not rw.is_const(i)]
    if op in _PASS_FIRST and all(v == 1.0 for v in s[1:]):
        return s[0]
    if op == "concat" and len({s[k] for k in live}) == 1:
        return s[live[0]]
    if (
        op == "pad"
        and node.attrs.get("mode", "constant") == "constant"
        and not node.attrs.get("value")
    ):
        return s[0]
    if op in ("conv", "conv_transpose", "matmul") and all(v == 1.0 for v in s[1:]):
        if op == "matmul" or len(ins) < 3 or not ins[2]:
            return s[0]
        if rw.is_const(ins[2]):
            _scaled_const(rw, node, 2, s[0])
            return s[0]
        return None
    if op == "matmul" or op == "mul":
        return s[0] * s[1]
    if op == "div":
        return s[0] / s[1]
    if op == "sqrt":
        return math.sqrt(s[0])
    if op in ("add", "sub", "maximum", "minimum"):
        if len(live) == 2 and s[0] == s[1]:
            return s[0]
        if len(live) == 1:
            k = live[0]
            _scaled_const(rw, node, 1 - k, s[k])
            return s[k]
        return None
    if op == "log":
        y = rw.add("log", [ins[0]], hint=node.name, origin=node.origin, before=node)
        shift = _const(rw, -math.log(s[0]), node.output, f"{node.name}/unscale")
        out = rw.add(
            "add", [y, shift], hint=f"{node.name}/unscaled", origin=node.origin, before=node
        )
        rw.replace_uses(node.output, out)
        return 1.0
    if op in _NORMS and all(v == 1.0 for v in s[1:]):
        attrs = dict(node.attrs)
        attrs["epsilon"] = attrs["epsilon"] * s[0] ** 2
        rw.put(node.with_(attrs=attrs))
        return 1.0
    return None


def scale_inputs(graph: Graph, ctx: PassContext) -> Graph:
    """Multiply each input of ``ctx.options.input_scales`` by its factor and absorb it."""
    factors = dict(ctx.options.input_scales)
    if not factors:
        return graph
    rw = Rewriter(graph, ctx)
    scale: dict[str, float] = {}
    for name, f in factors.items():
        if name not in graph.input_names:
            raise AnekitError(
                f"input_scales names '{name}', which is not an input of the model",
                hint=f"the model's inputs: {', '.join(graph.input_names)}",
            )
        if not (math.isfinite(f) and f > 0):
            raise AnekitError(f"the scale of input '{name}' must be a positive number, not {f}")
        readers = rw.users(name)
        first = readers[0] if readers else None
        c = _const(rw, f, name, f"{name}/scale")
        scaled = rw.add("mul", [name, c], hint=f"{name}/scaled", before=first,
                        origin=first.origin if first else ())  # fmt: skip
        for reader in readers:
            rw.put(reader.with_(inputs=tuple(scaled if i == name else i for i in reader.inputs)))
        scale[scaled] = f
        ctx.count("scaled inputs")
    for name in rw.order():
        if not rw.has(name):
            continue
        node = rw.node(name)
        if not any(scale.get(i, 1.0) != 1.0 for i in node.inputs if i):
            continue
        # a graph output keeps its name and value: its node reads unscaled inputs unless it
        # absorbs the factor itself
        if (
            any(rw.is_output(o) for o in node.outputs)
            and node.op != "log"
            and node.op not in _NORMS
        ):
            _unscaled(rw, node, scale)
            continue
        factor = _propagate(rw, node, scale)
        if factor is None:
            _unscaled(rw, rw.node(name), scale)
            continue
        if rw.has(name):
            for o in rw.node(name).outputs:
                scale[o] = factor
    return rw.build()
