"""The MIL program tree: MilProgram, Function, Operation, bindings and arguments (frozen dataclasses).

Types and literal values live in :mod:`.types` and :mod:`.values`; they are re-exported here so
``from anekit.formats.mil.ast import *`` gives the whole tree.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import TypeAlias, TypeVar

from anekit.errors import FormatError

from .types import (
    DTYPES,
    IDENTIFIER,
    TYPE_CLASSES,
    DictType,
    DType,
    ListType,
    MilTensorType,
    MilType,
    ScalarType,
    StateType,
    TupleType,
    dtype_info,
    element_dtype,
    is_scalar,
)
from .values import (
    VALUE_CLASSES,
    BlobFile,
    DictValue,
    ListValue,
    Scalar,
    Tensor,
    TupleValue,
    Value,
    format_float,
)

_VERSION = re.compile(r"[0-9]+(\.[0-9]+)?\Z", re.ASCII)
_T = TypeVar("_T")


def _identifier(name: object, what: str) -> None:
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise ValueError(f"{what} {name!r} is not a MIL identifier")


def _pairs(pairs: object, what: str, check: type | tuple[type, ...]) -> tuple:
    """Normalize a mapping or sequence of (key, value) into a tuple of pairs, checking both."""
    items = tuple(pairs.items()) if isinstance(pairs, Mapping) else tuple(tuple(p) for p in pairs)
    seen: set[str] = set()
    for key, value in items:
        _identifier(key, f"{what} key")
        if key in seen:
            raise ValueError(f"{what} {key!r} is given twice")
        seen.add(key)
        if not isinstance(value, check):
            raise ValueError(f"{what} {key!r} has the value {value!r}, not a MIL value")
    return items


def unchecked(cls: type[_T], *fields: object) -> _T:
    """An instance of the frozen dataclass ``cls`` built without ``__post_init__`` checks.

    For the parser only, which has already checked every field: it saves a fifth of the
    parse time of large programs.
    """
    obj = object.__new__(cls)
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    if len(names) != len(fields):
        raise TypeError(f"{cls.__name__} has {len(names)} fields, got {len(fields)}")
    obj.__dict__.update(zip(names, fields, strict=True))  # frozen: skip __setattr__
    return obj


@dataclass(frozen=True)
class Var:
    """A reference to a named value (a function input or an earlier operation's output)."""

    name: str

    def __post_init__(self) -> None:
        _identifier(self.name, "variable")


@dataclass(frozen=True)
class ArgList:
    """A parenthesised argument list, ``values = (x, y)`` (concat's variadic input)."""

    items: tuple[Var | Value, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))
        for item in self.items:
            if not isinstance(item, (Var, *VALUE_CLASSES)):
                raise ValueError(f"argument list item {item!r} is not a Var or a value")


Argument: TypeAlias = Var | Value | ArgList


@dataclass(frozen=True)
class Binding:
    """A typed name: an operation output or a function input (``tensor<fp16, [1]> x``)."""

    name: str
    type: MilType

    def __post_init__(self) -> None:
        _identifier(self.name, "name")
        if not isinstance(self.type, TYPE_CLASSES):
            raise ValueError(f"{self.name!r} has {self.type!r}, not a MIL type")


Param = Binding  # function inputs are bindings too


@dataclass(frozen=True)
class Operation:
    """``outputs = op(inputs)[attributes];``.

    ``inputs`` are the parenthesised keyword arguments, in written order (Apple writes them
    sorted by key; see :meth:`sorted`); ``attributes`` are the bracketed ones, where ``name``
    and a const's ``val`` live.
    """

    op: str
    outputs: tuple[Binding, ...]
    inputs: tuple[tuple[str, Argument], ...] = ()
    attributes: tuple[tuple[str, Value], ...] = ()

    def __post_init__(self) -> None:
        _identifier(self.op, "operation")
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if not self.outputs or not all(isinstance(b, Binding) for b in self.outputs):
            raise ValueError(f"operation {self.op!r} needs one or more Binding outputs")
        object.__setattr__(
            self, "inputs", _pairs(self.inputs, "input", (Var, ArgList, *VALUE_CLASSES))
        )
        object.__setattr__(self, "attributes", _pairs(self.attributes, "attribute", VALUE_CLASSES))

    @property
    def name(self) -> str:
        """The ``name`` attribute if it is a string, else the first output's name."""
        value = self.attribute("name")
        if isinstance(value, Scalar) and isinstance(value.value, str):
            return value.value
        return self.outputs[0].name

    @property
    def output(self) -> Binding:
        """The only output (ValueError for multi-output operations)."""
        if len(self.outputs) != 1:
            raise ValueError(f"operation {self.name!r} has {len(self.outputs)} outputs")
        return self.outputs[0]

    def input(self, key: str) -> Argument | None:
        """The input argument ``key``, or None."""
        for k, v in self.inputs:
            if k == key:
                return v
        return None

    def attribute(self, key: str) -> Value | None:
        """The attribute ``key`` (``name``, ``val``, ...), or None."""
        for k, v in self.attributes:
            if k == key:
                return v
        return None

    def variables(self) -> Iterator[str]:
        """Names of the variables this operation reads, in argument order."""
        for _, arg in self.inputs:
            if isinstance(arg, Var):
                yield arg.name
            elif isinstance(arg, ArgList):
                for item in arg.items:
                    if isinstance(item, Var):
                        yield item.name

    def sorted(self) -> Operation:
        """A copy with inputs sorted by key, as Apple's toolchain writes them."""
        return replace(self, inputs=tuple(sorted(self.inputs, key=lambda kv: kv[0])))


