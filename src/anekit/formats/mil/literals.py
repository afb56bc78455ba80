"""Reading MIL types and typed literal values from tokens (the half of the parser below operations).

Shared by :mod:`.parser`: a token cursor with error reporting, then types (``tensor<...>``,
``list<...>``, ...) and values (``TYPE(payload)``), where the payload is read as the type says:
a scalar element, a flat or nested ``[...]`` tensor list, ``BLOBFILE(...)``, or the ``[...]``,
``(...)``, ``{{k, v}, ...}`` forms of lists, tuples and dicts. Nesting is bounded by
``MAX_DEPTH`` so hostile input cannot exhaust the stack.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np

from .ast import unchecked
from .lexer import MilSyntaxError, syntax_error, token_offset, tokenize
from .types import (
    DTYPES,
    TYPE_WORDS,
    DictType,
    DType,
    ListType,
    MilTensorType,
    MilType,
    ScalarType,
    StateType,
    TupleType,
)
from .values import (
    BlobFile,
    DictValue,
    ListValue,
    Scalar,
    Tensor,
    TupleValue,
    Value,
    round_float,
)

MAX_DEPTH = 64  # nesting of types and literal payloads
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z", re.ASCII)
_INT = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)
_UINT = re.compile(r"[0-9]+\Z", re.ASCII)
_DIM = re.compile(r"\s*(?:([0-9]+)|(\?)|([A-Za-z_][A-Za-z0-9_.]*))\s*\Z", re.ASCII)
_COMPOSITE = re.compile(r"tensor<\s*([A-Za-z_]\w*)\s*,\s*\[(.*)\]\s*>\Z", re.ASCII | re.DOTALL)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|.)", re.DOTALL)
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r", "0": "\0"}
_MAX_INT_DIGITS = 40  # far beyond uint64; bounds int() on hostile input
_PUNCTUATION = frozenset("()[]{}<>,=;")
END = "\x00<end>"  # sentinel token past the end of the input


class LiteralParser:
    """A cursor over the tokens of ``text`` that reads types and typed values."""

    def __init__(self, text: str, source: str | None):
        self.text = text
        self.source = source
        self.toks = tokenize(text)
        self.toks += [END, END]  # one token of lookahead is always safe
        self.i = 0
        self.tensor_types: dict[str, MilTensorType] = {}  # memo: programs repeat few types
        self.scalar_types = {name: ScalarType(name) for name in DTYPES}

    # --- errors and token helpers -----------------------------------------------------------

    def error(self, message: str, at: int | None = None, hint: str | None = None) -> MilSyntaxError:
        index = self.i if at is None else at
        offset = len(self.text) if self.toks[index] == END else token_offset(self.text, index)
        return syntax_error(self.text, offset, message, source=self.source, hint=hint)

    def describe(self, tok: str) -> str:
        if tok == END:
            return "the end of the text"
        if tok == '"':
            return "an unterminated string"
        return repr(tok if len(tok) <= 40 else tok[:37] + "...")

    def expect(self, want: str) -> None:
        tok = self.toks[self.i]
        if tok != want:
            raise self.error(f"expected {want!r}, found {self.describe(tok)}")
        self.i += 1

    def ident(self, what: str) -> str:
        tok = self.toks[self.i]
        if not IDENT.match(tok):
            raise self.error(f"expected {what}, found {self.describe(tok)}")
        self.i += 1
        return tok

    def depth_check(self, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise self.error(f"nesting deeper than {MAX_DEPTH} levels")

    # --- types ------------------------------------------------------------------------------

    def type(self, depth: int) -> MilType:
        tok = self.toks[self.i]
        if tok.startswith("tensor<"):
            t = self.tensor_types.get(tok)
            if t is None:
                t = self.tensor_types[tok] = self.whole_tensor_type(tok)
            self.i += 1
            return t
        if tok in DTYPES:
            self.i += 1
            return self.scalar_types[tok]
        if tok not in TYPE_WORDS or self.toks[self.i + 1] != "<":
            raise self.error(f"expected a type, found {self.describe(tok)}")
        self.depth_check(depth)
        self.i += 2
        t: MilType
        if tok == "tensor":
            dtype = self.dtype()
            self.expect(",")
            self.expect("[")
            dims: list[int | str] = []
            while self.toks[self.i] != "]":
                if dims:
                    self.expect(",")
                dims.append(self.dim())
            self.i += 1
            t = MilTensorType(dtype, tuple(dims))
        elif tok == "list":
            element = self.type(depth + 1)
            self.expect(",")
            t = ListType(element, self.dim())
        elif tok == "tuple":
            elements: list[MilType] = []
            while self.toks[self.i] != ">":
                if elements:
                    self.expect(",")
                elements.append(self.type(depth + 1))
            t = TupleType(tuple(elements))
        elif tok == "dict":
            key = self.type(depth + 1)
            self.expect(",")
            t = DictType(key, self.type(depth + 1))
        else:
            t = StateType(self.type(depth + 1))
        self.expect(">")
        return t

    def dtype(self) -> str:
        tok = self.toks[self.i]
        if tok not in DTYPES:
            raise self.error(
                f"expected an element type (fp16, int32, ...), found {self.describe(tok)}"
            )
        self.i += 1
        return tok

    def dim(self) -> int | str:
        tok = self.toks[self.i]
        if tok == "?" or IDENT.match(tok):
            self.i += 1
            return tok
        if _UINT.match(tok) and len(tok) <= _MAX_INT_DIGITS:
            self.i += 1
            return int(tok)
        raise self.error(
            f"expected a dimension (a size, '?' or a symbol), found {self.describe(tok)}"
        )

    def whole_tensor_type(self, tok: str) -> MilTensorType:
        match = _COMPOSITE.match(tok)
        assert match is not None  # the lexer only makes such tokens from this shape
        dtype, body = match.groups()
        if dtype not in DTYPES:
            raise self.error(f"unknown element type {dtype!r} in {tok!r}")
        dims: list[int | str] = []
        if body.strip():
            for part in body.split(","):
                m = _DIM.match(part)
                if m is None or (m.group(1) is not None and len(m.group(1)) > _MAX_INT_DIGITS):
                    raise self.error(f"bad dimension {part.strip()!r} in {tok!r}")
                dims.append(int(m.group(1)) if m.group(1) is not None else m.group(2) or m.group(3))
        return MilTensorType(dtype, tuple(dims))

    # --- values -----------------------------------------------------------------------------

    def value(self, depth: int) -> Value:
        at = self.i
        t = self.type(depth)
        self.expect("(")
        value = self.payload(t, depth + 1, at)
        self.expect(")")
        return value

    def payload(self, t: MilType, depth: int, at: int) -> Value:
        """The literal inside ``TYPE( ... )`` (or nested in a list/tuple/dict), read as ``t``."""
        self.depth_check(depth)
        tok = self.toks[self.i]
        try:
            if isinstance(t, MilTensorType) and tok == "BLOBFILE":
                return self.blobfile(t, depth)
            if isinstance(t, (ScalarType, MilTensorType)):
                if tok == "[":
                    if isinstance(t, ScalarType):
                        raise self.error(f"a {t} value is a single element, not a list")
                    return self.tensor(t, depth)
                if isinstance(t, MilTensorType) and t.rank:
                    raise self.error(
                        f"expected '[' or BLOBFILE for {t}, found {self.describe(tok)}"
                    )
                info = DTYPES[t.dtype]
                value = self.element(info)
                if info.kind == "float":
                    value = round_float(value, info)  # type: ignore[arg-type]
                return unchecked(Scalar, t, value)  # element() checked kind and range
            if isinstance(t, ListType):
                return ListValue(t, tuple(self.items("[", "]", lambda n: t.element, depth)))
            if isinstance(t, TupleType):
                return TupleValue(t, tuple(self.items("(", ")", self.tuple_element(t), depth)))
            if isinstance(t, DictType):
                entries: list[tuple[Value, Value]] = []
                self.expect("{")
                while self.toks[self.i] != "}":
                    if entries:
                        self.expect(",")
                    entries.append(self.entry(t, depth))
                self.i += 1
                return DictValue(t, tuple(entries))
            raise self.error(f"{t} has no literal values")
        except ValueError as exc:  # the value classes' own checks (counts, ranges, types)
            raise self.error(str(exc), at) from None

    def tuple_element(self, t: TupleType) -> Callable[[int], MilType]:
        def element(n: int) -> MilType:
            if n >= len(t.elements):
                raise self.error(f"too many items for {t}")
            return t.elements[n]

        return element

    def items(
        self, open_: str, close: str, type_of: Callable[[int], MilType], depth: int
    ) -> list[Value]:
        """``open_ payload, payload, ... close`` with the n-th payload read as ``type_of(n)``."""
        self.expect(open_)
        found: list[Value] = []
        while self.toks[self.i] != close:
            if found:
                self.expect(",")
            found.append(self.payload(type_of(len(found)), depth + 1, self.i))
        self.i += 1
        return found

    def entry(self, t: DictType, depth: int) -> tuple[Value, Value]:
        self.expect("{")
        key = self.payload(t.key, depth + 1, self.i)
        self.expect(",")
        value = self.payload(t.value, depth + 1, self.i)
        self.expect("}")
        return key, value

    def blobfile(self, t: MilTensorType, depth: int) -> BlobFile:
        self.i += 1
        self.expect("(")
        self.expect("path")
        self.expect("=")
        path = self.value(depth + 1)
        self.expect(",")
        self.expect("offset")
        self.expect("=")
        at = self.i
        offset = self.value(depth + 1)
        self.expect(")")
        if not (isinstance(path, Scalar) and path.dtype == "string"):
            raise self.error("a BLOBFILE path is a string(...)", at - 3)
        if not (
            isinstance(offset, Scalar) and offset.dtype in ("uint64", "int64", "int32", "uint32")
        ):
            raise self.error("a BLOBFILE offset is a uint64(...)", at)
        return BlobFile(t, path.value, offset.value)  # type: ignore[arg-type]

    def tensor(self, t: MilTensorType, depth: int) -> Tensor:
        """``[e, e, ...]`` or nested lists, flattened in C order."""
        flat: list[int] = []  # token indices of the elements
        shape = self.nested(flat, depth)
        info = DTYPES[t.dtype]
        toks = self.toks
        values = [self.convert(toks[k], info, k) for k in flat]
        if len(shape) > 1:  # nested brackets fix the shape
            dims = tuple(shape)
        elif t.is_static:
            dims = t.shape  # type: ignore[assignment]
            if len(values) != t.size:
                raise ValueError(f"{t} needs {t.size} elements, got {len(values)}")
        elif t.rank == 1:
            dims = (len(values),)
        else:
            raise ValueError(f"a flat list cannot give the symbolic shape of {t}")
        if info.kind == "string":
            array = np.empty(len(values), dtype=object)
            array[:] = values
        elif info.kind == "int":
            array = np.array(values, dtype=info.numpy_dtype)
        else:
            array = np.array(values, dtype=np.float64 if info.kind == "float" else np.bool_)
        return Tensor(t, array.reshape(dims))  # type: ignore[arg-type]

    def nested(self, flat: list[int], depth: int) -> list[int]:
        """Collect the token indices of a (possibly nested) bracket list; return its shape."""
        self.depth_check(depth)
        self.expect("[")
        toks = self.toks
        count = 0
        inner: list[int] | None = None
        while toks[self.i] != "]":
            if count:
                self.expect(",")
            if toks[self.i] == "[":
                if count and inner is None:
                    raise self.error("a nested list mixes elements and lists")
                start = self.i
                sub = self.nested(flat, depth + 1)
                if inner is None:
                    inner = sub
                elif sub != inner:
                    raise self.error("nested lists of different lengths", start)
            else:
                tok = toks[self.i]
                if inner is not None:
                    raise self.error("a nested list mixes elements and lists")
                if tok in _PUNCTUATION or tok == END:
                    raise self.error(f"expected a literal element, found {self.describe(tok)}")
                flat.append(self.i)
                self.i += 1
            count += 1
        self.i += 1
        return [count, *(inner or [])]

    def element(self, info: DType) -> bool | int | float | str:
        value = self.convert(self.toks[self.i], info, self.i)
        self.i += 1
        return value

    def convert(self, tok: str, info: DType, at: int) -> bool | int | float | str:
        """One literal element token as a Python value of ``info``'s kind."""
        kind = info.kind
        if kind == "float":
            if tok[0] in "0123456789+-." or tok in ("inf", "nan"):
                try:
                    value = float.fromhex(tok) if "x" in tok or "X" in tok else float(tok)
                except (ValueError, OverflowError):
                    raise self.error(f"bad {info.name} literal {self.describe(tok)}", at) from None
                if math.isinf(value) and tok.lstrip("+-") != "inf":
                    raise self.error(
                        f"{info.name} literal {self.describe(tok)} is out of range", at
                    )
                return math.nan if math.isnan(value) else value
        elif kind == "int":
            if _INT.match(tok) and len(tok) <= _MAX_INT_DIGITS:
                value = int(tok)
                if not info.low <= value <= info.high:
                    raise self.error(
                        f"{value} is outside the {info.name} range [{info.low}, {info.high}]", at
                    )
                return value
        elif kind == "bool":
            if tok in ("true", "false"):
                return tok == "true"
        elif tok[0] == '"' and len(tok) > 1:
            return self.unescape(tok, at)
        raise self.error(f"expected a {info.name} literal, found {self.describe(tok)}", at)

    def unescape(self, tok: str, at: int) -> str:
        body = tok[1:-1]
        if "\\" not in body:
            return body

        def one(match: re.Match[str]) -> str:
            code = match.group(1)
            if code[0] == "x" and len(code) == 3:
                return chr(int(code[1:], 16))
            if code in _ESCAPES:
                return _ESCAPES[code]
            raise self.error(f"unknown escape \\{code} in a string", at)

        return _ESCAPE.sub(one, body)
