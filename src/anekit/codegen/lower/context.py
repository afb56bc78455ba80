"""What a lowering function sees: the IR call (op, attributes, operands, output types) and helpers
that append MIL operations for it through the function builder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.codegen.builder import Arg, FunctionBuilder
from anekit.errors import ModelError
from anekit.ir.dtypes import DType

if TYPE_CHECKING:
    from anekit.targets import Target


@dataclass(frozen=True)
class Call:
    """One IR op application to lower: a graph node, or one step of an engine layer.

    ``outputs`` are the IR output types (shape, dtype); ``names`` the MIL names reserved for
    them (None: a fresh name); ``hint`` the base of invented names (the node's name).
    """

    op: str
    attrs: Mapping[str, Any]
    args: tuple[Arg | None, ...]
    outputs: tuple[tuple[tuple[int, ...], DType], ...]
    names: tuple[str | None, ...]
    hint: str
    origin: str = ""  # the graph node this call belongs to (for error messages)
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


class Lowering:
    """Helpers bound to one call: operands as variables, named params, temporaries, outputs."""

    def __init__(self, b: FunctionBuilder, call: Call, target: Target, device: str):
        self.b = b
        self.call = call
        self.target = target
        self.device = device
        self.attrs = call.attrs

    # --- operands ----------------------------------------------------------------------------

    def arg(self, i: int) -> Arg | None:
        return self.call.args[i] if i < len(self.call.args) else None

    def need(self, i: int) -> Arg:
        a = self.arg(i)
        if a is None:
            raise self.error(f"input {i} is required")
        return a

    def x(self, i: int, dtype: str | None = None) -> str:
        """The variable of operand ``i``, materialising a constant; ``dtype`` converts it."""
        a = self.need(i)
        return self.var(a, dtype)

    def var(self, a: Arg, dtype: str | None = None) -> str:
        if a.var is None:
            array = a.const
            assert array is not None
            if dtype is not None and dtype != self.b.dtype_of(_ir_dtype(array)):
                array = array.astype(_storage(dtype))
                return self.b.tensor(array, f"{self.call.hint}_const")
            return self.b.tensor(array, a.ir_name or f"{self.call.hint}_const", ir_name=a.ir_name)
        if dtype is not None and dtype != a.dtype:
            return self.cast(a.var, a.shape, dtype)
        return a.var

    def weight(self, i: int) -> str:
        """Operand ``i`` as a weight: its constexpr decompression when the compile compressed
        it (engine segments only), else its variable."""
        a = self.need(i)
        if a.var is None and a.ir_name in self.b.compressed and self.b.float_dtype == "fp16":
            return self.b.compressed_weight(a.ir_name, a.ir_name)
        return self.var(a)

    def const_of(self, i: int) -> np.ndarray | None:
        a = self.arg(i)
        return None if a is None else a.const

    # --- outputs and temporaries ----------------------------------------------------------------

    def out_shape(self, i: int = 0) -> tuple[int, ...]:
        return self.call.outputs[i][0]

    def out_dtype(self, i: int = 0) -> str:
        return self.b.dtype_of(self.call.outputs[i][1])

    @property
    def fdtype(self) -> str:
        return self.b.float_dtype

    def out(self, optype: str, inputs: Mapping[str, Any], i: int = 0) -> str:
        """The op that produces output ``i`` (its reserved name and IR type)."""
        return self.b.op(
            optype,
            inputs,
            self.out_shape(i),
            self.out_dtype(i),
            name=self.call.names[i],
            hint=self.call.hint,
        )

    def tmp(
        self,
        optype: str,
        inputs: Mapping[str, Any],
        shape: Sequence[int],
        dtype: str | None = None,
        hint: str | None = None,
    ) -> str:
        """An intermediate op (float unless ``dtype`` says otherwise)."""
        return self.b.op(
            optype,
            inputs,
            tuple(shape),
            dtype or self.fdtype,
            hint=f"{self.call.hint}_{hint or optype}",
        )

    def alias(self, var: str, i: int = 0) -> str:
        """Output ``i`` is ``var`` itself: an identity op gives it its reserved name."""
        if self.call.names[i] is None:
            return var
        return self.out("identity", {"x": var}, i)

    # --- constants ---------------------------------------------------------------------------

    def p(self, key: str, value: object, dtype: str | None = None) -> str:
        """A named parameter const (``{hint}_{key}``), shared with equal ones."""
        return self.b.param(f"{self.call.hint}_{key}", value, dtype, key=key)

    def f(self, key: str, value: float) -> str:
        """A float scalar const in the program's float type."""
        return self.b.param(f"{self.call.hint}_{key}", np.float32(value), self.fdtype, key=key)

    def t(self, array: np.ndarray, key: str) -> str:
        """A tensor const (weights go to the weight.bin)."""
        return self.b.tensor(np.asarray(array), f"{self.call.hint}_{key}")

    def broadcast(self, var: str, shape: Sequence[int], to: Sequence[int], dtype: str) -> str:
        """``var`` (of ``shape``) broadcast to ``to`` with reshape and tile (a no-op if equal)."""
        shape, to = tuple(shape), tuple(to)
        if shape == to:
            return var
        aligned = (1,) * (len(to) - len(shape)) + shape
        if aligned != shape:
            var = self.tmp(
                "reshape", {"x": var, "shape": self.p("shape", list(aligned))}, aligned, dtype
            )
        reps = [t if a == 1 else 1 for a, t in zip(aligned, to, strict=True)]
        return self.tmp("tile", {"x": var, "reps": self.p("reps", reps)}, to, dtype, "broadcast")

    def select(
        self, cond: str, a: str, a_shape: Sequence[int], b: str, b_shape: Sequence[int]
    ) -> str:
        """Output 0 as ``select(cond, a, b)``; coremltools' select takes its shape from a and b
        alone, so a (or b) is broadcast to the output shape first when neither has it."""
        out = self.out_shape()
        if tuple(a_shape) != out and tuple(b_shape) != out:
            a = self.broadcast(a, a_shape, out, self.out_dtype())
        return self.out("select", {"cond": cond, "a": a, "b": b})

    def cast(self, var: str, shape: Sequence[int], dtype: str) -> str:
        return self.tmp("cast", {"x": var, "dtype": self.p("dtype", dtype, "string")}, shape, dtype)

    # --- errors ------------------------------------------------------------------------------

    def error(self, message: str, hint: str | None = None) -> ModelError:
        where = f"node '{self.call.origin}' ({self.call.op})" if self.call.origin else self.call.op
        return ModelError(f"{where}: {message}", hint=hint)


def _ir_dtype(array: np.ndarray) -> DType:
    if array.dtype.kind == "f":
        return DType.FP32
    return DType(
        {"bool": "bool", "int8": "int8", "uint8": "uint8", "int32": "int32"}.get(
            array.dtype.name, "int64"
        )
    )


def _storage(dtype: str) -> type:
    return {"fp16": np.float32, "fp32": np.float32, "int32": np.int64, "bool": np.bool_,
            "int8": np.int8, "uint8": np.uint8}[dtype]  # fmt: skip
