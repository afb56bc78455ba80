"""Quantization builder ops: quantize_linear and dequantize_linear (per tensor or per axis)."""

from __future__ import annotations

import numpy as np

from anekit.frontend.builder.ops.common import TensorLike
from anekit.frontend.builder.tensor import Tensor, constant, record
from anekit.ir.dtypes import DType


def _param(value: TensorLike) -> Tensor:
    """A scale or zero point as a tensor of its own dtype (not the data's)."""
    return value if isinstance(value, Tensor) else constant(np.asarray(value))


def quantize_linear(
    x: TensorLike,
    scale: TensorLike,
    zero_point: TensorLike | None = None,
    axis: int = 1,
    dtype: str | DType = "uint8",
    *,
    name: str | None = None,
) -> Tensor:
    """saturate(round(x / scale) + zero_point) as int8/uint8; per tensor or per ``axis``."""
    attrs = {"axis": axis, "dtype": dtype}
    if zero_point is not None and not isinstance(zero_point, Tensor):
        zero_point = constant(np.asarray(zero_point), dtype=dtype)
    return record("quantize_linear", [x, _param(scale), zero_point], attrs, name=name)


def dequantize_linear(
    x: TensorLike,
    scale: TensorLike,
    zero_point: TensorLike | None = None,
    axis: int = 1,
    *,
    name: str | None = None,
) -> Tensor:
    """(x - zero_point) * scale; per tensor or per ``axis``."""
    zp = None if zero_point is None else _param(zero_point)
    return record("dequantize_linear", [x, _param(scale), zp], {"axis": axis}, name=name)
