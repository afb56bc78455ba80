"""Helpers shared by the kernels: reading const parameters, axes, and bounded result sizes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from anekit import budget
from anekit.formats.mil.types import MAX_TENSOR_ELEMENTS

# The largest tensor a kernel will create from sizes found in a program or its inputs.
MAX_ELEMENTS = MAX_TENSOR_ELEMENTS

F32 = np.float32
# Results this small are not put to the memory budget: a training step sizes hundreds of
# them, and asking (~4 us: an absent environment variable's lookup and the message) costs
# more than the allocation.
UNCHECKED_BYTES = 1 << 16


def as_int(value: Any) -> int:
    """A scalar int parameter (0-d array or 1-element tensor)."""
    array = np.asarray(value)
    if array.size != 1:
        raise ValueError(f"expected one integer, got shape {list(array.shape)}")
    return int(array.reshape(-1)[0])


def as_ints(value: Any) -> tuple[int, ...]:
    """An int tensor parameter as a tuple (a scalar becomes a 1-tuple)."""
    array = np.asarray(value)
    if array.dtype.kind in "iu":  # tolist() already gives Python ints (asked every step)
        return tuple(array.reshape(-1).tolist())
    return tuple(int(v) for v in array.reshape(-1).tolist())


def as_bool(value: Any) -> bool:
    array = np.asarray(value)
    if array.size != 1:
        raise ValueError(f"expected one bool, got shape {list(array.shape)}")
    return bool(array.reshape(-1)[0])


def as_bools(value: Any) -> tuple[bool, ...]:
    return tuple(bool(v) for v in np.asarray(value).reshape(-1).tolist())


def as_float(value: Any) -> float:
    array = np.asarray(value)
    if array.size != 1:
        raise ValueError(f"expected one number, got shape {list(array.shape)}")
    return float(array.reshape(-1)[0])


def as_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    array = np.asarray(value, dtype=object)
    if array.size == 1 and isinstance(array.reshape(-1)[0], str):
        return array.reshape(-1)[0]
    raise ValueError(f"expected a string, got {value!r}")


def axis_of(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` made non-negative."""
    if not -rank <= axis < rank:
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def axes_of(axes: Sequence[int], rank: int, what: str = "axes") -> tuple[int, ...]:
    """Distinct, non-negative axes."""
    out = tuple(axis_of(a, rank, what) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"{what} {list(axes)} repeat an axis")
    return out


def checked_shape(shape: Sequence[int], what: str = "result", itemsize: int = 4) -> tuple[int, ...]:
    """A shape of non-negative ints whose element count stays within MAX_ELEMENTS, and whose
    bytes (``itemsize`` each) within the memory budget."""
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise ValueError(f"{what} shape {list(dims)} has a negative dimension")
    if math.prod(dims) > MAX_ELEMENTS:
        raise ValueError(
            f"{what} shape {list(dims)} has {math.prod(dims)} elements, more than the "
            f"simulator's limit of {MAX_ELEMENTS}"
        )
    nbytes = math.prod(dims) * itemsize
    if nbytes > UNCHECKED_BYTES:
        budget.check(nbytes, f"the {what} of shape {list(dims)}")
    return dims


def float32(value: Any) -> np.ndarray:
    """``value`` as float32 (fp16 and fp32 values already are; exact for both)."""
    return np.asarray(value, dtype=F32)
