"""MIL text from the :mod:`.ast` tree, in the canonical spacing of Apple's own output.

Canonical form: ``key = value`` with spaces, 4-space indentation per level, inputs and
attributes in stored order, floats as C ``%a`` hex floats, tensor literals flat, a blank line
between functions, a final newline. ``print_program(parse(text)) == text`` for any text this
module wrote.
"""

from __future__ import annotations

import re

import numpy as np

from .ast import ArgList, Function, MilProgram, Operation, Var
from .types import DictType, ListType, MilTensorType, MilType, ScalarType, StateType, TupleType
from .values import (
    BlobFile,
    DictValue,
    ListValue,
    Scalar,
    Tensor,
    TupleValue,
    Value,
    format_float,
)

INDENT = "    "
_STRING = ScalarType("string")
_UINT64 = ScalarType("uint64")
_NEEDS_ESCAPE = re.compile(r'[\\"\x00-\x1f\x7f]')
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def quote(text: str) -> str:
    """A MIL string literal: ``"..."`` with ``\\\\ \\" \\n \\t \\r`` and ``\\xHH`` escapes."""
    if _NEEDS_ESCAPE.search(text):
        text = _NEEDS_ESCAPE.sub(lambda m: _ESCAPES.get(m[0], f"\\x{ord(m[0]):02x}"), text)
    return f'"{text}"'


def _element(value: bool | int | float | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return quote(value)
    return str(value)


def _tensor_elements(data: np.ndarray) -> str:
    flat = data.reshape(-1)
    kind = flat.dtype.kind
    if kind == "f":
        return ", ".join([format_float(x) for x in flat.astype(np.float64).tolist()])
    if kind == "b":
        return ", ".join(["true" if x else "false" for x in flat.tolist()])
    if kind == "O":
        return ", ".join([quote(x) for x in flat.tolist()])
    return ", ".join([str(x) for x in flat.tolist()])


class _Printer:
    def __init__(self, legacy_scalars: bool = False) -> None:
        self.legacy = legacy_scalars
        self.type_text: dict[MilType, str] = {}  # memo: large programs repeat few types

    def type(self, t: MilType) -> str:
        text = self.type_text.get(t)
        if text is None:
            text = self.type_text[t] = self.spell(t) if self.legacy else str(t)
        return text

    def spell(self, t: MilType) -> str:
        """``t`` with every scalar type written the older way, as ``tensor<dtype, []>``."""
        if isinstance(t, ScalarType):
            return f"tensor<{t.dtype}, []>"
        if isinstance(t, ListType):
            return f"list<{self.spell(t.element)}, {t.length}>"
        if isinstance(t, TupleType):
            return f"tuple<{', '.join(self.spell(e) for e in t.elements)}>"
        if isinstance(t, DictType):
            return f"dict<{self.spell(t.key)}, {self.spell(t.value)}>"
        if isinstance(t, StateType):
            return f"state<{self.spell(t.wrapped)}>"
        return str(t)

    def payload(self, v: Value) -> str:
        """A value without its type prefix, as it appears inside ``TYPE(...)`` or nested."""
        if isinstance(v, Scalar):
            return _element(v.value)
        if isinstance(v, Tensor):
            return f"[{_tensor_elements(v.data)}]"
        if isinstance(v, BlobFile):
            string, uint64 = self.type(_STRING), self.type(_UINT64)
            return f"BLOBFILE(path = {string}({quote(v.path)}), offset = {uint64}({v.offset}))"
        if isinstance(v, ListValue):
            return f"[{', '.join(self.payload(x) for x in v.items)}]"
        if isinstance(v, TupleValue):
            return f"({', '.join(self.payload(x) for x in v.items)})"
        if isinstance(v, DictValue):
            entries = (f"{{{self.payload(k)}, {self.payload(x)}}}" for k, x in v.items)
            return f"{{{', '.join(entries)}}}"
        raise TypeError(f"not a MIL value: {v!r}")

    def value(self, v: Value) -> str:
        return f"{self.type(v.type)}({self.payload(v)})"

    def argument(self, arg: object) -> str:
        if isinstance(arg, Var):
            return arg.name
        if isinstance(arg, ArgList):
            return f"({', '.join(self.argument(x) for x in arg.items)})"
        return self.value(arg)  # type: ignore[arg-type]

    def attributes(self, attrs: tuple[tuple[str, Value], ...]) -> str:
        return f"[{', '.join(f'{k} = {self.value(v)}' for k, v in attrs)}]" if attrs else ""

    def operation(self, op: Operation) -> str:
        outputs = ", ".join(f"{self.type(b.type)} {b.name}" for b in op.outputs)
        inputs = ", ".join(f"{k} = {self.argument(a)}" for k, a in op.inputs)
        return f"{outputs} = {op.op}({inputs}){self.attributes(op.attributes)};"

    def function(self, f: Function, out: list[str]) -> None:
        params = ", ".join(f"{self.type(b.type)} {b.name}" for b in f.inputs)
        opset = f"<{f.opset}>" if f.opset is not None else ""
        attrs = self.attributes(f.attributes)
        out.append(f"{INDENT}func {f.name}{opset}({params}){' ' + attrs if attrs else ''} {{\n")
        prefix = INDENT * 2
        for op in f.operations:
            out.append(prefix + self.operation(op) + "\n")
        out.append(f"{INDENT}}} -> ({', '.join(f.outputs)});\n")

    def program(self, p: MilProgram) -> str:
        out = [f"program({p.version})\n"]
        attrs = [
            f"{k} = {self.value(v)}"
            for k, v in ((("buildInfo", _build_info(p.build_info)),) if p.build_info else ())
            + p.attributes
        ]
        if attrs:
            out.append(f"[{', '.join(attrs)}]\n")
        out.append("{\n")
        for i, f in enumerate(p.functions):
            if i:
                out.append("\n")
            self.function(f, out)
        out.append("}\n")
        return "".join(out)


def _build_info(entries: tuple[tuple[str, str], ...]) -> DictValue:
    return DictValue(
        DictType(_STRING, _STRING),
        tuple((Scalar(_STRING, k), Scalar(_STRING, v)) for k, v in entries),
    )


def print_program(program: MilProgram, *, legacy_scalars: bool = False) -> str:
    """The canonical MIL text of ``program``.

    ``legacy_scalars=True`` writes every scalar type in the older rank-0 tensor spelling
    (``tensor<string, []>("x")``, also inside BLOBFILE and buildInfo), as coremlc wrote
    iOS 16/17-era programs. The tree is printed as stored otherwise.
    """
    return _Printer(legacy_scalars).program(program)


def format_operation(op: Operation, *, legacy_scalars: bool = False) -> str:
    """One operation as its MIL line (no indentation, no newline)."""
    return _Printer(legacy_scalars).operation(op)


def format_value(value: Value, *, legacy_scalars: bool = False) -> str:
    """A literal value as MIL text, e.g. ``tensor<int32, [2]>([1, 1])``."""
    return _Printer(legacy_scalars).value(value)


def format_type(t: MilType | MilTensorType) -> str:
    """A type as MIL text, e.g. ``tensor<fp16, [1, 64, 1, 16]>``."""
    return str(t)
