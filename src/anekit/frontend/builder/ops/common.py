"""What the builder op families share: the TensorLike alias and per-axis argument expansion."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from anekit.errors import ModelError

TensorLike = Any  # a Tensor, a numpy array or a Python number
OpFunction = Callable[..., Any]


def named(fn: OpFunction, name: str, doc: str) -> OpFunction:
    """A factory-made op function under its public name and docstring."""
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


def per_axis(v: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    """``v`` for each of ``n`` axes: one int repeated, or exactly ``n`` values."""
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    if len(v) != n:
        raise ModelError(f"{what} needs {n} values, got {list(v)}")
    return v
