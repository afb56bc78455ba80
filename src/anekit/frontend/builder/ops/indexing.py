"""Indexing builder ops: gather and embedding, gather_nd, the scatters and one_hot."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from anekit.frontend.builder.ops.common import TensorLike
from anekit.frontend.builder.tensor import Tensor, constant, record
from anekit.ir.dtypes import DType, to_dtype


def gather(x: TensorLike, indices: TensorLike, axis: int = 0, *, name: str | None = None) -> Tensor:
    if not isinstance(indices, Tensor):
        indices = constant(np.asarray(indices, dtype=np.int64))
    return record("gather", [x, indices], {"axis": axis}, name=name)


def embedding(ids: TensorLike, table: TensorLike, *, name: str | None = None) -> Tensor:
    """Rows of ``table`` [vocab, dim] selected by integer ``ids``."""
    return gather(table, ids, axis=0, name=name)


def gather_nd(
    x: TensorLike, indices: TensorLike, batch_dims: int = 0, *, name: str | None = None
) -> Tensor:
    return record("gather_nd", [x, indices], {"batch_dims": batch_dims}, name=name)


def scatter_nd(
    x: TensorLike,
    indices: TensorLike,
    updates: TensorLike,
    reduction: str = "none",
    *,
    name: str | None = None,
) -> Tensor:
    return record("scatter_nd", [x, indices, updates], {"reduction": reduction}, name=name)


def scatter_elements(
    x: TensorLike,
    indices: TensorLike,
    updates: TensorLike,
    axis: int = 0,
    reduction: str = "none",
    *,
    name: str | None = None,
) -> Tensor:
    attrs = {"axis": axis, "reduction": reduction}
    return record("scatter_elements", [x, indices, updates], attrs, name=name)


def one_hot(
    indices: TensorLike,
    depth: int,
    axis: int = -1,
    values: Sequence[float] = (0.0, 1.0),
    dtype: str | DType = "fp32",
    *,
    name: str | None = None,
) -> Tensor:
    """values[1] at each index along a new axis of size depth, values[0] elsewhere."""
    table = constant(np.asarray(values, dtype=to_dtype(dtype).numpy))
    return record("one_hot", [indices, table], {"depth": depth, "axis": axis}, name=name)
