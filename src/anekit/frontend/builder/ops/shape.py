"""Shape builder ops: reshape and its spellings, transpose, concat, split, slice, expand, tile, pad."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.builder.ops.common import TensorLike
from anekit.frontend.builder.tensor import Tensor, as_tensor, record


def _resolve_shape(x: Tensor, shape: Sequence[int]) -> tuple[int, ...]:
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise ModelError(f"reshape target {shape} has more than one -1")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or x.type.numel % known:
            raise ModelError(f"cannot reshape {list(x.shape)} to {shape}")
        shape[shape.index(-1)] = x.type.numel // known
    return tuple(shape)


def reshape(x: TensorLike, shape: Sequence[int], *, name: str | None = None) -> Tensor:
    """Reshape to ``shape`` (one -1 allowed)."""
    x = as_tensor(x)
    return record("reshape", [x], {"shape": _resolve_shape(x, shape)}, name=name)


def flatten(x: TensorLike, start_dim: int = 1, *, name: str | None = None) -> Tensor:
    x = as_tensor(x)
    start = start_dim % max(x.rank, 1)
    return reshape(x, x.shape[:start] + (-1,), name=name)


def squeeze(x: TensorLike, axes: Sequence[int] | None = None, *, name: str | None = None) -> Tensor:
    x = as_tensor(x)
    axes_n = (
        {a % x.rank for a in axes}
        if axes is not None
        else {i for i, d in enumerate(x.shape) if d == 1}
    )
    return reshape(x, [d for i, d in enumerate(x.shape) if i not in axes_n], name=name)


def unsqueeze(x: TensorLike, axes: Sequence[int] | int, *, name: str | None = None) -> Tensor:
    x = as_tensor(x)
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    out_rank = x.rank + len(axes)
    pos = {a % out_rank for a in axes}
    it = iter(x.shape)
    return reshape(x, [1 if i in pos else next(it) for i in range(out_rank)], name=name)


def transpose(
    x: TensorLike, perm: Sequence[int] | None = None, *, name: str | None = None
) -> Tensor:
    """Permute axes (reverse them when ``perm`` is None)."""
    x = as_tensor(x)
    perm = tuple(reversed(range(x.rank))) if perm is None else tuple(p % x.rank for p in perm)
    return record("transpose", [x], {"perm": perm}, name=name)


permute = transpose


def concat(xs: Sequence[TensorLike], axis: int = 0, *, name: str | None = None) -> Tensor:
    return record("concat", list(xs), {"axis": axis}, name=name)


def split(
    x: TensorLike, sizes: Sequence[int], axis: int = 0, *, name: str | None = None
) -> tuple[Tensor, ...]:
    out = record("split", [x], {"axis": axis, "sizes": tuple(sizes)}, name=name)
    return out if isinstance(out, tuple) else (out,)


def slice(  # noqa: A001
    x: TensorLike,
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
    *,
    name: str | None = None,
) -> Tensor:
    attrs = {"starts": starts, "ends": ends, "axes": axes or (), "steps": steps or ()}
    return record("slice", [x], attrs, name=name)


def expand(x: TensorLike, shape: Sequence[int], *, name: str | None = None) -> Tensor:
    return record("expand", [x], {"shape": tuple(shape)}, name=name)


def tile(x: TensorLike, repeats: Sequence[int], *, name: str | None = None) -> Tensor:
    return record("tile", [x], {"repeats": tuple(repeats)}, name=name)


def pad(
    x: TensorLike,
    pads: Sequence[int],
    mode: str = "constant",
    value: float = 0.0,
    *,
    name: str | None = None,
) -> Tensor:
    """Pad with ONNX-style ``pads`` (all begins, then all ends)."""
    return record("pad", [x], {"pads": tuple(pads), "mode": mode, "value": value}, name=name)
