"""Conveniences for building MIL trees from Python: literals from numbers/arrays, const and op constructors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from .ast import ArgList, Argument, Binding, Operation, Var
from .types import MilTensorType, MilType, ScalarType
from .values import VALUE_CLASSES, WEIGHT_PATH, BlobFile, Scalar, Tensor, Value

# numpy dtype -> MIL dtype, for literal(); Python ints and floats default to int32 and fp32.
_FROM_NUMPY = {
    "bool": "bool",
    "float16": "fp16",
    "float32": "fp32",
    "float64": "fp64",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
}


def string(text: str) -> Scalar:
    """``string("text")``."""
    return Scalar(ScalarType("string"), text)


def literal(value: object, dtype: str | None = None) -> Value:
    """A MIL value from Python: bool, int (int32), float (fp32), str, numpy scalar or array.

    ``dtype`` overrides the element type (``literal(0.5, "fp16")``,
    ``literal([1, 1], "int32")``). 0-d arrays become scalars; values pass through unchanged.
    """
    if isinstance(value, VALUE_CLASSES):
        return value  # type: ignore[return-value]
    if isinstance(value, (bool, np.bool_)):
        return Scalar(ScalarType(dtype or "bool"), bool(value))
    if isinstance(value, str):
        return Scalar(ScalarType(dtype or "string"), value)
    if isinstance(value, int):
        return Scalar(ScalarType(dtype or "int32"), value)
    if isinstance(value, float):
        return Scalar(ScalarType(dtype or "fp32"), value)
    array = np.asarray(value)
    if dtype is None:
        if array.dtype.kind in "US" or array.dtype == object:
            dtype = "string"
        elif array.dtype.name in _FROM_NUMPY and not (
            isinstance(value, (list, tuple)) and array.dtype.name in ("int64", "float64")
        ):
            dtype = _FROM_NUMPY[array.dtype.name]
        elif array.dtype.kind in "iu":
            dtype = "int32"  # Python lists of ints
        elif array.dtype.kind == "f":
            dtype = "fp32"  # Python lists of floats
        else:
            raise ValueError(f"no MIL dtype for numpy {array.dtype}")
    if array.ndim == 0:
        return Scalar(ScalarType(dtype), array.item())
    if dtype == "string":
        array = np.array([str(x) for x in array.reshape(-1)], dtype=object).reshape(array.shape)
    return Tensor(MilTensorType(dtype, array.shape), array)


def const(name: str, value: object, dtype: str | None = None) -> Operation:
    """``T name = const()[name = string("name"), val = T(value)];`` (value as in :func:`literal`)."""
    val = literal(value, dtype)
    return Operation(
        "const", (Binding(name, val.type),), (), (("name", string(name)), ("val", val))
    )


def blob_const(name: str, type: MilTensorType, offset: int, path: str = WEIGHT_PATH) -> Operation:
    """A const whose value is ``BLOBFILE(path, offset)`` (``offset`` = the blob record's offset)."""
    return const(name, BlobFile(type, path, offset))


def argument(arg: object) -> Argument:
    """An input argument: a str is a variable name, a tuple/list an :class:`ArgList`,
    anything else a literal (see :func:`literal`)."""
    if isinstance(arg, (Var, ArgList)):
        return arg
    if isinstance(arg, str):
        return Var(arg)
    if isinstance(arg, (tuple, list)):
        return ArgList(tuple(argument(x) for x in arg))  # type: ignore[misc]
    return literal(arg)


def operation(
    op: str,
    outputs: Binding | Iterable[Binding | tuple[str, MilType]] | tuple[str, MilType],
    inputs: Mapping[str, object] | Sequence[tuple[str, object]] = (),
    *,
    name: str | None = None,
    attributes: Mapping[str, object] | Sequence[tuple[str, object]] = (),
) -> Operation:
    """An operation; ``name`` (default: the first output's name) becomes ``[name = string(...)]``.

    >>> operation("relu", ("y", MilTensorType("fp16", (1, 8))), {"x": "x0"})  # doctest: +SKIP
    """
    if isinstance(outputs, Binding):
        bindings: tuple[Binding, ...] = (outputs,)
    elif isinstance(outputs, tuple) and len(outputs) == 2 and isinstance(outputs[0], str):
        bindings = (Binding(outputs[0], outputs[1]),)  # type: ignore[arg-type]
    else:
        bindings = tuple(b if isinstance(b, Binding) else Binding(*b) for b in outputs)  # type: ignore[union-attr]
    pairs = inputs.items() if isinstance(inputs, Mapping) else inputs
    extra = attributes.items() if isinstance(attributes, Mapping) else attributes
    attrs = [("name", string(name or bindings[0].name))]
    attrs += [(k, literal(v)) for k, v in extra if k != "name"]
    return Operation(op, bindings, tuple((k, argument(v)) for k, v in pairs), tuple(attrs))
