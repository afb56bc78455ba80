"""Bit-level ops: and, or, xor, not, shifts (ONNX BitShift semantics), and bitcast."""

from __future__ import annotations

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types, broadcast
from anekit.ir.registry import Attr, InferError, TensorType, declare


def _int_inputs(ins: Types, attrs: Attrs) -> list[TensorType]:
    for t in ins:
        if not t.dtype.is_int:
            raise InferError(f"bitwise ops take integer tensors, got {t.dtype}")
    return broadcast()(ins, attrs)


NO_BITWISE_MIL = "MIL has no bitwise integer operations"

for _name, _fn in {
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}.items():
    declare(
        _name,
        inputs=("a", "b"),
        infer=_int_inputs,
        doc=f"{_name} of a and b",
        no_lowering=NO_BITWISE_MIL,
    )(  # fmt: skip
        (lambda fn: lambda a, b: fn(a, b))(_fn)
    )


@declare("bitwise_not", inputs=("x",), infer=_int_inputs, no_lowering=NO_BITWISE_MIL)
def bitwise_not(x):
    """every bit flipped"""
    return np.invert(x)


@declare(
    "bit_shift",
    inputs=("x", "shift"),
    attrs=(Attr("direction", "str", choices=("left", "right")),),
    infer=_int_inputs,
    no_lowering=NO_BITWISE_MIL,
)
def bit_shift(x, shift, direction):
    """x shifted by shift bits; right shifts of signed values extend the sign; a shift below 0
    or of the full width or more leaves only the sign extension (-1 or 0)"""
    x, shift = np.broadcast_arrays(x, shift)
    bits = np.iinfo(x.dtype).bits
    valid = (shift >= 0) & (shift < bits)
    amount = np.where(valid, shift, 0).astype(x.dtype)
    if direction == "right":
        fill = np.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else 0
        return np.where(valid, np.right_shift(x, amount), fill).astype(x.dtype)
    unsigned = np.dtype(f"u{x.dtype.itemsize}")
    moved = np.left_shift(x.view(unsigned), amount.view(unsigned)).view(x.dtype)
    return np.where(valid, moved, 0).astype(x.dtype)


def _bitcast_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    to = attrs["to"]
    if x.dtype is DType.FP16 or to is DType.FP16 or to.itemsize != x.dtype.itemsize:
        raise InferError(
            f"bitcast needs two non-fp16 types of one width, got {x.dtype} -> {to} "
            "(fp16 has no 16-bit integer partner in the IR)"
        )
    return [TensorType(x.shape, to)]


@declare("bitcast", inputs=("x",), attrs=(Attr("to", "dtype"),), infer=_bitcast_infer,
         no_lowering="MIL has no reinterpretation of a tensor's bytes as another type")  # fmt: skip
def bitcast(x, to):
    """the same bytes read as dtype ``to`` (of the same width)"""
    return np.ascontiguousarray(x).view(to.numpy).reshape(x.shape)
