"""MIL literal values (scalars, tensors, BLOBFILE references, lists, tuples, dicts) and float spelling.

Values are exact: a float scalar holds the value rounded to its dtype (an ``fp16(0.1)`` holds
the fp16 nearest to 0.1) and prints as a C ``%a`` hex float, so print/parse round-trips bit
for bit. NaN is canonical (payloads are not kept); ``-0.0`` is kept.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from numbers import Integral, Real
from typing import TypeAlias

import numpy as np

from .types import (
    DictType,
    DType,
    ListType,
    MilTensorType,
    MilType,
    ScalarType,
    TupleType,
    dtype_info,
)


def format_float(value: float) -> str:
    """C ``%a`` spelling of a double: ``0x1.4p+3``, ``-0x0p+0``, ``inf``, ``nan``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = value.hex()  # e.g. -0x1.4000000000000p+3
    sign = "-" if text[0] == "-" else ""
    mantissa, exponent = text.lstrip("-")[2:].split("p")
    whole, _, fraction = mantissa.partition(".")
    fraction = fraction.rstrip("0")
    return f"{sign}0x{whole}{'.' + fraction if fraction else ''}p{exponent}"


def round_float(value: float, dtype: DType) -> float:
    """``value`` rounded to ``dtype`` (fp16/fp32/fp64), NaN made canonical."""
    if math.isnan(value):
        return math.nan
    if dtype.numpy == "float64":
        return float(value)
    with np.errstate(over="ignore"):
        return float(np.array(value, dtype=dtype.numpy_dtype))


def _coerce_scalar(value: object, dtype: DType) -> bool | int | float | str:
    if dtype.kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"a bool value must be True or False, not {value!r}")
        return bool(value)
    if dtype.kind == "string":
        if not isinstance(value, str):
            raise ValueError(f"a string value must be str, not {type(value).__name__}")
        return value
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{dtype.name} value {value!r} is a bool")
    if dtype.kind == "int":
        if not isinstance(value, Integral):
            raise ValueError(f"{dtype.name} value {value!r} is not an integer")
        number = int(value)
        if not dtype.low <= number <= dtype.high:
            raise ValueError(
                f"{number} is outside the {dtype.name} range [{dtype.low}, {dtype.high}]"
            )
        return number
    if not isinstance(value, Real):
        raise ValueError(f"{dtype.name} value {value!r} is not a number")
    return round_float(float(value), dtype)


def _bits(value: bool | int | float | str) -> object:
    """Equality key: floats by bit pattern (so NaN == NaN and -0.0 != 0.0)."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    return (type(value).__name__, value)


@dataclass(frozen=True, eq=False)
class Scalar:
    """A scalar literal: ``int32(1)``, ``fp16(0x1.4p+3)``, ``string("x")``, ``bool(true)``.

    ``type`` is a :class:`ScalarType`, or a rank-0 :class:`MilTensorType` for the older
    ``tensor<fp16, []>(0x1p+0)`` spelling (kept so such files print back the same way).
    """

    type: ScalarType | MilTensorType
    value: bool | int | float | str

    def __post_init__(self) -> None:
        if isinstance(self.type, MilTensorType):
            if self.type.rank != 0:
                raise ValueError(f"a scalar cannot have the tensor type {self.type}")
        elif not isinstance(self.type, ScalarType):
            raise ValueError(f"a scalar cannot have the type {self.type}")
        object.__setattr__(self, "value", _coerce_scalar(self.value, self.dtype_info))

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def dtype_info(self) -> DType:
        return dtype_info(self.type.dtype)

    def to_numpy(self) -> np.ndarray:
        """The value as a 0-d numpy array of the storage dtype."""
        return np.array(self.value, dtype=self.dtype_info.numpy_dtype)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Scalar):
            return NotImplemented
        return self.type == other.type and _bits(self.value) == _bits(other.value)

    def __hash__(self) -> int:
        return hash((self.type, _bits(self.value)))


def _int_array(raw: np.ndarray, dtype: DType) -> np.ndarray:
    if not raw.size:
        return raw.astype(dtype.numpy_dtype)
    if raw.dtype.kind in "iu":
        low, high = int(raw.min()), int(raw.max())
    elif raw.dtype.kind == "O" and all(
        isinstance(x, Integral) and not isinstance(x, bool) for x in raw.flat
    ):  # Python ints beyond numpy's default integer
        low, high = min(raw.flat), max(raw.flat)
    else:
        raise ValueError(f"a {dtype.name} tensor needs integer elements, got {raw.dtype}")
    if low < dtype.low or high > dtype.high:
        raise ValueError(f"values outside the {dtype.name} range [{dtype.low}, {dtype.high}]")
    return raw.astype(dtype.numpy_dtype)


def _float_array(raw: np.ndarray, dtype: DType) -> np.ndarray:
    if raw.size and raw.dtype.kind not in "fiu":
        raise ValueError(f"a {dtype.name} tensor needs numbers, got {raw.dtype}")
    with np.errstate(over="ignore"):
        array = raw.astype(dtype.numpy_dtype)
    nan = np.isnan(array)
    if nan.any():  # one canonical NaN, the one "nan" parses to
        array = np.where(nan, np.array(np.nan, dtype=array.dtype), array)
    return array


def _coerce_array(data: object, t: MilTensorType) -> np.ndarray:
    """``data`` as a read-only C-order array of ``t``'s storage dtype and shape."""
    dtype = dtype_info(t.dtype)
    try:
        raw = np.asarray(data, dtype=object if dtype.kind == "string" else None)
    except (OverflowError, ValueError, TypeError) as exc:
        raise ValueError(f"cannot make a {t} from {type(data).__name__}: {exc}") from exc
    if dtype.kind == "string":
        if any(not isinstance(x, str) for x in raw.flat):
            raise ValueError("a string tensor needs str elements")
        array = raw.astype(object)
    elif dtype.kind == "bool":
        if raw.size and raw.dtype.kind != "b":
            raise ValueError(f"a bool tensor needs bool elements, got {raw.dtype}")
        array = raw.astype(np.bool_)
    elif dtype.kind == "int":
        array = _int_array(raw, dtype)
    else:
        array = _float_array(raw, dtype)
    if t.is_static:
        if array.size != t.size:
            raise ValueError(f"{t} needs {t.size} elements, got {array.size}")
        array = array.reshape(t.shape)  # type: ignore[arg-type]
    elif array.ndim != t.rank or any(
        isinstance(d, int) and d != n for d, n in zip(t.shape, array.shape, strict=True)
    ):
        raise ValueError(f"data of shape {list(array.shape)} does not fit {t}")
    array = np.array(array, copy=True, order="C")
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class Tensor:
    """A tensor literal ``tensor<int32, [2]>([1, 1])`` holding a read-only numpy array.

    ``data`` has the storage dtype of the element type (int4 as int8, uint1..uint6 as uint8,
    strings as an object array) and the type's shape. Equality compares type, shape and bytes.
    """

    type: MilTensorType
    data: np.ndarray

    def __post_init__(self) -> None:
        if not isinstance(self.type, MilTensorType):
            raise ValueError(f"a tensor literal needs a tensor type, not {self.type}")
        object.__setattr__(self, "data", _coerce_array(self.data, self.type))

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def _key(self) -> object:
        if self.data.dtype == object:
            return tuple(self.data.reshape(-1).tolist())
        return self.data.tobytes()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        return (
            self.type == other.type
            and self.data.shape == other.data.shape
            and self._key() == other._key()
        )

    def __hash__(self) -> int:
        return hash((self.type, self.data.shape, self._key()))