@dataclass(frozen=True)
class Function:
    """``func name<opset>(inputs) { operations } -> (outputs);``."""

    name: str
    opset: str | None
    inputs: tuple[Binding, ...]
    operations: tuple[Operation, ...]
    outputs: tuple[str, ...]
    attributes: tuple[tuple[str, Value], ...] = ()

    def __post_init__(self) -> None:
        _identifier(self.name, "function")
        if self.opset is not None:
            _identifier(self.opset, "opset")
        for attr in ("inputs", "operations", "outputs"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))
        for name in self.outputs:
            _identifier(name, "output")
        object.__setattr__(self, "attributes", _pairs(self.attributes, "attribute", VALUE_CLASSES))

    @cached_property
    def producers(self) -> Mapping[str, Operation]:
        """Each operation output name mapped to the operation that defines it."""
        return MappingProxyType({b.name: op for op in self.operations for b in op.outputs})

    def types(self) -> dict[str, MilType]:
        """Every defined name (inputs, then operation outputs) with its type."""
        found = {b.name: b.type for b in self.inputs}
        found.update((b.name, b.type) for op in self.operations for b in op.outputs)
        return found

    def sorted(self) -> Function:
        """A copy with every operation's inputs sorted by key."""
        return replace(self, operations=tuple(op.sorted() for op in self.operations))


@dataclass(frozen=True)
class MilProgram:
    """``program(version) [buildInfo = ...] { functions }``.

    ``build_info`` holds the ``buildInfo`` dictionary's entries in order; ``attributes`` any
    other program attributes (rare).
    """

    version: str
    build_info: tuple[tuple[str, str], ...] = ()
    functions: tuple[Function, ...] = ()
    attributes: tuple[tuple[str, Value], ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.version, str) or not _VERSION.match(self.version):
            raise ValueError(f"program version {self.version!r} is not a number like 1.0 or 1.3")
        build_info = tuple((k, v) for k, v in self.build_info)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in build_info):
            raise ValueError("buildInfo entries are pairs of strings")
        object.__setattr__(self, "build_info", build_info)
        object.__setattr__(self, "functions", tuple(self.functions))
        object.__setattr__(self, "attributes", _pairs(self.attributes, "attribute", VALUE_CLASSES))
        if any(k == "buildInfo" for k, _ in self.attributes):
            raise ValueError("buildInfo goes in build_info, not attributes")

    def function(self, name: str = "main") -> Function:
        """The function called ``name`` (FormatError naming the ones there are if absent)."""
        for f in self.functions:
            if f.name == name:
                return f
        raise FormatError(
            f"the MIL program has no function {name!r}",
            hint="functions: " + (", ".join(f.name for f in self.functions) or "none"),
        )

    def sorted(self) -> MilProgram:
        """A copy with every operation's inputs sorted by key (Apple's order)."""
        return replace(self, functions=tuple(f.sorted() for f in self.functions))


__all__ = [
    "DTYPES",
    "ArgList",
    "Argument",
    "Binding",
    "BlobFile",
    "DType",
    "DictType",
    "DictValue",
    "Function",
    "ListType",
    "ListValue",
    "MilType",
    "Operation",
    "Param",
    "MilProgram",
    "Scalar",
    "ScalarType",
    "StateType",
    "Tensor",
    "MilTensorType",
    "TupleType",
    "TupleValue",
    "Value",
    "Var",
    "dtype_info",
    "element_dtype",
    "format_float",
    "is_scalar",
]
