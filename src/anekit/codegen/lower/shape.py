"""Lowerings of data-movement IR ops (reshape, transpose, concat, split, slice, gather, expand,
tile, pad, trilu, depth/space shuffles) to MIL operations."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import numpy as np

from anekit.codegen.lower.context import Lowering
from anekit.codegen.lower.indexing import gather
from anekit.codegen.lower.nn import interleave_pads
from anekit.ir.ops.shape import slice_bounds, slice_params

LowerFn = Callable[[Lowering], str]
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}


def _reshape(lo: Lowering) -> str:
    return lo.out("reshape", {"x": lo.x(0), "shape": lo.p("shape", list(lo.out_shape()))})


def _transpose(lo: Lowering) -> str:
    return lo.out("transpose", {"x": lo.x(0), "perm": lo.p("perm", list(lo.attrs["perm"]))})


def _concat(lo: Lowering) -> str:
    args = [a for a in lo.call.args if a is not None]
    axis = lo.attrs["axis"] % len(lo.out_shape())
    dtype = next((a.dtype for a in args if a.var is not None), None)
    values = [lo.var(a, dtype) for a in args]
    return lo.out(
        "concat",
        {
            "values": values,
            "axis": lo.p("axis", np.int32(axis)),
            "interleave": lo.p("interleave", False),
        },
    )


def _split(lo: Lowering) -> list[str]:  # type: ignore[return]
    x = lo.need(0)
    axis = lo.attrs["axis"] % x.rank
    outs = [
        (
            lo.call.names[i] or lo.b.namer.fresh(f"{lo.call.hint}_{i}"),
            lo.out_shape(i),
            lo.out_dtype(i),
        )
        for i in range(len(lo.call.outputs))
    ]
    inputs = {"x": lo.x(0), "split_sizes": lo.p("split_sizes", list(lo.attrs["sizes"])),
              "axis": lo.p("axis", np.int32(axis))}  # fmt: skip
    return lo.b.multi_op("split", inputs, outs)


def _slice(lo: Lowering) -> str:
    x = lo.need(0)
    begin, end, stride = [0] * x.rank, list(x.shape), [1] * x.rank
    end_mask = [False] * x.rank
    for axis, start, stop, step in slice_params(x.rank, lo.attrs):
        s, e, _ = slice_bounds(x.shape[axis], start, stop, step)
        begin[axis], stride[axis] = s, step
        if e < 0:  # a negative step running past index 0
            end[axis], end_mask[axis] = 0, True
        else:
            end[axis] = e
    return lo.out(
        "slice_by_index",
        {"x": lo.x(0), "begin": lo.p("begin", begin), "end": lo.p("end", end),
         "stride": lo.p("stride", stride), "end_mask": lo.p("end_mask", end_mask)},
    )  # fmt: skip


def _indices(lo: Lowering, i: int, dim: int) -> str:
    """Gather indices as int32 with negative ones counted from the end."""
    a = lo.need(i)
    if a.const is not None:
        idx = np.where(a.const < 0, a.const + dim, a.const).astype(np.int64)
        return lo.t(idx, "indices")
    var = lo.var(a)
    negative = lo.tmp("less", {"x": var, "y": lo.p("zero", np.int32(0), "int32")}, a.shape, "bool")
    wrapped = lo.tmp("add", {"x": var, "y": lo.p("dim", np.int32(dim), "int32")}, a.shape, "int32")
    return lo.tmp("select", {"cond": negative, "a": wrapped, "b": var}, a.shape, "int32", "indices")


def _gather(lo: Lowering) -> str:
    x = lo.need(0)
    axis = lo.attrs["axis"] % x.rank
    idx = _indices(lo, 1, x.shape[axis])
    inputs = {"axis": lo.p("axis", np.int32(axis)), "batch_dims": lo.p("batch_dims", np.int32(0))}
    if lo.need(1).rank > 0:
        return gather(lo, "gather", {**inputs, "indices": idx})
    # a scalar index: gather with a one-element index, then drop the axis
    if x.dtype == "bool":
        raise lo.error("gathering one entry of a bool tensor has no MIL lowering here")
    idx1 = lo.tmp("reshape", {"x": idx, "shape": lo.p("shape", [1])}, (1,), "int32")
    one = (*x.shape[:axis], 1, *x.shape[axis + 1 :])
    y = lo.tmp("gather", {"x": lo.x(0), **inputs, "indices": idx1}, one, x.dtype)
    return lo.out("reshape", {"x": y, "shape": lo.p("shape", list(lo.out_shape()))})


def _gather_elements(lo: Lowering) -> str:
    x = lo.need(0)
    axis = lo.attrs["axis"] % x.rank
    idx = _indices(lo, 1, x.shape[axis])
    return gather(lo, "gather_along_axis", {"indices": idx, "axis": lo.p("axis", np.int32(axis))})


def _expand(lo: Lowering) -> str:
    x = lo.need(0)
    out = lo.out_shape()
    var = lo.x(0)
    aligned = (1,) * (len(out) - x.rank) + x.shape
    if aligned != x.shape:
        var = lo.tmp("reshape", {"x": var, "shape": lo.p("shape", list(aligned))}, aligned, x.dtype)
    reps = [o if a == 1 else 1 for a, o in zip(aligned, out, strict=True)]
    if all(r == 1 for r in reps):
        return lo.alias(var)
    return lo.out("tile", {"x": var, "reps": lo.p("reps", reps)})


def _tile(lo: Lowering) -> str:
    return lo.out("tile", {"x": lo.x(0), "reps": lo.p("reps", list(lo.attrs["repeats"]))})


def _pad(lo: Lowering) -> str:
    x = lo.need(0)
    pads, mode = list(lo.attrs["pads"]), lo.attrs["mode"]
    if mode not in _PAD_MODES:
        raise lo.error(f"pad mode '{mode}' has no MIL form", hint="use constant, reflect or edge")
    var, shape, r = lo.x(0), list(x.shape), x.rank
    if any(p < 0 for p in pads):  # negative pads crop first
        begin = [max(-pads[i], 0) for i in range(r)]
        end = [shape[i] - max(-pads[r + i], 0) for i in range(r)]
        shape = [e - b for b, e in zip(begin, end, strict=True)]
        var = lo.tmp("slice_by_index", {"x": var, "begin": lo.p("begin", begin), "end": lo.p("end", end)},
                     shape, x.dtype, "crop")  # fmt: skip
        pads = [max(p, 0) for p in pads]
    if not any(pads):
        return lo.alias(var)
    inputs = {
        "x": var,
        "pad": lo.p("pad", interleave_pads(tuple(pads))),
        "mode": lo.p("mode", _PAD_MODES[mode], "string"),
    }
    # constant_val is written for every mode: MIL's default for it is an fp32 zero, which
    # coremltools' loader refuses beside an fp16 x (its type must be x's)
    value = lo.attrs["value"] if mode == "constant" else 0
    inputs["constant_val"] = (
        lo.f("value", value)
        if x.dtype in ("fp16", "fp32")
        else lo.p("value", np.int32(value), x.dtype)
    )
    return lo.out("pad", inputs)


def _trilu(lo: Lowering) -> str:
    x = lo.need(0)
    rows, cols = x.shape[-2:]
    ones = np.ones((rows, cols), dtype=bool)
    keep = np.triu(ones, lo.attrs["k"]) if lo.attrs["upper"] else np.tril(ones, lo.attrs["k"])
    zero = lo.f("zero", 0.0) if x.dtype in ("fp16", "fp32") else lo.p("zero", np.int32(0), x.dtype)
    return lo.out("select", {"cond": lo.t(keep, "keep"), "a": lo.x(0), "b": zero})


def _shuffle(lo: Lowering, split: tuple[int, ...], perm: tuple[int, ...]) -> str:
    """reshape -> transpose -> reshape (depth/space shuffles; exact for both modes)."""
    x = lo.need(0)
    moved = tuple(split[p] for p in perm)
    y = lo.tmp("reshape", {"x": lo.x(0), "shape": lo.p("shape", list(split))}, split, x.dtype)
    y = lo.tmp("transpose", {"x": y, "perm": lo.p("perm", list(perm))}, moved, x.dtype)
    return lo.out("reshape", {"x": y, "shape": lo.p("shape", list(lo.out_shape()))})


def _depth_to_space(lo: Lowering) -> str:
    n, c, h, w = lo.need(0).shape
    b = lo.attrs["block_size"]
    if lo.attrs["mode"] == "DCR":
        return _shuffle(lo, (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2))
    return _shuffle(lo, (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3))


def _space_to_depth(lo: Lowering) -> str:
    n, c, h, w = lo.need(0).shape
    b = lo.attrs["block_size"]
    split = (n, c, h // b, b, w // b, b)
    if lo.attrs["mode"] == "DCR":
        return _shuffle(lo, split, (0, 3, 5, 1, 2, 4))
    return _shuffle(lo, split, (0, 1, 3, 5, 2, 4))


LOWERINGS: MappingProxyType[str, LowerFn] = MappingProxyType(
    {
        "reshape": _reshape,
        "transpose": _transpose,
        "concat": _concat,
        "split": _split,  # type: ignore[dict-item]
        "slice": _slice,
        "gather": _gather,
        "gather_elements": _gather_elements,
        "expand": _expand,
        "tile": _tile,
        "pad": _pad,
        "trilu": _trilu,
        "depth_to_space": _depth_to_space,
        "space_to_depth": _space_to_depth,
    }
)
