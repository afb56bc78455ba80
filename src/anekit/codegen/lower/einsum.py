"""Lowering of einsum to transposes, reshapes, reductions and one batched matmul.

Two operands: labels only in one operand and not in the output are summed first; then each
operand is transposed to (batch, free, contracted) and flattened to rank 3, one matmul
contracts them, and the result is unflattened and transposed to the output's label order.
One operand: a sum over the dropped labels and a transpose. Ellipses and labels repeated
within one operand (diagonals) are refused with a clear message.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import numpy as np

from anekit.codegen.lower.context import Lowering
from anekit.codegen.lower.nn import matmul

LowerFn = Callable[[Lowering], str]


def _parse(lo: Lowering, n: int) -> tuple[list[str], str]:
    eq = lo.attrs["equation"].replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if "..." in eq:
        raise lo.error("einsum with an ellipsis has no MIL lowering here")
    if len(terms) != n or any(len(set(t)) != len(t) for t in terms):
        raise lo.error(f"einsum '{eq}': repeated labels within an operand are not supported")
    if not arrow:
        counts = {c: lhs.count(c) for c in lhs if c != ","}
        rhs = "".join(sorted(c for c, k in counts.items() if k == 1))
    return terms, rhs


def _sum_out(lo: Lowering, var: str, labels: str, shape: tuple[int, ...], keep: set[str]):  # noqa: ANN202
    """Sum the labels of one operand that are not in ``keep``."""
    drop = [i for i, c in enumerate(labels) if c not in keep]
    if not drop:
        return var, labels, shape
    new_shape = tuple(d for i, d in enumerate(shape) if i not in drop)
    var = lo.tmp("reduce_sum", {"x": var, "axes": lo.p("axes", drop), "keep_dims": lo.p("keep_dims", False)},
                 new_shape, hint="summed")  # fmt: skip
    return var, "".join(c for i, c in enumerate(labels) if i not in drop), new_shape


def _arrange(lo: Lowering, var: str, labels: str, shape: tuple[int, ...], order: str):  # noqa: ANN202
    perm = [labels.index(c) for c in order]
    if perm == list(range(len(perm))):
        return var
    return lo.tmp(
        "transpose", {"x": var, "perm": lo.p("perm", perm)}, tuple(shape[p] for p in perm)
    )


def _reshape(lo: Lowering, var: str, shape: tuple[int, ...]) -> str:
    return lo.tmp("reshape", {"x": var, "shape": lo.p("shape", list(shape))}, shape)


def _einsum(lo: Lowering) -> str:
    args = [a for a in lo.call.args if a is not None]
    terms, out = _parse(lo, len(args))
    if len(args) == 1:
        var, labels, shape = _sum_out(lo, lo.var(args[0]), terms[0], args[0].shape, set(out))
        perm = [labels.index(c) for c in out]
        if perm == list(range(len(perm))):
            return lo.alias(var)
        return lo.out("transpose", {"x": var, "perm": lo.p("perm", perm)})
    if len(args) != 2:
        raise lo.error("einsum of more than two operands has no MIL lowering here")
    (ta, tb), (a, b) = terms, args
    sizes = {c: d for t, arg in ((ta, a), (tb, b)) for c, d in zip(t, arg.shape, strict=True)}
    if any(
        sizes[c] != d for t, arg in ((ta, a), (tb, b)) for c, d in zip(t, arg.shape, strict=True)
    ):
        raise lo.error("einsum operands that broadcast a label have no MIL lowering here")
    va, ta, sa = _sum_out(lo, lo.var(a), ta, a.shape, set(tb) | set(out))
    vb, tb, sb = _sum_out(lo, lo.var(b), tb, b.shape, set(ta) | set(out))
    batch = [c for c in ta if c in tb and c in out]
    contract = [c for c in ta if c in tb and c not in out]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]

    def size(labels: list[str]) -> int:
        return int(np.prod([sizes[c] for c in labels], dtype=np.int64))

    va = _arrange(lo, va, ta, sa, "".join(batch + free_a + contract))
    vb = _arrange(lo, vb, tb, sb, "".join(batch + contract + free_b))
    va = _reshape(lo, va, (size(batch), size(free_a), size(contract)))
    vb = _reshape(lo, vb, (size(batch), size(contract), size(free_b)))
    product = matmul(lo, va, vb, out=False, shape=(size(batch), size(free_a), size(free_b)))
    labels = batch + free_a + free_b
    full = tuple(sizes[c] for c in labels)
    perm = [labels.index(c) for c in out]
    if perm == list(range(len(perm))):
        return lo.out("reshape", {"x": product, "shape": lo.p("shape", list(full))})
    product = _reshape(lo, product, full)
    return lo.out("transpose", {"x": product, "perm": lo.p("perm", perm)})


LOWERINGS: MappingProxyType[str, LowerFn] = MappingProxyType({"einsum": _einsum})
