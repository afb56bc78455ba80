"""Linear (de)quantization to int8/uint8: per tensor, per axis or per block along an axis."""

from __future__ import annotations

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types, normalize_axis
from anekit.ir.registry import Attr, InferError, TensorType, declare

QUANT_DTYPES = (DType.INT8, DType.UINT8, DType.INT32)
_QUANT_ATTRS = (
    Attr("axis", "int", 1, doc="the quantized axis of per-axis and blocked parameters"),
    Attr("block_size", "int", 0, doc="0: per tensor or per axis; n: blocks of n along axis"),
)


def check_params(x: TensorType, scale: TensorType, zp: TensorType | None, attrs: Attrs) -> None:
    """Scale (and zero point) must be per tensor, per axis, or blocked along the axis."""
    if not scale.dtype.is_float:
        raise InferError(f"scale must be a float tensor, got {scale.dtype}")
    per_tensor = scale.numel == 1 and scale.rank <= 1
    # onnxruntime's quantize_static writes bias dequantizers with a [1] scale and a scalar zero
    # point: any one-element pair of rank <= 1 is per tensor
    if (
        zp is not None
        and zp.shape != scale.shape
        and not (per_tensor and zp.numel == 1 and zp.rank <= 1)
    ):
        raise InferError(f"zero point {list(zp.shape)} and scale {list(scale.shape)} differ")
    if per_tensor:
        return
    axis = normalize_axis(attrs["axis"], x.rank)
    block = attrs["block_size"]
    if not block:
        if scale.shape != (x.shape[axis],):
            raise InferError(
                f"per-axis scale must be [{x.shape[axis]}] (axis {axis}), got {list(scale.shape)}"
            )
        return
    want = list(x.shape)
    want[axis] = -(-x.shape[axis] // block)
    if block < 0 or list(scale.shape) != want:
        raise InferError(
            f"blocked scale for blocks of {block} on axis {axis} must be {want}, "
            f"got {list(scale.shape)}"
        )


def expand_param(p: np.ndarray, shape: tuple[int, ...], axis: int, block: int) -> np.ndarray:
    """A scale or zero point broadcastable against a tensor of ``shape``."""
    if p.size == 1 and p.ndim <= 1:
        return p.reshape(())
    axis = axis % len(shape)
    if not block:
        dims = [1] * len(shape)
        dims[axis] = p.size
        return p.reshape(dims)
    return np.take(np.repeat(p, block, axis=axis), np.arange(shape[axis]), axis=axis)


def _quantize_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    if not x.dtype.is_float:
        raise InferError(f"quantize_linear takes a float input, got {x.dtype}")
    check_params(x, scale, zp, attrs)
    dtype = attrs["dtype"]
    if dtype not in (DType.INT8, DType.UINT8):
        raise InferError(f"quantized dtype must be int8 or uint8, got {dtype}")
    if zp is not None and zp.dtype != dtype:
        raise InferError(f"zero point is {zp.dtype}, the output {dtype}")
    return [TensorType(x.shape, dtype)]


@declare(
    "quantize_linear",
    inputs=("x", "scale", "zero_point?"),
    attrs=(*_QUANT_ATTRS, Attr("dtype", "dtype", DType.UINT8)),
    infer=_quantize_infer,
)
def quantize_linear(x, scale, zero_point, axis, block_size, dtype):
    """saturate(round_half_even(x / scale) + zero_point) to int8 or uint8"""
    s = expand_param(scale.astype(np.float32), x.shape, axis, block_size)
    q = np.rint(x / s)
    if zero_point is not None:
        q = q + expand_param(zero_point, x.shape, axis, block_size).astype(np.float32)
    info = np.iinfo(dtype.numpy)
    return np.clip(np.nan_to_num(q), info.min, info.max).astype(dtype.numpy)


def _dequantize_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    if x.dtype not in QUANT_DTYPES:
        raise InferError(f"dequantize_linear takes int8, uint8 or int32, got {x.dtype}")
    check_params(x, scale, zp, attrs)
    if zp is not None and zp.dtype != x.dtype:
        raise InferError(f"zero point is {zp.dtype}, the input {x.dtype}")
    return [TensorType(x.shape, scale.dtype)]


@declare(
    "dequantize_linear",
    inputs=("x", "scale", "zero_point?"),
    attrs=_QUANT_ATTRS,
    infer=_dequantize_infer,
)
def dequantize_linear(x, scale, zero_point, axis, block_size):
    """(x - zero_point) * scale, in the scale's float type"""
    xi = x.astype(np.int64)
    if zero_point is not None:
        xi = xi - expand_param(zero_point, x.shape, axis, block_size).astype(np.int64)
    return xi.astype(np.float32) * expand_param(scale.astype(np.float32), x.shape, axis, block_size)
