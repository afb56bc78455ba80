"""Tensor-building MIL ops: concat, split, stack, tile, pad, band_part, cumsum, fill, range, one_hot, topk.

Sizes that come from the program or its inputs (fill shapes, tile reps, ranges, one-hot depth,
padding) are checked against the simulator's element limit before anything is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..registry import ANY, NUMERIC, Signature, SimOp, op
from ..values import STORAGE
from ._util import as_bool, as_float, as_int, as_ints, as_str, axis_of, checked_shape

_WIDE = "fp16|fp32|int8|int16|int32|uint8|uint16|bool"
_SORTABLE = "fp16|fp32|int8|int16|int32|uint8|uint16"


def concat(values: tuple[np.ndarray, ...], axis: Any, interleave: Any = False) -> np.ndarray:
    if not values:
        raise ValueError("concat needs at least one value")
    rank = values[0].ndim
    if any(v.ndim != rank for v in values):
        raise ValueError(f"values have different ranks {[v.ndim for v in values]}")
    if rank == 0:  # scalars concatenate into a vector
        return np.stack(values)
    ax = axis_of(as_int(axis), rank)
    if not as_bool(interleave):
        return np.concatenate(values, axis=ax)
    if any(v.shape != values[0].shape for v in values):
        raise ValueError("interleave needs values of the same shape")
    stacked = np.stack(values, axis=ax + 1)  # [..., d, n, ...] -> d*n with inputs alternating
    shape = list(values[0].shape)
    shape[ax] *= len(values)
    return stacked.reshape(shape)


def prepare_concat(known: Mapping[str, Any], shapes: tuple[tuple[int, ...], ...]) -> Any:
    """concat of values of static shapes (prepared.py's spread) without interleaving: the axis
    worked out once, then numpy's concatenation, as the general kernel runs it."""
    rank = len(shapes[0])
    if rank == 0 or any(len(s) != rank for s in shapes) or "axis" not in known:
        return None  # scalars stacked, or ranks the general kernel refuses
    try:
        ax = axis_of(as_int(known["axis"]), rank)
        if as_bool(known.get("interleave", False)):
            return None
    except ValueError:
        return None  # the general kernel raises it, naming the op
    return lambda values: np.concatenate(values, axis=ax)


concat.prepare_spread = prepare_concat  # type: ignore[attr-defined]  # see prepared.py


def split(
    x: np.ndarray, axis: Any, num_splits: Any = None, split_sizes: Any = None
) -> tuple[np.ndarray, ...]:
    ax = axis_of(as_int(axis), x.ndim)
    size = x.shape[ax]
    if split_sizes is not None:
        sizes = as_ints(split_sizes)
        if num_splits is not None and as_int(num_splits) != len(sizes):
            raise ValueError(f"num_splits {as_int(num_splits)} but {len(sizes)} split_sizes")
        if any(s < 0 for s in sizes) or sum(sizes) != size:
            raise ValueError(f"split_sizes {list(sizes)} do not add up to {size}")
    elif num_splits is not None:
        n = as_int(num_splits)
        if n < 1 or size % n:
            raise ValueError(f"dimension {size} cannot be split evenly into {n}")
        sizes = (size // n,) * n
    else:
        raise ValueError("split needs num_splits or split_sizes")
    bounds = np.cumsum(sizes)[:-1].tolist()
    return tuple(np.split(x, bounds, axis=ax))


def prepare_split(known: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> Any:
    """:func:`split` of inputs of one shape (see prepared.py): the same views, by slices
    worked out once (np.split's machinery costs ~15 us a call); None (the general kernel)
    for arguments it refuses."""
    if set(shapes) != {"x"}:
        return None
    shape = shapes["x"]
    probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, [0] * len(shape))
    try:
        parts = split(probe, **known)  # views of a probe without memory
    except (ValueError, TypeError):
        return None
    ax = axis_of(as_int(known["axis"]), len(shape))
    starts = np.cumsum([0] + [p.shape[ax] for p in parts]).tolist()
    index = [(slice(None),) * ax + (slice(a, b),) for a, b in zip(starts[:-1], starts[1:], strict=True)]

    def run(x: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(x[i] for i in index)

    return run


def stack(values: tuple[np.ndarray, ...], axis: Any) -> np.ndarray:
    if not values or any(v.shape != values[0].shape for v in values):
        raise ValueError("stack needs values of one shape")
    return np.stack(values, axis=axis_of(as_int(axis), values[0].ndim + 1))


def tile(x: np.ndarray, reps: np.ndarray) -> np.ndarray:
    r = as_ints(reps)
    if len(r) != x.ndim or any(v < 1 for v in r):
        raise ValueError(f"reps {list(r)} must have {x.ndim} positive values")
    checked_shape([d * v for d, v in zip(x.shape, r, strict=True)], "tile")
    return np.tile(x, r)


def pad(
    x: np.ndarray, pad: np.ndarray, mode: str = "constant", constant_val: Any = 0.0
) -> np.ndarray:
    mode = as_str(mode)
    pairs = _pad_pairs(x.shape, pad, mode)
    shape = checked_shape([d + a + b for d, (a, b) in zip(x.shape, pairs, strict=True)], "pad")
    if mode == "constant":
        # the fill and one slice assignment: np.pad's general machinery costs ~30 us a call,
        # and a compiled program pads every engine port it feeds to the surface layout
        out = np.full(shape, np.asarray(constant_val, dtype=x.dtype), dtype=x.dtype)
        out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, pairs, strict=True))] = x
        return out
    return np.pad(x, pairs, mode="reflect" if mode == "reflect" else "edge")


