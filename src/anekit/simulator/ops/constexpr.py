"""Compressed-weight MIL ops (constexpr_*), evaluated once when the program loads, and (de)quantize.

- ``constexpr_affine_dequantize`` (iOS 16): ``scale * (data - zero_point)`` along ``axis``.
- ``constexpr_blockwise_shift_scale`` (iOS 18): the same per block, blocks implied by shapes.
- ``constexpr_cast`` (iOS 16): fp16 -> fp32.
- ``constexpr_lut_to_dense``: iOS 16 form (uint8 bytes of packed n-bit indices, ``shape``)
  and iOS 18 form (uint1..uint8 index tensor, per-block tables, vector palettes).
- ``constexpr_sparse_to_dense``: iOS 16 form (packed uint8 bit mask, ``shape``) and iOS 18
  form (a uint1 mask tensor of the output's shape).
- ``quantize`` / ``dequantize`` (iOS 17) for activations.

Dequantization computes in float32, as coremltools' reference does, then casts to the output
type (fp16 outputs are rounded to fp16 like any other result).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..registry import Signature, SimOp, op
from ..values import STORAGE
from ._util import F32, as_int, as_ints, as_str, axis_of, checked_shape


def _along(param: np.ndarray, data: np.ndarray, axis: int | None, name: str) -> np.ndarray:
    """A scalar or vector parameter shaped to broadcast against ``data`` along ``axis``."""
    if param.ndim == data.ndim:
        return param
    if param.ndim == 0:
        return param.reshape((1,) * data.ndim)
    if param.ndim != 1 or axis is None or param.shape[0] != data.shape[axis]:
        raise ValueError(
            f"{name} of shape {list(param.shape)} must be a scalar or a vector of "
            f"{data.shape[axis] if axis is not None else '?'} values (data's axis)"
        )
    shape = [1] * data.ndim
    shape[axis] = -1
    return param.reshape(shape)


def affine_dequantize(
    quantized_data: np.ndarray, zero_point: np.ndarray, scale: np.ndarray, axis: Any
) -> np.ndarray:
    ax = axis_of(as_int(axis), quantized_data.ndim)
    values = quantized_data.astype(F32) - _along(zero_point, quantized_data, ax, "zero_point")
    return (values * _along(scale, quantized_data, ax, "scale")).astype(F32)


def _repeat_blocks(param: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Each element of ``param`` repeated over its block of an array of ``shape``."""
    if param.ndim != len(shape):
        raise ValueError(f"{name} has rank {param.ndim}; the data has rank {len(shape)}")
    for axis, (size, count) in enumerate(zip(shape, param.shape, strict=True)):
        if count == 0 or size % count:
            raise ValueError(
                f"{name} has {count} values along axis {axis}, not a divisor of {size}"
            )
        if size != count:
            param = np.repeat(param, size // count, axis=axis)
    return param


def blockwise_shift_scale(
    data: np.ndarray, scale: np.ndarray, offset: np.ndarray | None = None
) -> np.ndarray:
    if data.ndim < 1:
        raise ValueError("data must be rank 1 or more")
    values = data.astype(F32)
    if offset is not None:
        if offset.shape != scale.shape:
            raise ValueError(f"offset {list(offset.shape)} must have scale's shape")
        values = values - _repeat_blocks(offset.astype(F32), data.shape, "offset")
    return values * _repeat_blocks(scale.astype(F32), data.shape, "scale")


def _check_blockwise(sig: Signature, opset: int) -> None:
    offset = sig.dtypes.get("offset")
    if offset is not None and offset not in ("fp16", "fp32") and offset != sig.dtypes["data"]:
        raise ValueError(f"offset is {offset}; it must be a float type or data's type")


def constexpr_cast(source_val: np.ndarray, output_dtype: Any) -> np.ndarray:
    return np.asarray(source_val, dtype=F32)


def _cast_outputs(sig: Signature) -> tuple[str, ...]:
    dtype = as_str(sig.consts["output_dtype"])
    if dtype != "fp32":
        raise ValueError(f"output_dtype {dtype!r}: only fp32 is supported")
    return ("fp32",)


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """``count`` values of ``bits`` bits, packed LSB first into bytes."""
    stream = np.unpackbits(np.asarray(packed, dtype=np.uint8).reshape(-1), bitorder="little")
    if stream.size < count * bits:
        raise ValueError(f"{packed.size} bytes hold fewer than {count} {bits}-bit values")
    groups = stream[: count * bits].reshape(count, bits).astype(np.uint16)
    return (groups << np.arange(bits, dtype=np.uint16)).sum(axis=1).astype(np.int64)


def lut_to_dense(
    indices: np.ndarray,
    lut: np.ndarray,
    shape: np.ndarray | None = None,
    vector_axis: Any = None,
) -> np.ndarray:
    if shape is not None:  # iOS 16: packed indices into one flat table
        dims = checked_shape(as_ints(shape), "lut_to_dense")
        if lut.ndim != 1 or lut.size not in (2, 4, 16, 64, 256):
            raise ValueError("lut must be a vector of 2, 4, 16, 64 or 256 entries")
        bits = int(math.log2(lut.size))
        count = math.prod(dims)
        if indices.ndim != 1 or indices.size != math.ceil(bits * count / 8):
            raise ValueError(f"indices must be {math.ceil(bits * count / 8)} packed bytes")
        return lut[_unpack(indices, bits, count)].reshape(dims)
    # iOS 18: lut [*blocks, palettes, vector]
    if lut.ndim != indices.ndim + 2:
        raise ValueError(f"lut must have rank {indices.ndim + 2} (indices' rank + 2)")
    palettes, vector = lut.shape[-2:]
    if palettes < 1 or palettes & (palettes - 1):
        raise ValueError(f"lut has {palettes} palettes, not a power of two")
    if indices.size and int(indices.max()) >= palettes:
        raise ValueError(f"an index is {int(indices.max())}; the lut has {palettes} entries")
    index = indices.astype(np.int64)
    if vector > 1:
        if vector_axis is None:
            raise ValueError("vector_axis is needed when the lut holds vectors")
        axis = axis_of(as_int(vector_axis), indices.ndim, "vector_axis")
        index = np.swapaxes(index, -1, axis)
        lut = np.swapaxes(lut, -3, axis)
    tables = _repeat_blocks(lut, index.shape + lut.shape[-2:], "lut")
    flat = tables.reshape(-1, palettes, vector)
    picked = flat[np.arange(flat.shape[0]), index.reshape(-1)]  # [elements, vector]
    out = picked.reshape(*index.shape[:-1], index.shape[-1] * vector)
    return np.swapaxes(out, -1, axis) if vector > 1 else out


def _lut_outputs(sig: Signature) -> tuple[str, ...]:
    return (sig.domains["T"],)


def sparse_to_dense(
    nonzero_data: np.ndarray, mask: np.ndarray, shape: np.ndarray | None = None
) -> np.ndarray:
    if shape is not None:  # iOS 16: packed bit mask and an explicit shape
        dims = checked_shape(as_ints(shape), "sparse_to_dense")
        count = math.prod(dims)
        if mask.ndim != 1 or mask.size != math.ceil(count / 8):
            raise ValueError(f"mask must be {math.ceil(count / 8)} packed bytes")
        bits = np.unpackbits(mask.astype(np.uint8), bitorder="little")
        if bits[count:].any():
            raise ValueError("padding bits of the mask must be zero")
        flags = bits[:count].astype(bool).reshape(dims)
    else:  # iOS 18: the mask is a uint1 tensor of the output's shape
        flags = mask.astype(bool)
    if nonzero_data.ndim != 1 or int(flags.sum()) != nonzero_data.size:
        raise ValueError(
            f"the mask sets {int(flags.sum())} positions but nonzero_data has "
            f"{nonzero_data.size} values"
        )
    out = np.zeros(flags.shape, dtype=nonzero_data.dtype)
    out[flags] = nonzero_data
    return out


def dequantize(
    input: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None, axis: Any = None
) -> np.ndarray:
    ax = None if axis is None else axis_of(as_int(axis), input.ndim)
    values = input.astype(F32)
    if zero_point is not None:
        values = values - _along(zero_point.astype(F32), input, ax, "zero_point")
    return values * _along(scale.astype(F32), input, ax, "scale")


def quantize(
    input: np.ndarray,
    scale: np.ndarray,
    output_dtype: Any,
    zero_point: np.ndarray | None = None,
    axis: Any = None,
) -> np.ndarray:
    dtype = as_str(output_dtype)
    if dtype not in ("int8", "uint8"):
        raise ValueError(f"output_dtype {dtype!r} is not int8 or uint8")
    ax = None if axis is None else axis_of(as_int(axis), input.ndim)
    values = np.round(input / _along(scale.astype(F32), input, ax, "scale"))
    if zero_point is not None:
        values = values + _along(zero_point.astype(F32), input, ax, "zero_point")
    info = np.iinfo(STORAGE[dtype])
    return np.clip(values, info.min, info.max).astype(STORAGE[dtype])


def _quantize_outputs(sig: Signature) -> tuple[str, ...]:
    dtype = as_str(sig.consts["output_dtype"])
    if dtype not in ("int8", "uint8"):
        raise ValueError(f"output_dtype {dtype!r} is not int8 or uint8")
    if "zero_point" in sig.dtypes and sig.dtypes["zero_point"] != dtype:
        raise ValueError(f"zero_point is {sig.dtypes['zero_point']}, output_dtype is {dtype}")
    return (dtype,)


_SUB_BYTE = "uint1|uint2|uint3|uint4|uint6|uint8"
_SMALL = "int4|uint4|int8|uint8|fp16|fp32"

OPS: tuple[SimOp, ...] = (
    op("constexpr_affine_dequantize", "quantized_data!:S zero_point!:Z scale!:D axis!:int32",
       "D", affine_dequantize, S="uint8|int8", Z="uint8|int8|fp32", D="fp16|fp32"),
    op("constexpr_blockwise_shift_scale", "data!:S scale!:D offset?!:O", "D",
       blockwise_shift_scale, check=_check_blockwise, S=_SMALL, D="fp16|fp32", O=_SMALL),
    op("constexpr_cast", "source_val!:fp16 output_dtype!:string", _cast_outputs,
       constexpr_cast, exact=True),
    op("constexpr_lut_to_dense", "indices!:I lut!:T shape?!:uint32 vector_axis?!:int32",
       _lut_outputs, lut_to_dense, exact=True, I=_SUB_BYTE, T="int8|uint8|fp16|fp32"),
    op("constexpr_sparse_to_dense", "nonzero_data!:T mask!:M shape?!:uint32", "T",
       sparse_to_dense, exact=True, T="int4|uint4|int8|uint8|fp16|fp32", M="uint1|uint8"),
    op("dequantize", "input:S zero_point?!:S scale!:D axis?!:int32", "D", dequantize,
       S="uint8|int8", D="fp16|fp32"),
    op("quantize", "input:S zero_point?!:D scale!:S axis?!:int32 output_dtype!:string",
       _quantize_outputs, quantize, S="fp16|fp32", D="uint8|int8"),
)  # fmt: skip
