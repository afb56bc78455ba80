"""Gradient of matmul (numpy semantics: 1-D operands, batch broadcasting)."""

from __future__ import annotations

import numpy as np

from anekit.train.emit import Emitter
from anekit.train.vjp import rule


def _swap_last(e: Emitter, v: str) -> str:
    r = e.rank(v)
    return e.transpose(v, (*range(r - 2), r - 1, r - 2))


@rule("matmul")
def _matmul(e: Emitter, node, gys):
    (g,) = gys
    a, b = node.inputs
    sa, sb = e.shape(a), e.shape(b)
    # promote 1-D operands as numpy does: a [k] -> [1, k], b [k] -> [k, 1]
    a2 = e.reshape(a, (1, sa[0])) if len(sa) == 1 else a
    b2 = e.reshape(b, (sb[0], 1)) if len(sb) == 1 else b
    out = list(e.shape(g))
    if len(sa) == 1:
        out.insert(len(out) - (0 if len(sb) == 1 else 1), 1)
    if len(sb) == 1:
        out.append(1)
    g2 = e.reshape(g, out)
    if len(e.shape(b2)) == 2 and len(e.shape(a2)) > 2:
        # a linear layer: fold the batch axes into rows so the weight gradient is one product
        rows = int(np.prod(e.shape(a2)[:-1]))
        a_flat = e.reshape(a2, (rows, e.shape(a2)[-1]))
        g_flat = e.reshape(g2, (rows, out[-1]))
        ga = e("matmul", g2, _swap_last(e, b2))
        gb = e("matmul", _swap_last(e, a_flat), g_flat)
    else:
        ga = e("matmul", g2, _swap_last(e, b2))
        gb = e("matmul", _swap_last(e, a2), g2)
    ga = e.sum_to(ga, e.shape(a2))
    gb = e.sum_to(gb, e.shape(b2))
    return [e.reshape(ga, sa), e.reshape(gb, sb)]
