"""Ordering and scans: topk, hardmax, cumsum, cumprod; shrink; reverse_sequence."""

from __future__ import annotations

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types, normalize_axis
from anekit.ir.registry import Attr, InferError, TensorType, declare

# --- topk -----------------------------------------------------------------------------------


def _topk_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    if x.rank == 0:
        raise InferError("topk needs rank >= 1")
    axis = normalize_axis(attrs["axis"], x.rank)
    k = attrs["k"]
    if not 0 <= k <= x.shape[axis]:
        raise InferError(f"k = {k} is outside [0, {x.shape[axis]}] for axis {axis}")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    return [TensorType(shape, x.dtype), TensorType(shape, DType.INT64)]


def _descending_key(x: np.ndarray) -> np.ndarray:
    """A key whose ascending order is x's descending order, without overflow."""
    if x.dtype.kind == "f":
        return -x
    if x.dtype.kind == "b":
        return ~x.astype(np.uint8)
    return ~x  # bitwise not reverses signed and unsigned integer order


@declare(
    "topk",
    inputs=("x",),
    outputs=("values", "indices"),
    attrs=(
        Attr("k", "int"),
        Attr("axis", "int", -1),
        Attr("largest", "bool", True),
        Attr("sorted", "bool", True),
    ),
    infer=_topk_infer,
)
def topk(x, k, axis, largest, sorted):  # noqa: A002 - the ONNX attribute name
    """the k largest (or smallest) entries along axis, sorted; ties keep the lower index first"""
    key = _descending_key(x) if largest else x
    order = np.argsort(key, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


# --- hardmax --------------------------------------------------------------------------------


def _axis_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    normalize_axis(attrs["axis"], max(x.rank, 1))
    return [x]


@declare("hardmax", inputs=("x",), attrs=(Attr("axis", "int", -1),), infer=_axis_infer)
def hardmax(x, axis):
    """1 at the first maximum along axis, 0 elsewhere"""
    axis = axis % x.ndim
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    positions = np.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    return (positions == first).astype(x.dtype)


# --- cumulative sums and products ------------------------------------------------------------


_SCAN_ATTRS = (
    Attr("axis", "int"),
    Attr("exclusive", "bool", False, doc="leave out the element itself"),
    Attr("reverse", "bool", False, doc="accumulate from the end"),
)


def _scan_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    if x.dtype is DType.BOOL:
        raise InferError("cumulative ops take numeric tensors, got bool")
    normalize_axis(attrs["axis"], max(x.rank, 1))
    return [x]


def _scan(fn, identity: int):
    def kernel(x, axis, exclusive, reverse):
        axis = axis % max(x.ndim, 1)
        y = np.flip(x, axis) if reverse else x
        out = fn(y, axis=axis, dtype=x.dtype)
        if exclusive:  # shift by one, starting from the identity
            lead = np.full_like(np.take(out, [0], axis=axis), identity)
            out = np.concatenate(
                [lead, np.take(out, np.arange(out.shape[axis] - 1), axis=axis)], axis
            )
        return np.flip(out, axis) if reverse else out

    return kernel


declare("cumsum", inputs=("x",), attrs=_SCAN_ATTRS, infer=_scan_infer,
        doc="running sum along axis (integers in their own dtype)")(_scan(np.cumsum, 0))  # fmt: skip
declare("cumprod", inputs=("x",), attrs=_SCAN_ATTRS, infer=_scan_infer,
        doc="running product along axis (integers in their own dtype)",
        no_lowering="MIL has cumsum but no cumulative product")(_scan(np.cumprod, 1))  # fmt: skip


# --- shrink ---------------------------------------------------------------------------------


def _numeric(ins: Types, attrs: Attrs) -> list[TensorType]:
    if ins[0].dtype is DType.BOOL:
        raise InferError("shrink takes a numeric tensor, got bool")
    return [ins[0]]


@declare(
    "shrink",
    inputs=("x",),
    attrs=(Attr("lambd", "float", 0.5), Attr("bias", "float", 0.0)),
    infer=_numeric,
)
def shrink(x, lambd, bias):
    """x - bias above lambd, x + bias below -lambd, 0 between"""
    b = np.asarray(bias).astype(x.dtype)
    return np.where(x < -lambd, x + b, np.where(x > lambd, x - b, np.zeros((), x.dtype)))


# --- reverse_sequence -----------------------------------------------------------------------


def _reverse_sequence_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, lens = ins
    if x.rank < 2:
        raise InferError(f"reverse_sequence needs rank >= 2, got {x}")
    b = normalize_axis(attrs["batch_axis"], x.rank)
    t = normalize_axis(attrs["time_axis"], x.rank)
    if b == t:
        raise InferError("batch_axis and time_axis must differ")
    if lens.dtype not in (DType.INT32, DType.INT64) or lens.shape != (x.shape[b],):
        raise InferError(f"sequence_lens must be int32/int64 [{x.shape[b]}], got {lens}")
    return [x]


@declare(
    "reverse_sequence",
    inputs=("x", "sequence_lens"),
    attrs=(Attr("batch_axis", "int", 1), Attr("time_axis", "int", 0)),
    infer=_reverse_sequence_infer,
)
def reverse_sequence(x, sequence_lens, batch_axis, time_axis):
    """reverse the first sequence_lens[b] steps along time_axis of each batch entry b"""
    b, t = batch_axis % x.ndim, time_axis % x.ndim
    steps = np.arange(x.shape[t])
    lens = np.clip(sequence_lens.astype(np.int64), 0, x.shape[t])
    src = np.where(
        steps[None, :] < lens[:, None], lens[:, None] - 1 - steps[None, :], steps[None, :]
    )
    # src is [batch, time]: place it on (batch_axis, time_axis) for take_along_axis
    shape = [1] * x.ndim
    shape[b], shape[t] = x.shape[b], x.shape[t]
    src = src if b < t else src.T
    return np.take_along_axis(x, np.broadcast_to(src.reshape(shape), x.shape), axis=t)
