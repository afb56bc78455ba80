"""Reduction MIL ops: reduce_* over axes, and reduce_argmax/argmin over one axis (iOS 15-18 defs).

Float reductions accumulate in float32 (numpy's pairwise summation); int32 reductions are
computed as coremltools does and cast back to int32.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import fp16
from ..registry import NUMERIC, Signature, SimOp, op
from ..values import STORAGE
from ._util import as_bool, as_int, as_ints, as_str, axes_of, axis_of


def _reduction(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def kernel(x: np.ndarray, axes: Any = None, keep_dims: Any = False) -> np.ndarray:
        chosen = tuple(range(x.ndim)) if axes is None else axes_of(as_ints(axes), x.ndim)
        out = fn(x, axis=chosen, keepdims=as_bool(keep_dims))
        return np.asarray(out).astype(x.dtype, copy=False)

    def prepare(known: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> Any:
        """The kernel for one input shape (prepared.py): axes and keep_dims read once."""
        if set(shapes) != {"x"}:
            return None
        rank, axes = len(shapes["x"]), known.get("axes")
        try:
            chosen = tuple(range(rank)) if axes is None else axes_of(as_ints(axes), rank)
            keep = as_bool(known.get("keep_dims", False))
        except ValueError:
            return None  # the general kernel raises it, naming the op
        if fn is _mean and chosen and all(shapes["x"][a] == 1 for a in chosen):
            return _mean_of_one(shapes["x"], chosen, keep)
        return lambda x: np.asarray(fn(x, axis=chosen, keepdims=keep)).astype(x.dtype, copy=False)

    kernel.prepare = prepare  # type: ignore[attr-defined]  # see prepared.py
    return kernel


def _l1(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(np.abs(x), axis=axis, keepdims=keepdims)


def _l2(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    wide = x if x.dtype.kind == "f" else x.astype(np.float64)
    return np.sqrt(np.sum(wide * wide, axis=axis, keepdims=keepdims))


def _log_sum(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    wide = x if x.dtype.kind == "f" else x.astype(np.float64)
    return np.log(np.sum(wide, axis=axis, keepdims=keepdims))


def _log_sum_exp(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    wide = x if x.dtype.kind == "f" else x.astype(np.float64)
    peak = np.max(wide, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0)
    out = np.log(np.sum(np.exp(wide - peak), axis=axis, keepdims=True)) + peak
    return out if keepdims else np.squeeze(out, axis=axis)


def _mean(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    count = math.prod(x.shape[a] for a in axis)
    if x.dtype.kind != "f" or count == 0:  # and numpy's warning about an empty mean
        return np.mean(x, axis=axis, keepdims=keepdims, dtype=x.dtype if x.dtype.kind == "f" else None)
    rank, mean_rows = x.ndim, fp16._converter("mean_rows")  # read per call: tests unset it
    if (
        mean_rows is not None
        and x.size
        and axis  # no axes: numpy adds nothing (a -0 stays -0)
        and x.dtype == np.float32
        and x.flags.c_contiguous
        and sorted(axis) == list(range(rank - len(axis), rank))
    ):
        # the trailing axes (a global average pool): the same sums and division in C, 4x
        # faster than numpy's scalar pairwise loop (_native.mean_rows)
        kept = x.shape[: rank - len(axis)]
        out = np.empty(kept + (1,) * len(axis) if keepdims else kept, np.float32)
        mean_rows(x, out)
        return out
    # what np.mean computes, without its Python wrapper (a 1-value mean cost a streaming
    # model 16 us a run): the sum in x's dtype, divided by the count as an intp
    total = np.add.reduce(x, axis=axis, dtype=x.dtype, keepdims=keepdims)
    if isinstance(total, np.ndarray):
        return np.true_divide(total, np.intp(count), out=total, casting="unsafe", subok=False)
    return total.dtype.type(total / np.intp(count))


def _mean_of_one(shape: tuple[int, ...], axes: tuple[int, ...], keep: bool) -> Any:
    """reduce_mean over axes of size 1 (a streaming model's mean over its one position): numpy's
    sum of one value is ``0 + x`` (a -0 becomes +0, a signalling NaN quiet), and dividing that
    by the count 1 changes no bit, so the mean is ``x + 0`` reshaped, without the reduction."""
    target = tuple(d for i, d in enumerate(shape) if i not in axes or keep)
    general = _reduction(_mean)

    def run(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind != "f" or x.shape != shape:
            return general(x, axes, keep)
        return np.asarray(np.add(x.reshape(target), x.dtype.type(0)))  # 0-d: an array too

    return run


def _sum_square(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(x * x, axis=axis, keepdims=keepdims)


_AXES: dict[str, tuple[Callable[..., Any], bool]] = {  # name -> (function, exact)
    "reduce_l1_norm": (_l1, False),
    "reduce_l2_norm": (_l2, False),
    "reduce_log_sum": (_log_sum, False),
    "reduce_log_sum_exp": (_log_sum_exp, False),
    "reduce_max": (np.max, True),
    "reduce_mean": (_mean, False),
    "reduce_min": (np.min, True),
    "reduce_prod": (np.prod, False),
    "reduce_sum": (np.sum, False),
    "reduce_sum_square": (_sum_square, False),
}


def _arg(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def kernel(
        x: np.ndarray, axis: Any = -1, keep_dims: Any = False, output_dtype: Any = "int32"
    ) -> np.ndarray:
        if x.ndim == 0:
            raise ValueError("x must be rank 1 or more")
        ax = axis_of(as_int(axis), x.ndim)
        out = fn(x, axis=ax, keepdims=as_bool(keep_dims))  # first index on ties
        return np.asarray(out).astype(STORAGE[as_str(output_dtype)])

    return kernel


def _arg_outputs(sig: Signature) -> tuple[str, ...]:
    dtype = as_str(sig.consts.get("output_dtype", "int32")).lower()
    if dtype not in ("int32", "uint16"):
        raise ValueError(f"output_dtype {dtype!r} is not int32 or uint16")
    return (dtype,)


OPS: tuple[SimOp, ...] = (
    *(op(name, "x:T axes?!:int32 keep_dims?!:bool", "T", _reduction(fn), exact=exact,
         T=NUMERIC) for name, (fn, exact) in _AXES.items()),
    op("reduce_argmax", "x:T axis?!:int32 keep_dims?!:bool output_dtype?!:string",
       _arg_outputs, _arg(np.argmax), T=NUMERIC),
    op("reduce_argmin", "x:T axis?!:int32 keep_dims?!:bool output_dtype?!:string",
       _arg_outputs, _arg(np.argmin), T=NUMERIC),
)  # fmt: skip
