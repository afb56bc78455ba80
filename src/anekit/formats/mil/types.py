"""MIL types: element dtypes, scalar, tensor, list, tuple, dict and state types, and their spelling."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z", re.ASCII)

# The most elements one tensor of a program may hold (2**30: 4 GiB of float32). The simulator
# treats a program that sizes a larger one as malformed, and the compiler refuses a graph
# that would need one, so compile never writes a bundle its own loader rejects.
MAX_TENSOR_ELEMENTS = 1 << 30


@dataclass(frozen=True)
class DType:
    """A MIL element type: its spelling, kind and the numpy dtype literals are stored in."""

    name: str
    kind: str  # "float", "int", "bool" or "string"
    numpy: str  # storage dtype of literal values ("O" for strings)
    bits: int = 0  # integers: width, for the range check
    signed: bool = False

    @property
    def low(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def high(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(self.numpy)

    @property
    def little_endian(self) -> np.dtype:
        """The numpy dtype of this type's elements in a file or an engine surface."""
        return np.dtype(self.numpy_dtype.newbyteorder("<").str)  # the native dtype when it is

    @property
    def itemsize(self) -> int:
        """Bytes of one stored element (sub-byte integers occupy their storage dtype)."""
        return self.numpy_dtype.itemsize


def _int(name: str, bits: int, signed: bool, storage: str) -> DType:
    return DType(name, "int", storage, bits, signed)


# The spellings of coremltools' ``types/type_mapping.py`` (bf16/fp8 have no known text spelling).
DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("bool", "bool", "bool"),
        DType("string", "string", "O"),
        DType("fp16", "float", "float16"),
        DType("fp32", "float", "float32"),
        DType("fp64", "float", "float64"),
        _int("int4", 4, True, "int8"),
        _int("int8", 8, True, "int8"),
        _int("int16", 16, True, "int16"),
        _int("int32", 32, True, "int32"),
        _int("int64", 64, True, "int64"),
        _int("uint1", 1, False, "uint8"),
        _int("uint2", 2, False, "uint8"),
        _int("uint3", 3, False, "uint8"),
        _int("uint4", 4, False, "uint8"),
        _int("uint6", 6, False, "uint8"),
        _int("uint8", 8, False, "uint8"),
        _int("uint16", 16, False, "uint16"),
        _int("uint32", 32, False, "uint32"),
        _int("uint64", 64, False, "uint64"),
    )
}

# Words that open a composite type.
TYPE_WORDS = frozenset({"tensor", "list", "tuple", "dict", "state"})


def dtype_info(name: str) -> DType:
    """The :class:`DType` named ``name``; ValueError if MIL has no such element type."""
    info = DTYPES.get(name)
    if info is None:
        raise ValueError(f"unknown MIL dtype {name!r} (known: {', '.join(DTYPES)})")
    return info


def _check_dim(dim: int | str) -> None:
    if isinstance(dim, bool) or not isinstance(dim, (int, str)):
        raise ValueError(f"a dimension is an int or a symbol, not {dim!r}")
    if isinstance(dim, int) and dim < 0:
        raise ValueError(f"negative dimension {dim}")
    if isinstance(dim, str) and dim != "?" and not IDENTIFIER.match(dim):
        raise ValueError(f"symbolic dimension {dim!r} is not an identifier or '?'")


@dataclass(frozen=True)
class ScalarType:
    """A scalar: ``fp16``, ``int32``, ``bool``, ``string``, ..."""

    dtype: str

    def __post_init__(self) -> None:
        dtype_info(self.dtype)

    def __str__(self) -> str:
        return self.dtype


@dataclass(frozen=True)
class MilTensorType:
    """``tensor<dtype, [d0, d1, ...]>``; a dim is an int, ``"?"`` or a symbol name."""

    dtype: str
    shape: tuple[int | str, ...]

    def __post_init__(self) -> None:
        dtype_info(self.dtype)
        if not isinstance(self.shape, tuple):
            object.__setattr__(self, "shape", tuple(self.shape))
        for dim in self.shape:
            _check_dim(dim)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dimension is a number."""
        return all(isinstance(d, int) for d in self.shape)

    @property
    def size(self) -> int | None:
        """The element count, or None for a symbolic shape."""
        if not self.is_static:
            return None
        n = 1
        for d in self.shape:
            n *= d  # type: ignore[operator]
        return n

    def __str__(self) -> str:
        return f"tensor<{self.dtype}, [{', '.join(str(d) for d in self.shape)}]>"


@dataclass(frozen=True)
class ListType:
    """``list<element, length>``; length is an int or ``"?"``."""

    element: MilType
    length: int | str

    def __post_init__(self) -> None:
        _check_types(self.element)
        _check_dim(self.length)

    def __str__(self) -> str:
        return f"list<{self.element}, {self.length}>"


@dataclass(frozen=True)
class TupleType:
    """``tuple<t0, t1, ...>``."""

    elements: tuple[MilType, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.elements, tuple):
            object.__setattr__(self, "elements", tuple(self.elements))
        _check_types(*self.elements)

    def __str__(self) -> str:
        return f"tuple<{', '.join(str(t) for t in self.elements)}>"


@dataclass(frozen=True)
class DictType:
    """``dict<key, value>`` (``buildInfo`` is a ``dict<string, string>``)."""

    key: MilType
    value: MilType

    def __post_init__(self) -> None:
        _check_types(self.key, self.value)

    def __str__(self) -> str:
        return f"dict<{self.key}, {self.value}>"


@dataclass(frozen=True)
class StateType:
    """``state<wrapped>``: a stateful function input (iOS 18)."""

    wrapped: MilType

    def __post_init__(self) -> None:
        _check_types(self.wrapped)

    def __str__(self) -> str:
        return f"state<{self.wrapped}>"


MilType: TypeAlias = ScalarType | MilTensorType | ListType | TupleType | DictType | StateType
TYPE_CLASSES = (ScalarType, MilTensorType, ListType, TupleType, DictType, StateType)


def _check_types(*types: object) -> None:
    for t in types:
        if not isinstance(t, TYPE_CLASSES):
            raise ValueError(f"{t!r} is not a MIL type")


def element_dtype(t: MilType) -> DType | None:
    """The element dtype of a scalar or tensor type (None for composite types)."""
    if isinstance(t, (ScalarType, MilTensorType)):
        return DTYPES[t.dtype]
    return None


def is_scalar(t: MilType) -> bool:
    """A scalar type, or the older spelling of one, a rank-0 ``tensor<dtype, []>``."""
    return isinstance(t, ScalarType) or (isinstance(t, MilTensorType) and t.rank == 0)