# Core ML's convention: a BLOBFILE path starts with the program's own directory, and a
# program's weights are one file at WEIGHT_FILE inside it.
MODEL_PATH = "@model_path/"
WEIGHT_FILE = "weights/weight.bin"
WEIGHT_PATH = MODEL_PATH + WEIGHT_FILE


@dataclass(frozen=True)
class BlobFile:
    """``tensor<...>(BLOBFILE(path = string(P), offset = uint64(N)))``.

    ``offset`` is the file offset of the blob's 64-byte record in ``path`` (not of the data);
    ``path`` is usually ``@model_path/weights/weight.bin``.
    """

    type: MilTensorType
    path: str
    offset: int

    def __post_init__(self) -> None:
        if not isinstance(self.type, MilTensorType):
            raise ValueError(f"BLOBFILE needs a tensor type, not {self.type}")
        if not isinstance(self.path, str):
            raise ValueError("a BLOBFILE path is a string")
        if isinstance(self.offset, bool) or not isinstance(self.offset, Integral):
            raise ValueError("a BLOBFILE offset is an integer")
        if not 0 <= self.offset < 2**64:
            raise ValueError(f"BLOBFILE offset {self.offset} is not a uint64")
        object.__setattr__(self, "offset", int(self.offset))

    @property
    def dtype(self) -> str:
        return self.type.dtype


def _check_items(items: tuple[Value, ...], types: tuple[MilType, ...], what: str) -> None:
    for item, t in zip(items, types, strict=True):
        if item.type != t:
            raise ValueError(f"{what} item of type {item.type} where {t} is expected")


@dataclass(frozen=True)
class ListValue:
    """``list<T, N>([item, ...])``."""

    type: ListType
    items: tuple[Value, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))
        if isinstance(self.type.length, int) and self.type.length != len(self.items):
            raise ValueError(f"{self.type} needs {self.type.length} items, got {len(self.items)}")
        _check_items(self.items, (self.type.element,) * len(self.items), "list")


@dataclass(frozen=True)
class TupleValue:
    """``tuple<A, B>((a, b))``."""

    type: TupleType
    items: tuple[Value, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))
        if len(self.items) != len(self.type.elements):
            raise ValueError(
                f"{self.type} needs {len(self.type.elements)} items, got {len(self.items)}"
            )
        _check_items(self.items, self.type.elements, "tuple")


@dataclass(frozen=True)
class DictValue:
    """``dict<K, V>({{k0, v0}, {k1, v1}})``, entries in written order."""

    type: DictType
    items: tuple[tuple[Value, Value], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple((k, v) for k, v in self.items))
        for key, value in self.items:
            _check_items((key, value), (self.type.key, self.type.value), "dict")


Value: TypeAlias = Scalar | Tensor | BlobFile | ListValue | TupleValue | DictValue

VALUE_CLASSES = (Scalar, Tensor, BlobFile, ListValue, TupleValue, DictValue)

__all__ = [
    "BlobFile",
    "DictValue",
    "ListValue",
    "Scalar",
    "Tensor",
    "TupleValue",
    "Value",
    "format_float",
    "round_float",
]
