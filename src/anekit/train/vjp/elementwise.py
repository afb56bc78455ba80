"""Gradients of elementwise arithmetic (numpy broadcasting undone by `Emitter.sum_to`)."""

from __future__ import annotations

from anekit.ir.dtypes import FP16_MAX
from anekit.train.emit import Emitter
from anekit.train.vjp import rule


def _shapes(e: Emitter, node) -> tuple[tuple[int, ...], tuple[int, ...]]:
    a, b = node.inputs[:2]
    return e.shape(a), e.shape(b)


@rule("add")
def _add(e: Emitter, node, gys):
    (g,) = gys
    sa, sb = _shapes(e, node)
    return [e.sum_to(g, sa), e.sum_to(g, sb)]


@rule("sub")
def _sub(e: Emitter, node, gys):
    (g,) = gys
    sa, sb = _shapes(e, node)
    return [e.sum_to(g, sa), e.sum_to(e.neg(g), sb)]


@rule("mul")
def _mul(e: Emitter, node, gys):
    (g,) = gys
    a, b = node.inputs
    sa, sb = _shapes(e, node)
    return [e.sum_to(e.mul(g, b), sa), e.sum_to(e.mul(g, a), sb)]


@rule("div")
def _div(e: Emitter, node, gys):
    (g,) = gys
    a, b = node.inputs
    sa, sb = _shapes(e, node)
    ga = e.div(g, b)
    gb = e.neg(e.mul(ga, node.output))  # -g a / b^2 = -(g / b) (a / b)
    return [e.sum_to(ga, sa), e.sum_to(gb, sb)]


@rule("pow")
def _pow(e: Emitter, node, gys):
    (g,) = gys
    a, b = node.inputs
    sa, sb = _shapes(e, node)
    # d a^b / da = b a^(b-1); d/db = a^b ln a (defined for a > 0)
    ga = e.mul(g, e.mul(b, e("pow", a, e.sub(b, e.scalar(1.0, b)))))
    gb = e.mul(g, e.mul(node.output, e("log", a)))
    return [e.sum_to(ga, sa), e.sum_to(gb, sb)]  # unused gradients are pruned by build()


def _select(e: Emitter, node, gys, sign: float):
    """maximum/minimum: the gradient goes to the operand that was chosen (to b on ties)."""
    (g,) = gys
    a, b = node.inputs
    sa, sb = _shapes(e, node)
    take_a = e.step(e.scale(e.sub(a, b), sign))
    ga = e.mul(g, take_a)
    gb = e.sub(g, ga)
    return [e.sum_to(ga, sa), e.sum_to(gb, sb)]


@rule("maximum")
def _maximum(e, node, gys):
    return _select(e, node, gys, 1.0)


@rule("minimum")
def _minimum(e, node, gys):
    return _select(e, node, gys, -1.0)


@rule("neg")
def _neg(e, node, gys):
    return [e.neg(gys[0])]


@rule("identity")
def _identity(e, node, gys):
    return [gys[0]]


@rule("cast")
def _cast(e, node, gys):
    x = node.inputs[0]
    if not e.ed.values[x].dtype.is_float:
        return [None]
    return [e("cast", gys[0], to=e.ed.values[x].dtype)]


@rule("abs")
def _abs(e, node, gys):
    return [e.mul(gys[0], e("sign", node.inputs[0]))]


@rule("exp")
def _exp(e, node, gys):
    return [e.mul(gys[0], node.output)]


@rule("log")
def _log(e, node, gys):
    return [e.div(gys[0], node.inputs[0])]


@rule("sqrt")
def _sqrt(e, node, gys):
    return [e.div(e.scale(gys[0], 0.5), node.output)]


@rule("reciprocal")
def _reciprocal(e, node, gys):
    return [e.neg(e.mul(gys[0], e.mul(node.output, node.output)))]


@rule("sin")
def _sin(e, node, gys):
    return [e.mul(gys[0], e("cos", node.inputs[0]))]


@rule("cos")
def _cos(e, node, gys):
    return [e.neg(e.mul(gys[0], e("sin", node.inputs[0])))]


@rule("erf")
def _erf(e, node, gys):
    x = node.inputs[0]
    d = e.scale(e("exp", e.neg(e.mul(x, x))), 2.0 / 3.141592653589793**0.5)
    return [e.mul(gys[0], d)]


def inside_mask(e: Emitter, x: str, lo: float | None, hi: float | None) -> str | None:
    """1 where lo < x < hi, else 0 (`Emitter.step` at each bound); None when no bound
    lies inside fp16's range (the fp16-safety clamps), whose gradient passes through."""
    mask = None
    if lo is not None and lo > -FP16_MAX:
        mask = e.step(x, lo)
    if hi is not None and hi < FP16_MAX:
        upper = e.step(e.neg(x), -hi)
        mask = upper if mask is None else e.mul(mask, upper)
    return mask


@rule("clip")
def _clip(e, node, gys):
    mask = inside_mask(e, node.inputs[0], node.attrs["min"], node.attrs["max"])
    return [gys[0] if mask is None else e.mul(gys[0], mask)]


@rule("where")
def _where(e, node, gys):
    (g,) = gys
    cond, a, b = node.inputs
    zero = e.scalar(0.0, g)
    ga = e("where", cond, g, zero)
    gb = e("where", cond, zero, g)
    return [None, e.sum_to(ga, e.shape(a)), e.sum_to(gb, e.shape(b))]
