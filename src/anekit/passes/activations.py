"""Written-out activations raised to one op: exact and tanh GELU as exporters spell them, SiLU."""

from __future__ import annotations

import numpy as np

from anekit.ir.graph import Node
from anekit.passes.rewrite import Rewriter, is_close, live_and_const, op, rule, scalar_value

_SQRT1_2 = float(np.sqrt(0.5))
_SQRT2 = float(np.sqrt(2.0))
_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
_GELU_CUBIC = 0.044715


def _other(node: Node, v: str) -> str | None:
    """The other input of a binary node that reads ``v`` once."""
    a, b = node.inputs
    if a == v and b != v:
        return b
    if b == v and a != v:
        return a
    return None


def _const_is(rw: Rewriter, name: str | None, value: float) -> bool:
    return name is not None and is_close(scalar_value(rw.const(name)), value)


def _half_x_times(rw: Rewriter, v: str, x: str) -> list[Node] | None:
    """The mul nodes computing 0.5 * x * v in any association, last one last (v single-use)."""
    m1 = rw.sole_user(v)
    if m1 is None or m1.op != "mul":
        return None
    other = _other(m1, v)
    if other is None:
        return None
    after = rw.sole_user(m1.output)
    if other == x:
        if after is not None and after.op == "mul" and _const_is(rw, _other(after, m1.output), 0.5):
            return [m1, after]
        if after is not None and after.op == "div" and after.inputs[0] == m1.output:
            return [m1, after] if _const_is(rw, after.inputs[1], 2.0) else None
        return None
    if _const_is(rw, other, 0.5):
        if after is not None and after.op == "mul" and _other(after, m1.output) == x:
            return [m1, after]
        return None
    half = rw.producer(other)
    if half is not None and half.op == "mul" and rw.single_use(other) and x in half.inputs:
        if _const_is(rw, _other(half, x), 0.5):
            return [half, m1]
    return None


def _one_plus(rw: Rewriter, v: str) -> Node | None:
    """The add node computing v + 1 (v single-use)."""
    a = rw.sole_user(v)
    if a is not None and a.op == "add" and _const_is(rw, _other(a, v), 1.0):
        return a
    return None


def _replace_with_gelu(rw: Rewriter, x: str, nodes: list[Node], approximate: str) -> bool:
    last = nodes[-1]
    if rw.value(last.output).type != rw.value(x).type:
        return False
    origin = tuple(dict.fromkeys(o for n in nodes for o in n.origin))
    y = rw.add(
        "gelu", [x], {"approximate": approximate}, hint=last.name, origin=origin, before=last
    )
    form = "exact" if approximate == "none" else "tanh"
    rw.ctx.event(origin, "rewritten", f"part of a written-out GELU ({form} form), raised to one op")
    rw.replace_uses(last.output, y)
    return True


@rule("erf")
def raise_erf_gelu(rw: Rewriter, node: Node) -> bool:
    """0.5 * x * (1 + erf(x / sqrt 2)) -> gelu(x) (exact form)."""
    scale = rw.producer(node.inputs[0])
    if scale is None or not rw.single_use(node.inputs[0]) or scale.op not in ("mul", "div"):
        return False
    found = live_and_const(rw, scale)
    if found is None:
        return False
    x, c, ci = found
    value = scalar_value(c)
    if not (
        (scale.op == "mul" and is_close(value, _SQRT1_2))
        or (scale.op == "div" and ci == 1 and is_close(value, _SQRT2))
    ):
        return False
    plus = _one_plus(rw, node.output)
    tail = _half_x_times(rw, plus.output, x) if plus is not None else None
    if tail is None:
        return False
    return _replace_with_gelu(rw, x, [scale, node, plus, *tail], "none")


def _cube_of(rw: Rewriter, v: str) -> str | None:
    """x if ``v`` computes x**3 (pow or two multiplies), else None."""
    p = rw.producer(v)
    if p is None:
        return None
    if p.op == "pow" and _const_is(rw, p.inputs[1], 3.0):
        return p.inputs[0]
    if p.op == "mul":
        a, b = p.inputs
        for sq, x in ((a, b), (b, a)):
            q = rw.producer(sq)
            if q is not None and q.op == "mul" and q.inputs[0] == q.inputs[1] == x:
                return x
    return None


def _cube_nodes(rw: Rewriter, v: str) -> list[Node]:
    """The pow or the two multiplies computing x**3 into ``v``."""
    p = rw.producer(v)
    if p is None or p.op == "pow":
        return [p] if p is not None else []
    inner = [rw.producer(i) for i in p.inputs if rw.producer(i) is not None]
    return [*(n for n in inner if n.op == "mul"), p]


@rule("tanh")
def raise_tanh_gelu(rw: Rewriter, node: Node) -> bool:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) -> gelu(x, tanh)."""
    scale = rw.producer(node.inputs[0])
    if scale is None or scale.op != "mul" or not rw.single_use(node.inputs[0]):
        return False
    found = live_and_const(rw, scale)
    if found is None or not is_close(scalar_value(found[1]), _SQRT_2_OVER_PI):
        return False
    inner = rw.producer(found[0])
    if inner is None or inner.op != "add" or not rw.single_use(found[0]):
        return False
    for x, term in (inner.inputs, inner.inputs[::-1]):
        t = rw.producer(term)
        if t is None or t.op != "mul":
            continue
        tc = live_and_const(rw, t)
        if (
            tc is not None
            and is_close(scalar_value(tc[1]), _GELU_CUBIC)
            and _cube_of(rw, tc[0]) == x
        ):
            break
    else:
        return False
    plus = _one_plus(rw, node.output)
    tail = _half_x_times(rw, plus.output, x) if plus is not None else None
    if tail is None:
        return False
    cube = [n for n in _cube_nodes(rw, tc[0]) if rw.single_use(n.output)]
    return _replace_with_gelu(rw, x, [*cube, t, inner, scale, node, plus, *tail], "tanh")


_SWISH = op("mul", inputs=(None, op("sigmoid", single_use=True)))
_SWISH_FLIPPED = op("mul", inputs=(op("sigmoid", single_use=True), None))


@rule("mul")
def raise_silu(rw: Rewriter, node: Node) -> bool:
    """x * sigmoid(x) (either order) -> silu(x)."""
    found = _SWISH.match(rw, node) or _SWISH_FLIPPED.match(rw, node)
    if found is None:
        return False
    sig = found[1]
    x = sig.inputs[0]
    if _other(node, sig.output) != x or rw.value(node.output).type != rw.value(x).type:
        return False
    y = rw.add("silu", [x], hint=node.name, origin=sig.origin + node.origin, before=node)
    rw.replace_uses(node.output, y)
    return True


ACTIVATION_RULES = (raise_erf_gelu, raise_tanh_gelu, raise_silu)
