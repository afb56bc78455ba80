"""MIL text: a parser, a printer and the program tree they share (Apple's ``model.mil`` form).

The tree (all frozen dataclasses, compared by value)::

    MilProgram(version="1.3", build_info=(("coremlc-version", "3520.5.1"), ...),
            functions=(Function(...),), attributes=())
    Function(name="main", opset="ios18", inputs=(Binding("x", MilTensorType("fp16", (1, 64, 1, 16))),),
             operations=(Operation(...), ...), outputs=("y",), attributes=())
    Operation(op="conv",
              outputs=(Binding("y0", MilTensorType("fp16", (1, 32, 1, 16))),),
              inputs=(("dilations", Var("dl")), ..., ("x", Var("x"))),        # (...) part
              attributes=(("name", Scalar(ScalarType("string"), "y0")),))    # [...] part

- Types: ``ScalarType(dtype)``, ``MilTensorType(dtype, shape)`` (dims are ints, ``"?"`` or symbol
  names), ``ListType(element, length)``, ``TupleType(elements)``, ``DictType(key, value)``,
  ``StateType(wrapped)``. Element dtypes: bool, string, fp16/32/64, int4/8/16/32/64,
  uint1/2/3/4/6/8/16/32/64 (``DTYPES``).
- Values (literals): ``Scalar(type, value)`` (exact: floats are rounded to their dtype and print
  as hex floats, bit for bit), ``Tensor(type, data)`` holding a read-only numpy array,
  ``BlobFile(type, path, offset)``, ``ListValue``, ``TupleValue``, ``DictValue``.
- Arguments: ``Var(name)``, a value, or ``ArgList(items)`` for ``values = (x, y)``.

Example::

    from anekit.formats import mil
    from anekit.formats.mil import Function, MilProgram, MilTensorType, const, operation

    t = MilTensorType("fp16", (1, 4, 1, 16))
    ops = (
        const("half", 0.5, "fp16"),  # fp16 half = const()[name = string("half"), val = fp16(0x1p-1)];
        operation("mul", ("y", t), {"x": "x", "y": "half"}),
    )
    f = Function("main", "ios18", (mil.Binding("x", t),), ops, ("y",))
    program = MilProgram("1.3", (("coremlc-version", "3520.5.1"),), (f,))
    text = mil.print_program(program)
    assert mil.parse(text) == program
    assert program.function("main").producers["half"].attribute("val").value == 0.5

Weights go to a weight.bin through :class:`anekit.formats.blob.BlobWriter`, whose ``add`` returns
the record offset for ``blob_const(name, tensor_type, offset)``.

``print_program`` writes the canonical spelling of FACTS section 1 (``name = string("x")``,
4-space indentation, hex floats); ``print_program(p, legacy_scalars=True)`` writes scalar types
the older way (``tensor<string, []>("x")``), as iOS 16/17-era coremlc output does.

``parse`` checks syntax and names (defined before use, once); errors are
:class:`MilSyntaxError` (a ``FormatError``) with ``line``, ``column`` and the offending line
quoted with a caret. Nested blocks (``cond``, ``while_loop``) are reported as unsupported.
"""

from __future__ import annotations

from .ast import (
    DTYPES,
    ArgList,
    Argument,
    Binding,
    BlobFile,
    DictType,
    DictValue,
    DType,
    Function,
    ListType,
    ListValue,
    MilProgram,
    MilTensorType,
    MilType,
    Operation,
    Param,
    Scalar,
    ScalarType,
    StateType,
    Tensor,
    TupleType,
    TupleValue,
    Value,
    Var,
    dtype_info,
    element_dtype,
    format_float,
    is_scalar,
)
from .build import argument, blob_const, const, literal, operation, string
from .lexer import MilSyntaxError
from .parser import MAX_DEPTH, parse, parse_bytes, parse_file, sniff_mil
from .printer import format_operation, format_type, format_value, print_program

__all__ = [
    "DTYPES",
    "MAX_DEPTH",
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
    "MilSyntaxError",
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
    "argument",
    "blob_const",
    "const",
    "dtype_info",
    "element_dtype",
    "format_float",
    "format_operation",
    "format_type",
    "format_value",
    "is_scalar",
    "literal",
    "operation",
    "parse",
    "parse_bytes",
    "parse_file",
    "sniff_mil",
    "print_program",
    "string",
]
