"""Reductions over axes (sum, mean, max, min, prod, norms, log-sum-exp) and arg-reductions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types, normalize_axes, normalize_axis
from anekit.ir.registry import Attr, InferError, TensorType, declare

_REDUCE_ATTRS = (
    Attr("axes", "ints", (), doc="axes to reduce; empty = all (see noop_with_empty_axes)"),
    Attr("keepdims", "bool", True),
    Attr("noop_with_empty_axes", "bool", False),
)


def reduced_axes(rank: int, attrs: Attrs) -> tuple[int, ...]:
    if not attrs["axes"]:
        return () if attrs["noop_with_empty_axes"] else tuple(range(rank))
    return normalize_axes(attrs["axes"], rank)


def _reduce_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    axes = reduced_axes(x.rank, attrs)
    if attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorType(shape, x.dtype)]


def _mk(fn: Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray], empty: float | None):
    def kernel(x, axes, keepdims, noop_with_empty_axes):
        ax = reduced_axes(x.ndim, {"axes": axes, "noop_with_empty_axes": noop_with_empty_axes})
        if not ax:
            return fn(x, None, keepdims, noop=True) if noop_with_empty_axes else x
        if x.size == 0 or any(x.shape[a] == 0 for a in ax):
            shape = (
                tuple(1 if i in ax else d for i, d in enumerate(x.shape))
                if keepdims
                else tuple(d for i, d in enumerate(x.shape) if i not in ax)
            )
            return np.full(shape, _empty_value(x.dtype, empty), dtype=x.dtype)
        return fn(x, ax, keepdims)

    return kernel


def _r(npfn):
    def fn(x, ax, keepdims, noop=False):
        return x if noop else npfn(x, axis=ax, keepdims=keepdims)

    return fn


def _log_sum_exp(x, ax, keepdims, noop=False):
    if noop:
        return x
    m = np.max(x, axis=ax, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=ax, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=ax)


def _sum_square(x, ax, keepdims, noop=False):
    return x * x if noop else np.sum(x * x, axis=ax, keepdims=keepdims)


def _l1(x, ax, keepdims, noop=False):
    return np.abs(x) if noop else np.sum(np.abs(x), axis=ax, keepdims=keepdims)


def _l2(x, ax, keepdims, noop=False):
    if noop:
        return np.abs(x)
    return np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=ax, keepdims=keepdims)).astype(x.dtype)


def _log_sum(x, ax, keepdims, noop=False):
    return np.log(x) if noop else np.log(np.sum(x, axis=ax, keepdims=keepdims))


# name -> (fn, value of an empty reduction)
REDUCTIONS = {
    "reduce_sum": (_r(np.sum), 0.0),
    "reduce_mean": (_r(np.mean), float("nan")),
    "reduce_max": (_r(np.max), float("-inf")),
    "reduce_min": (_r(np.min), float("inf")),
    "reduce_prod": (_r(np.prod), 1.0),
    "reduce_l1": (_l1, 0.0),
    "reduce_l2": (_l2, 0.0),
    "reduce_sum_square": (_sum_square, 0.0),
    "reduce_log_sum": (_log_sum, float("-inf")),
    "reduce_log_sum_exp": (_log_sum_exp, float("-inf")),
}

# the reductions the engine runs (the others decompose into these, or run on the CPU)
ENGINE_REDUCTIONS = ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min")

for _name, (_fn, _empty) in REDUCTIONS.items():
    declare(
        _name,
        inputs=("x",),
        attrs=_REDUCE_ATTRS,
        infer=_reduce_infer,
        layer_type="reduction" if _name in ENGINE_REDUCTIONS else "",
    )(  # fmt: skip
        _mk(_fn, _empty)
    )


def _empty_value(dtype: np.dtype, value: float):
    if dtype.kind == "b":  # max of nothing is False, min of nothing True
        return bool(value > 0)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if value == float("-inf") else info.max if value == float("inf") else 0
    return value


_ARG_ATTRS = (
    Attr("axis", "int", 0),
    Attr("keepdims", "bool", True),
    Attr("select_last_index", "bool", False),
)


def _arg_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    if x.rank == 0:
        raise InferError("arg-reductions need rank >= 1")
    axis = normalize_axis(attrs["axis"], x.rank)
    shape = list(x.shape)
    if attrs["keepdims"]:
        shape[axis] = 1
    else:
        del shape[axis]
    return [TensorType(tuple(shape), DType.INT64)]


def _arg(npfn):
    def kernel(x, axis, keepdims, select_last_index):
        axis = axis % x.ndim
        if select_last_index:
            flipped = np.flip(x, axis=axis)
            idx = x.shape[axis] - 1 - npfn(flipped, axis=axis)
        else:
            idx = npfn(x, axis=axis)
        return np.expand_dims(idx, axis) if keepdims else idx

    return kernel


declare("argmax", inputs=("x",), attrs=_ARG_ATTRS, infer=_arg_infer)(_arg(np.argmax))
declare("argmin", inputs=("x",), attrs=_ARG_ATTRS, infer=_arg_infer)(_arg(np.argmin))
