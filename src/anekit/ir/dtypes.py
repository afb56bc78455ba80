"""The tensor element types of the IR and their numpy equivalents."""

from __future__ import annotations

from enum import StrEnum

import numpy as np

# the largest finite fp16 value: what the engine saturates to, and what the simulator checks
FP16_MAX = float(np.finfo(np.float16).max)  # 65504.0
# the additive attention mask of a hidden position: -inf would make a fully masked row's
# softmax 0/0 = NaN, and -1e4 still underflows exp to 0 in fp16 while staying finite
MASK_VALUE = -1e4


class DType(StrEnum):
    """An IR element type. The string value is the canonical spelling (also MIL's)."""

    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"
    UINT8 = "uint8"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"

    @property
    def numpy(self) -> np.dtype:
        return _TO_NUMPY[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.FP32, DType.FP16)

    @property
    def is_int(self) -> bool:
        return self in (DType.INT8, DType.UINT8, DType.INT32, DType.INT64)

    @property
    def itemsize(self) -> int:
        return _TO_NUMPY[self].itemsize

    def __str__(self) -> str:
        return self.value


_TO_NUMPY: dict[DType, np.dtype] = {
    DType.FP32: np.dtype(np.float32),
    DType.FP16: np.dtype(np.float16),
    DType.INT8: np.dtype(np.int8),
    DType.UINT8: np.dtype(np.uint8),
    DType.INT32: np.dtype(np.int32),
    DType.INT64: np.dtype(np.int64),
    DType.BOOL: np.dtype(np.bool_),
}
_FROM_NUMPY: dict[np.dtype, DType] = {v: k for k, v in _TO_NUMPY.items()}
_ALIASES: dict[str, DType] = {
    "float32": DType.FP32,
    "float": DType.FP32,
    "float16": DType.FP16,
    "half": DType.FP16,
    "bool_": DType.BOOL,
}


def to_dtype(value: DType | str | np.dtype | type) -> DType:
    """Normalise a dtype given as a DType, a spelling ('fp32', 'float32') or a numpy dtype."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        key = value.lower()
        if key in _ALIASES:
            return _ALIASES[key]
        try:
            return DType(key)
        except ValueError:
            pass
    try:
        np_dtype = np.dtype(value)
    except TypeError:
        np_dtype = None
    if np_dtype is not None and np_dtype in _FROM_NUMPY:
        return _FROM_NUMPY[np_dtype]
    valid = ", ".join(d.value for d in DType)
    raise ValueError(f"unsupported dtype {value!r}; anekit tensors are one of: {valid}")


def dtype_of_array(array: np.ndarray) -> DType:
    """The IR dtype of a numpy array (float64 and other wide types are not IR types)."""
    return to_dtype(array.dtype)
