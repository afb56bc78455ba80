"""MIL program rewrites for running without a directory or without fp16: weights inlined from a
weight.bin, and every fp16 type widened to fp32 (the ``reference`` backend of a bundle)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from anekit.errors import FormatError
from anekit.formats import mil
from anekit.formats.blob import BlobReader
from anekit.formats.bundle import MODEL_PATH


def inline_blobs(program: mil.MilProgram, reader: BlobReader | None) -> mil.MilProgram:
    """``program`` with every ``BLOBFILE`` replaced by the tensor it names (read from ``reader``)."""

    def value(v: Any) -> Any:
        if not isinstance(v, mil.BlobFile):
            return v
        if reader is None:
            raise FormatError(f"BLOBFILE {v.path!r} but the program has no weight file")
        if not v.path.startswith(MODEL_PATH):
            raise FormatError(f"BLOBFILE path {v.path!r} does not start with {MODEL_PATH!r}")
        shape = tuple(int(d) for d in v.type.shape)  # type: ignore[arg-type]
        return mil.Tensor(v.type, reader.read(v.offset, shape, v.type.dtype))

    return _map_values(program, value, lambda t: t)


def widen_program(program: mil.MilProgram) -> mil.MilProgram:
    """``program`` with fp16 replaced by fp32 everywhere: types, literals and cast targets."""

    def widen_type(t: Any) -> Any:
        if isinstance(t, mil.ScalarType) and t.dtype == "fp16":
            return mil.ScalarType("fp32")
        if isinstance(t, mil.MilTensorType) and t.dtype == "fp16":
            return mil.MilTensorType("fp32", t.shape)
        return t

    def value(v: Any) -> Any:
        if isinstance(v, mil.Scalar):
            if v.dtype == "fp16":
                return mil.Scalar(widen_type(v.type), v.value)
            if v.dtype == "string" and v.value == "fp16":  # cast(dtype = "fp16")
                return mil.Scalar(v.type, "fp32")
            return v
        if isinstance(v, mil.Tensor) and v.dtype == "fp16":
            return mil.Tensor(widen_type(v.type), v.data.astype(np.float32))
        if isinstance(v, mil.BlobFile) and v.dtype == "fp16":
            raise FormatError("inline the weights before widening a program (inline_blobs)")
        return v

    return _map_values(program, value, widen_type)


def _map_values(program: mil.MilProgram, value: Any, widen_type: Any) -> mil.MilProgram:
    functions = []
    for f in program.functions:
        ops = []
        for op in f.operations:
            inputs = tuple((k, _map_arg(a, value)) for k, a in op.inputs)
            attributes = tuple((k, value(v)) for k, v in op.attributes)
            outputs = tuple(mil.Binding(b.name, widen_type(b.type)) for b in op.outputs)
            ops.append(mil.Operation(op.op, outputs, inputs, attributes))
        inputs = tuple(mil.Binding(b.name, widen_type(b.type)) for b in f.inputs)
        functions.append(replace(f, inputs=inputs, operations=tuple(ops)))
    return replace(program, functions=tuple(functions))


def _map_arg(arg: Any, value: Any) -> Any:
    if isinstance(arg, mil.Var):
        return arg
    if isinstance(arg, mil.ArgList):
        return mil.ArgList(tuple(_map_arg(a, value) for a in arg.items))
    return value(arg)
