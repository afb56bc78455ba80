"""Shape and dtype inference helpers shared by the op declarations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.registry import InferError, TensorType

Types = Sequence[TensorType | None]
Attrs = Mapping[str, Any]


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """Numpy (multidirectional) broadcasting of static shapes."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise InferError(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def same_as(index: int = 0):
    def infer(ins: Types, attrs: Attrs) -> list[TensorType]:
        return [ins[index]]

    return infer


def float_only(ins: Types, op_inputs: Sequence[int] = (0,)) -> None:
    for i in op_inputs:
        t = ins[i]
        if t is not None and not t.dtype.is_float:
            raise InferError(f"input {i} must be a float tensor, got {t.dtype}")


def unary_float(ins: Types, attrs: Attrs) -> list[TensorType]:
    float_only(ins)
    return [ins[0]]


def broadcast(dtype: DType | None = None, *, same_dtype: bool = True):
    """Inference for broadcasting ops; output dtype is ``dtype`` or the first input's."""

    def infer(ins: Types, attrs: Attrs) -> list[TensorType]:
        present = [t for t in ins if t is not None]
        if same_dtype:
            kinds = {t.dtype for t in present}
            if len(kinds) > 1:
                raise InferError(f"inputs have different dtypes {sorted(map(str, kinds))}")
        shape = broadcast_shapes(*(t.shape for t in present))
        return [TensorType(shape, dtype or present[0].dtype)]

    return infer


def index_dtype_only(t: TensorType) -> None:
    """Indices are int32 or int64 tensors."""
    if t.dtype not in (DType.INT32, DType.INT64):
        raise InferError(f"indices must be int32 or int64, got {t.dtype}")


def normalize_axis(axis: int, rank: int, *, allow_end: bool = False) -> int:
    limit = rank + 1 if allow_end else rank
    if not -limit <= axis < limit:
        raise InferError(f"axis {axis} is out of range for rank {rank}")
    return axis % limit if limit else 0


def normalize_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    out = tuple(normalize_axis(a, rank) for a in axes)
    if len(set(out)) != len(out):
        raise InferError(f"axes {list(axes)} repeat an axis")
    return out


def numel(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))
