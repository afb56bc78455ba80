"""Linear-algebra builder ops: matmul, linear (torch.nn.Linear weights), einsum and attention."""

from __future__ import annotations

import numpy as np

from anekit.frontend.builder.ops.common import TensorLike
from anekit.frontend.builder.tensor import Tensor, constant, record


def matmul(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    return record("matmul", [a, b], name=name)


def linear(
    x: TensorLike, weight: TensorLike, bias: TensorLike | None = None, *, name: str | None = None
) -> Tensor:
    """x @ weight^T + bias, with weight [out_features, in_features] as in torch.nn.Linear."""
    if isinstance(weight, Tensor):
        wt = record("transpose", [weight], {"perm": (1, 0)})
    else:
        wt = constant(np.ascontiguousarray(np.asarray(weight, dtype=np.float32).T))
    y = record("matmul", [x, wt], name=None if bias is not None else name)
    return y if bias is None else record("add", [y, bias], name=name)


def einsum(equation: str, *operands: TensorLike, name: str | None = None) -> Tensor:
    return record("einsum", list(operands), {"equation": equation}, name=name)


def attention(
    q: TensorLike,
    k: TensorLike,
    v: TensorLike,
    mask: TensorLike | None = None,
    *,
    scale: float | None = None,
    causal: bool = False,
    name: str | None = None,
) -> Tensor:
    """Scaled dot-product attention softmax(q k^T * scale + mask) v over the last two axes."""
    return record("attention", [q, k, v, mask], {"scale": scale, "causal": causal}, name=name)