def _pad_pairs(shape: tuple[int, ...], pad: Any, mode: str) -> list[tuple[int, int]]:
    """(before, after) of every axis of an input of ``shape``; ValueError for amounts or
    a mode the op refuses."""
    amounts = as_ints(pad)
    rank = len(shape)
    if len(amounts) % 2 or len(amounts) // 2 > rank or any(a < 0 for a in amounts):
        raise ValueError(f"pad {list(amounts)} must be 2*N non-negative values, N <= {rank}")
    pairs = [(0, 0)] * (rank - len(amounts) // 2) + [
        (amounts[i], amounts[i + 1]) for i in range(0, len(amounts), 2)
    ]
    padded = [(d, a, b) for d, (a, b) in zip(shape, pairs, strict=True) if a or b]
    if mode == "reflect" and any(max(a, b) > d - 1 for d, a, b in padded):
        raise ValueError("reflect padding must be smaller than the dimension it pads")
    if mode == "replicate" and any(d == 0 for d, _, _ in padded):
        raise ValueError("replicate padding of an empty dimension")
    if mode not in ("constant", "reflect", "replicate"):
        raise ValueError(f"mode {mode!r} is not constant, reflect or replicate")
    return pairs


def prepare_pad(known: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> Any:
    """:func:`pad` of inputs of one shape with known amounts (see prepared.py): a reflect or
    replicate pad as one gather of precomputed indices along each padded axis (np.pad's
    values; np.pad's general machinery costs ~30 us a call), a constant pad as the general
    kernel's fill and slice assignment with the slices worked out once; None (the general
    kernel) for amounts it refuses."""
    if set(shapes) != {"x"} or "pad" not in known:
        return None
    shape = shapes["x"]
    mode = as_str(known.get("mode", "constant"))
    try:
        pairs = _pad_pairs(shape, known["pad"], mode)
        padded = checked_shape([d + a + b for d, (a, b) in zip(shape, pairs, strict=True)], "pad")
    except ValueError:
        return None
    if mode == "constant":
        value = known.get("constant_val", 0.0)
        inside = tuple(slice(a, a + d) for d, (a, _) in zip(shape, pairs, strict=True))

        def run_constant(x: np.ndarray) -> np.ndarray:
            out = np.full(padded, np.asarray(value, dtype=x.dtype), dtype=x.dtype)
            out[inside] = x
            return out

        return run_constant
    numpy_mode = "reflect" if mode == "reflect" else "edge"
    takes = [
        (axis, np.pad(np.arange(d), (a, b), mode=numpy_mode))
        for axis, (d, (a, b)) in enumerate(zip(shape, pairs, strict=True))
        if a or b
    ]

    def run(x: np.ndarray) -> np.ndarray:
        for axis, index in takes:
            x = np.take(x, index, axis=axis)
        return x if takes else x.copy()

    return run


pad.prepare = prepare_pad  # type: ignore[attr-defined]
split.prepare = prepare_split  # type: ignore[attr-defined]


def band_part(x: np.ndarray, lower: Any = -1, upper: Any = -1) -> np.ndarray:
    if x.ndim < 2:
        raise ValueError("band_part needs a tensor of rank 2 or more")
    lo, up = as_int(lower), as_int(upper)
    m, n = x.shape[-2:]
    rows = np.arange(m)[:, None]
    cols = np.arange(n)[None, :]
    keep = ((lo < 0) | (rows - cols <= lo)) & ((up < 0) | (cols - rows <= up))
    return np.where(keep, x, np.zeros((), dtype=x.dtype))


def cumsum(
    x: np.ndarray, axis: Any = 0, exclusive: Any = False, reverse: Any = False
) -> np.ndarray:
    ax = axis_of(as_int(axis), x.ndim)
    data = np.flip(x, axis=ax) if as_bool(reverse) else x
    out = np.cumsum(data, axis=ax, dtype=x.dtype)
    if as_bool(exclusive):
        out = np.roll(out, 1, axis=ax)
        out[(slice(None),) * ax + (0,)] = 0
    return np.flip(out, axis=ax) if as_bool(reverse) else out


def fill(shape: np.ndarray, value: Any = None) -> np.ndarray:
    value = np.zeros((), np.float32) if value is None else np.asarray(value)
    return np.full(checked_shape(as_ints(shape), "fill"), value, dtype=value.dtype)


def fill_like(ref_tensor: np.ndarray, value: Any = None) -> np.ndarray:
    value = np.zeros((), np.float32) if value is None else np.asarray(value)
    return np.full(ref_tensor.shape, value, dtype=value.dtype)


def range_1d(end: Any, start: Any, step: Any) -> np.ndarray:
    dtype = np.asarray(start).dtype
    if dtype.kind == "f":
        a, b, s = as_float(start), as_float(end), as_float(step)
    else:
        a, b, s = as_int(start), as_int(end), as_int(step)
    if s == 0 or not all(math.isfinite(v) for v in (a, b, s)):
        raise ValueError(f"range({a}, {b}, {s}) is not a finite range")
    count = max(0, math.ceil((b - a) / s))
    checked_shape((count,), "range_1d")
    return (np.asarray(a, dtype) + np.arange(count, dtype=dtype) * np.asarray(s, dtype)).astype(
        dtype
    )


def one_hot(
    indices: np.ndarray,
    one_hot_vector_size: Any,
    axis: Any = -1,
    on_value: Any = None,
    off_value: Any = None,
) -> np.ndarray:
    depth = as_int(one_hot_vector_size)
    if depth < 0:
        raise ValueError(f"one_hot_vector_size {depth} is negative")
    given = on_value if on_value is not None else off_value
    dtype = np.asarray(given).dtype if given is not None else np.dtype(np.int32)
    on = np.asarray(1 if on_value is None else on_value)
    off = np.asarray(0 if off_value is None else off_value)
    ax = as_int(axis)
    rank = indices.ndim + 1
    ax = axis_of(ax, rank)
    checked_shape((*indices.shape, depth), "one_hot")
    hot = np.asarray(indices)[..., None] == np.arange(depth)
    out = np.where(hot, on.astype(dtype), off.astype(dtype))
    return np.moveaxis(out, -1, ax)


def _order(x: np.ndarray, axis: int, ascending: bool) -> np.ndarray:
    """Stable sort indices along ``axis`` (ties keep the lower index first)."""
    if ascending:
        return np.argsort(x, axis=axis, kind="stable")
    key = -x.astype(np.float64) if x.dtype.kind == "f" else -x.astype(np.int64)
    return np.argsort(key, axis=axis, kind="stable")


def argsort(x: np.ndarray, axis: Any = -1, ascending: Any = False) -> np.ndarray:
    return _order(x, axis_of(as_int(axis), x.ndim), as_bool(ascending)).astype(np.int32)


def topk(
    x: np.ndarray,
    k: Any = 1,
    axis: Any = -1,
    ascending: Any = False,
    sort: Any = True,
    return_indices: Any = True,
    output_indices_dtype: Any = "int32",
) -> Any:
    ax = axis_of(as_int(axis), x.ndim)
    count = as_int(k)
    if count == -1:
        count = x.shape[ax]
    if not 0 <= count <= x.shape[ax]:
        raise ValueError(f"k = {count} is outside [0, {x.shape[ax]}]")
    indices = np.take(_order(x, ax, as_bool(ascending)), np.arange(count), axis=ax)
    values = np.take_along_axis(x, indices, axis=ax)
    if not as_bool(return_indices):
        return values
    return values, indices.astype(STORAGE[as_str(output_indices_dtype)])


def _topk_outputs(sig: Signature) -> tuple[str, ...]:
    if not as_bool(sig.consts.get("return_indices", True)):
        if "output_indices_dtype" in sig.consts:
            raise ValueError("output_indices_dtype can only be set when return_indices is true")
        return (sig.domains["T"],)
    dtype = as_str(sig.consts.get("output_indices_dtype", "int32"))
    if dtype not in ("int32", "uint16"):
        raise ValueError(f"output_indices_dtype {dtype!r} is not int32 or uint16")
    return sig.domains["T"], dtype


def non_zero(x: np.ndarray) -> np.ndarray:
    return np.transpose(np.nonzero(x)).astype(np.int32).reshape(-1, x.ndim)


OPS: tuple[SimOp, ...] = (
    op("concat", "values*:T axis!:int32 interleave?!:bool", "T", concat, exact=True, T=_WIDE),
    op("split", "x:T num_splits?!:int32 split_sizes?!:int32 axis!:int32", "T*", split,
       exact=True, T=ANY),
    op("stack", "values*:T axis!:int32", "T", stack, exact=True, T=_WIDE),
    op("tile", "x:T reps:int32", "T", tile, exact=True, T=ANY),
    op("pad", "x:T pad:int32 mode?!:string constant_val?!:T", "T", pad, exact=True,
       T="fp16|fp32"),
    op("band_part", "x:T lower?!:int32 upper?!:int32", "T", band_part, exact=True, T=ANY),
    op("cumsum", "x:T axis?!:int32 exclusive?!:bool reverse?!:bool", "T", cumsum, T=NUMERIC),
    op("fill", "shape:int32 value?!:T", lambda s: (s.dtypes.get("value", "fp32"),), fill,
       exact=True, T=ANY),
    op("fill_like", "ref_tensor:T value?!:U", lambda s: (s.dtypes.get("value", "fp32"),),
       fill_like, exact=True, T=ANY, U=ANY),
    op("range_1d", "end:T start:T step:T", "T", range_1d, T=NUMERIC),
    op("one_hot", "indices:int32 one_hot_vector_size:int32 axis?!:int32 on_value?!:T "
       "off_value?!:T", lambda s: (s.dtypes.get("on_value", s.dtypes.get("off_value", "int32")),),
       one_hot, exact=True, T=ANY),
    op("argsort", "x:T axis?!:int32 ascending?!:bool", "int32", argsort, T=NUMERIC),
    op("topk", "x:T k?!:K axis?!:int32 ascending?!:bool sort?!:bool return_indices?!:bool "
       "output_indices_dtype?!:string", _topk_outputs, topk, exact=True, T=_SORTABLE,
       K="int8|int16|int32"),
    op("non_zero", "x:T", "int32", non_zero, T=ANY),
)  # fmt: skip
