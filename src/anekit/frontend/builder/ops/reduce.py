"""Reduction builder ops: sums, means, extrema over axes, argmax, topk and cumsum."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from anekit.frontend.builder.ops.common import TensorLike, named
from anekit.frontend.builder.tensor import Tensor, record


def _reduce(op: str) -> Callable[..., Tensor]:
    def fn(
        x: TensorLike,
        axes: Sequence[int] | int | None = None,
        keepdims: bool = True,
        *,
        name: str | None = None,
    ) -> Tensor:
        axes_t = () if axes is None else (axes,) if isinstance(axes, int) else tuple(axes)
        return record(op, [x], {"axes": axes_t, "keepdims": keepdims}, name=name)

    return named(fn, op, f"{op} over ``axes`` (all axes when None).")


reduce_sum = _reduce("reduce_sum")
reduce_mean = _reduce("reduce_mean")
reduce_max = _reduce("reduce_max")
reduce_min = _reduce("reduce_min")


def argmax(
    x: TensorLike, axis: int = -1, keepdims: bool = False, *, name: str | None = None
) -> Tensor:
    return record("argmax", [x], {"axis": axis, "keepdims": keepdims}, name=name)


def topk(
    x: TensorLike, k: int, axis: int = -1, largest: bool = True, *, name: str | None = None
) -> tuple[Tensor, Tensor]:
    """(values, int64 indices) of the k largest (or smallest) entries, sorted."""
    return record("topk", [x], {"k": k, "axis": axis, "largest": largest}, name=name)


def cumsum(
    x: TensorLike,
    axis: int,
    exclusive: bool = False,
    reverse: bool = False,
    *,
    name: str | None = None,
) -> Tensor:
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    return record("cumsum", [x], attrs, name=name)
