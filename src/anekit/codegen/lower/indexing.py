"""Lowerings of indexed reads and writes and ranking ops (gather_nd, scatters, one_hot, topk,
cumsum, hardmax, shrink) to MIL. Negative indices are wrapped before MIL sees them."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import numpy as np

from anekit.codegen.lower.context import Lowering

LowerFn = Callable[[Lowering], object]
_SCATTER_MODES = {"none": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}


def wrapped_indices(lo: Lowering, i: int, dims: np.ndarray) -> str:
    """Operand ``i`` (int indices) as int32 with negatives counted from ``dims`` (broadcast)."""
    a = lo.need(i)
    if a.const is not None:
        return lo.t(np.where(a.const < 0, a.const + dims, a.const).astype(np.int64), "indices")
    var = lo.var(a)
    negative = lo.tmp("less", {"x": var, "y": lo.p("zero", np.int32(0), "int32")}, a.shape, "bool")
    dims_var = lo.p("dims", np.asarray(dims, np.int32), "int32")
    shifted = lo.tmp("add", {"x": var, "y": dims_var}, a.shape, "int32")
    return lo.tmp("select", {"cond": negative, "a": shifted, "b": var}, a.shape, "int32", "indices")


def gather(lo: Lowering, op: str, inputs: dict[str, str]) -> str:
    """Output 0 as a MIL gather ``op``; bool data (which MIL gathers do not take) travels
    as int32 and is compared back to bool."""
    x = lo.need(0)
    if x.dtype != "bool":
        return lo.out(op, {"x": lo.x(0), **inputs})
    as_int = lo.cast(lo.x(0), x.shape, "int32")
    got = lo.tmp(op, {"x": as_int, **inputs}, lo.out_shape(), "int32", "gathered")
    return lo.out("not_equal", {"x": got, "y": lo.p("zero", np.int32(0), "int32")})


def _gather_nd(lo: Lowering) -> str:
    x, idx = lo.need(0), lo.need(1)
    b = lo.attrs["batch_dims"]
    depth = idx.shape[-1]
    dims = np.asarray(x.shape[b : b + depth], np.int64)
    inputs = {
        "indices": wrapped_indices(lo, 1, dims),
        "batch_dims": lo.p("batch_dims", np.int32(b)),
    }
    return gather(lo, "gather_nd", inputs)


def _scatter_elements(lo: Lowering) -> str:
    x = lo.need(0)
    axis = lo.attrs["axis"] % x.rank
    return lo.out(
        "scatter_along_axis",
        {
            "data": lo.x(0),
            "indices": wrapped_indices(lo, 1, np.int64(x.shape[axis])),
            "updates": lo.x(2, x.dtype),
            "axis": lo.p("axis", np.int32(axis)),
            "mode": lo.p("mode", _SCATTER_MODES[lo.attrs["reduction"]], "string"),
        },
    )


def _scatter_nd(lo: Lowering) -> str:
    x, idx = lo.need(0), lo.need(1)
    dims = np.asarray(x.shape[: idx.shape[-1]], np.int64)
    return lo.out(
        "scatter_nd",
        {
            "data": lo.x(0),
            "indices": wrapped_indices(lo, 1, dims),
            "updates": lo.x(2, x.dtype),
            "mode": lo.p("mode", _SCATTER_MODES[lo.attrs["reduction"]], "string"),
        },
    )


def _one_hot(lo: Lowering) -> str:
    idx, values = lo.need(0), lo.need(1)
    depth = lo.attrs["depth"]
    out = lo.out_shape()
    axis = lo.attrs["axis"] % len(out)
    var = lo.var(idx)
    if idx.dtype != "int32":  # float indices truncate toward zero, as the IR kernel does
        var = lo.cast(var, idx.shape, "int32")
    expanded = (*idx.shape[:axis], 1, *idx.shape[axis:])
    var = lo.tmp("reshape", {"x": var, "shape": lo.p("shape", list(expanded))}, expanded, "int32")
    classes = np.arange(depth).reshape((depth,) + (1,) * (len(out) - axis - 1))
    hot = lo.tmp(
        "logical_or",
        {
            "x": lo.tmp("equal", {"x": var, "y": lo.t(classes, "classes")}, out, "bool"),
            "y": lo.tmp("equal", {"x": var, "y": lo.t(classes - depth, "wrapped")}, out, "bool"),
        },
        out,
        "bool",
        "hot",
    )
    if values.const is None:
        raise lo.error("one_hot with computed on/off values has no MIL form here")
    off, on = (float(v) for v in values.const.reshape(-1))
    dtype = lo.out_dtype()
    make = lo.f if dtype in ("fp16", "fp32") else (lambda k, v: lo.p(k, np.int32(v), dtype))
    return lo.select(hot, make("on", on), (), make("off", off), ())


def _topk(lo: Lowering) -> list[str]:
    x = lo.need(0)
    axis = lo.attrs["axis"] % x.rank
    inputs = {
        "x": lo.x(0),
        "k": lo.p("k", np.int32(lo.attrs["k"])),
        "axis": lo.p("axis", np.int32(axis)),
        "ascending": lo.p("ascending", not lo.attrs["largest"]),
    }
    names = [lo.call.names[i] or lo.b.namer.fresh(f"{lo.call.hint}_{i}") for i in range(2)]
    return lo.b.multi_op(
        "topk",
        inputs,
        [(names[0], lo.out_shape(0), lo.out_dtype(0)), (names[1], lo.out_shape(1), "int32")],
    )


def _cumsum(lo: Lowering) -> str:
    x = lo.need(0)
    return lo.out(
        "cumsum",
        {
            "x": lo.x(0),
            "axis": lo.p("axis", np.int32(lo.attrs["axis"] % x.rank)),
            "exclusive": lo.p("exclusive", bool(lo.attrs["exclusive"])),
            "reverse": lo.p("reverse", bool(lo.attrs["reverse"])),
        },
    )


def _hardmax(lo: Lowering) -> str:
    """1 at the first maximum along the axis, 0 elsewhere."""
    x = lo.need(0)
    axis = lo.attrs["axis"] % x.rank
    kept = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    idx = lo.tmp("reduce_argmax", {"x": lo.x(0), "axis": lo.p("axis", np.int32(axis)),
                                   "keep_dims": lo.p("keep_dims", True)}, kept, "int32")  # fmt: skip
    positions = np.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.rank - axis - 1))
    hot = lo.tmp("equal", {"x": idx, "y": lo.t(positions, "positions")}, x.shape, "bool", "hot")
    return lo.select(hot, lo.f("one", 1.0), (), lo.f("zero", 0.0), ())


def _shrink(lo: Lowering) -> str:
    """x - bias above lambd, x + bias below -lambd, 0 between."""
    x, shape = lo.x(0), lo.out_shape()
    lambd, bias = lo.attrs["lambd"], lo.attrs["bias"]
    above = lo.tmp("greater", {"x": x, "y": lo.f("lambd", lambd)}, shape, "bool", "above")
    below = lo.tmp("less", {"x": x, "y": lo.f("minus_lambd", -lambd)}, shape, "bool", "below")
    down = lo.tmp("sub", {"x": x, "y": lo.f("bias", bias)}, shape, hint="down")
    up = lo.tmp("add", {"x": x, "y": lo.f("bias", bias)}, shape, hint="up")
    low = lo.tmp("select", {"cond": below, "a": up, "b": lo.f("zero", 0.0)}, shape, hint="low")
    return lo.out("select", {"cond": above, "a": down, "b": low})


LOWERINGS: MappingProxyType[str, LowerFn] = MappingProxyType(
    {
        "gather_nd": _gather_nd,
        "scatter_elements": _scatter_elements,
        "scatter_nd": _scatter_nd,
        "one_hot": _one_hot,
        "topk": _topk,
        "cumsum": _cumsum,
        "hardmax": _hardmax,
        "shrink": _shrink,
    }
)
