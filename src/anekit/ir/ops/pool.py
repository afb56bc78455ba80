"""Sliding-window pooling over 1 to 3 spatial axes (NC + spatial): max, average and Lp pools."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types, numel
from anekit.ir.registry import Attr, InferError, KernelError, TensorType, declare

POOL_ATTRS = (
    Attr("kernel", "ints", doc="window size per spatial axis"),
    Attr("strides", "ints", (), doc="per spatial axis; empty = all 1"),
    Attr("pads", "ints", (), doc="begins for each spatial axis, then ends; empty = all 0"),
    Attr("dilations", "ints", (), doc="per spatial axis; empty = all 1"),
    Attr("ceil_mode", "bool", False, doc="round the output size up (last window may overhang)"),
)


def pool_geometry(
    spatial: int, attrs: Attrs
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(kernel, strides, pads, dilations) with defaults filled for ``spatial`` axes."""
    kernel = tuple(attrs["kernel"])
    strides = tuple(attrs["strides"]) or (1,) * spatial
    pads = tuple(attrs["pads"]) or (0,) * (2 * spatial)
    dilations = tuple(attrs["dilations"]) or (1,) * spatial
    if (
        len(kernel) != spatial
        or len(strides) != spatial
        or len(dilations) != spatial
        or len(pads) != 2 * spatial
    ):
        raise InferError(
            f"kernel/strides/dilations need {spatial} values and pads {2 * spatial} "
            f"for {spatial} spatial axes, got kernel {list(kernel)}, strides {list(strides)}, "
            f"pads {list(pads)}, dilations {list(dilations)}"
        )
    if min(kernel) <= 0 or min(strides) <= 0 or min(dilations) <= 0 or min(pads) < 0:
        raise InferError("kernel, strides and dilations must be positive and pads non-negative")
    return kernel, strides, pads, dilations


def pool_output_size(
    size: int, k: int, stride: int, pad_begin: int, pad_end: int, dilation: int, ceil_mode: bool
) -> int:
    """Windows along one axis; in ceil mode the last window must start inside input or begin pad."""
    span = size + pad_begin + pad_end - ((k - 1) * dilation + 1)
    if span < 0:
        return 0
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def _pool_shape(x: TensorType, attrs: Attrs) -> tuple[int, ...]:
    if x.rank < 3:
        raise InferError(f"pooling needs an input of rank >= 3 (N, C, spatial...), got {x}")
    sp = x.rank - 2
    kernel, strides, pads, dil = pool_geometry(sp, attrs)
    out = []
    for i in range(sp):
        o = pool_output_size(
            x.shape[2 + i], kernel[i], strides[i], pads[i], pads[sp + i], dil[i], attrs["ceil_mode"]
        )
        if o <= 0:
            raise InferError(
                f"window {list(kernel)} (dilations {list(dil)}) does not fit the padded input "
                f"{list(x.shape[2:])} with pads {list(pads)}"
            )
        out.append(o)
    return (*x.shape[:2], *out)


def _windows(
    x: np.ndarray, attrs: Attrs, fill: float | int
) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """For each kernel offset: (offset, the strided view of the padded input it reads)."""
    sp = x.ndim - 2
    kernel, strides, pads, dil = pool_geometry(sp, attrs)
    out_sp = _pool_shape(TensorType(x.shape, DType.FP32), attrs)[2:]
    widths = [(0, 0), (0, 0)]
    for i in range(sp):
        needed = (out_sp[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1
        widths.append((pads[i], max(pads[sp + i], needed - x.shape[2 + i] - pads[i])))
    xp = np.pad(x, widths, mode="constant", constant_values=fill)
    for offs in itertools.product(*(range(k) for k in kernel)):
        sl = tuple(
            slice(offs[i] * dil[i], offs[i] * dil[i] + (out_sp[i] - 1) * strides[i] + 1, strides[i])
            for i in range(sp)
        )
        yield offs, xp[(slice(None), slice(None), *sl)]


def _window_attrs(kernel, strides, pads, dilations, ceil_mode) -> Attrs:
    """A kernel's window attributes as the geometry helpers read them."""
    return {
        "kernel": kernel,
        "strides": strides,
        "pads": pads,
        "dilations": dilations,
        "ceil_mode": ceil_mode,
    }


def _window_sums(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    """The sum over each window, pads contributing zero."""
    total: np.ndarray | None = None
    for _offs, view in _windows(x, attrs, 0.0):
        total = view.copy() if total is None else total + view
    return total


def window_counts(in_sp: tuple[int, ...], attrs: Attrs, include_pad: bool) -> np.ndarray:
    """Elements each window averages over: inside the input, or inside input plus pads."""
    sp = len(in_sp)
    kernel, strides, pads, dil = pool_geometry(sp, attrs)
    counts = np.ones((), dtype=np.float32)
    for i in range(sp):
        o = pool_output_size(
            in_sp[i], kernel[i], strides[i], pads[i], pads[sp + i], dil[i], attrs["ceil_mode"]
        )
        pos = np.arange(o)[:, None] * strides[i] + np.arange(kernel[i])[None, :] * dil[i]
        lo, hi = (
            (0, in_sp[i] + pads[i] + pads[sp + i]) if include_pad else (pads[i], pads[i] + in_sp[i])
        )
        per_axis = ((pos >= lo) & (pos < hi)).sum(axis=1).astype(np.float32)
        counts = np.multiply.outer(counts, per_axis)
    return counts


# --- max pool -------------------------------------------------------------------------------


def _max_pool_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    if not (x.dtype.is_float or x.dtype in (DType.INT8, DType.UINT8)):
        raise InferError(f"max_pool takes float, int8 or uint8 input, got {x.dtype}")
    shape = _pool_shape(x, attrs)
    out = [TensorType(shape, x.dtype)]
    if attrs["return_indices"]:
        out.append(TensorType(shape, DType.INT64))
    return out


def _flat_index(
    in_shape: tuple[int, ...], attrs: Attrs, offs: tuple[int, ...], column_major: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(flat input index, inside-the-input mask) of every output position for one offset."""
    sp = len(in_shape) - 2
    _kernel, strides, pads, dil = pool_geometry(sp, attrs)
    out_sp = _pool_shape(TensorType(in_shape, DType.FP32), attrs)[2:]
    spatial = in_shape[2:]
    # element strides of the spatial axes: row-major, or column-major over the spatial axes
    order = range(sp - 1, -1, -1) if not column_major else range(sp)
    elem = [0] * sp
    acc = 1
    for i in order:
        elem[i] = acc
        acc *= spatial[i]
    index = np.zeros(out_sp, dtype=np.int64)
    valid = np.ones(out_sp, dtype=bool)
    for i in range(sp):
        pos = np.arange(out_sp[i]) * strides[i] + offs[i] * dil[i] - pads[i]
        shape = [1] * sp
        shape[i] = out_sp[i]
        index = index + (pos * elem[i]).reshape(shape)
        valid = valid & ((pos >= 0) & (pos < spatial[i])).reshape(shape)
    plane = numel(spatial)
    base = np.arange(in_shape[0] * in_shape[1], dtype=np.int64).reshape(in_shape[:2]) * plane
    return base.reshape(in_shape[:2] + (1,) * sp) + index, valid


@declare(
    "max_pool",
    layer_type="pool",
    inputs=("x",),
    outputs=("y", "indices"),
    attrs=(
        *POOL_ATTRS,
        Attr("return_indices", "bool", False, doc="also output the flat index of each maximum"),
        Attr("storage_order", "int", 0, choices=(0, 1), doc="indices row- (0) or column-major (1)"),
    ),
    infer=_max_pool_infer,
    num_outputs=lambda attrs, n: 2 if attrs["return_indices"] else 1,
)
def max_pool(x, kernel, strides, pads, dilations, ceil_mode, return_indices, storage_order):
    """maximum over each window (pads never win); optionally the flat input index of it"""
    attrs = _window_attrs(kernel, strides, pads, dilations, ceil_mode)
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    best: np.ndarray | None = None
    best_index: np.ndarray | None = None
    found: np.ndarray | None = None
    for offs, view in _windows(x, attrs, fill):
        if best is None:
            best = view.copy()
            if return_indices:
                best_index, found = _flat_index(x.shape, attrs, offs, storage_order == 1)
                found = np.broadcast_to(found, best.shape).copy()
                best_index = np.broadcast_to(best_index, best.shape).copy()
            continue
        if not return_indices:
            np.maximum(best, view, out=best)
            continue
        index, valid = _flat_index(x.shape, attrs, offs, storage_order == 1)
        # the first maximum in window order wins; padding positions never do
        take = valid & ((view > best) | ~found)
        best = np.where(take, view, best)
        best_index = np.where(take, index, best_index)
        found = found | valid
    if return_indices:
        return best, best_index
    return best


# --- average and Lp pools -------------------------------------------------------------------


def _float_pool_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    if not x.dtype.is_float:
        raise InferError(f"input must be a float tensor, got {x.dtype}")
    return [TensorType(_pool_shape(x, attrs), x.dtype)]


@declare(
    "avg_pool",
    layer_type="pool",
    inputs=("x",),
    attrs=(*POOL_ATTRS, Attr("count_include_pad", "bool", False)),
    infer=_float_pool_infer,
)
def avg_pool(x, kernel, strides, pads, dilations, ceil_mode, count_include_pad):
    """mean over each window: of the input elements, or counting pads too (never the overhang)"""
    attrs = _window_attrs(kernel, strides, pads, dilations, ceil_mode)
    return _window_sums(x, attrs) / window_counts(x.shape[2:], attrs, count_include_pad)


def _lp_pool_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    if attrs["p"] <= 0:
        raise InferError(f"p must be a positive integer, got {attrs['p']}")
    return _float_pool_infer(ins, attrs)


@declare(
    "lp_pool",
    inputs=("x",),
    attrs=(*POOL_ATTRS, Attr("p", "int", 2)),
    infer=_lp_pool_infer,
)
def lp_pool(x, kernel, strides, pads, dilations, ceil_mode, p):
    """(sum over each window of |x|^p)^(1/p), pads contributing zero"""
    attrs = _window_attrs(kernel, strides, pads, dilations, ceil_mode)
    return _window_sums(np.abs(x) ** np.float32(p), attrs) ** np.float32(1.0 / p)


def _max_unpool_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, idx = ins
    if idx.dtype is not DType.INT64 or idx.shape != x.shape:
        raise InferError(f"indices must be int64 with the shape of x {list(x.shape)}, got {idx}")
    shape = tuple(attrs["output_shape"])
    if len(shape) != x.rank or shape[:2] != x.shape[:2]:
        raise InferError(f"output_shape {list(shape)} must keep N and C of {list(x.shape)}")
    return [TensorType(shape, x.dtype)]


@declare(
    "max_unpool",
    inputs=("x", "indices"),
    attrs=(Attr("output_shape", "ints"),),
    infer=_max_unpool_infer,
    no_lowering="not lowered yet: MIL has no unpooling (a scatter by the pooling indices)",
)
def max_unpool(x, indices, output_shape):
    """zeros of output_shape with x written at the flat indices (max_pool's indices output)"""
    out = np.zeros(numel(output_shape), dtype=x.dtype)
    flat = indices.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= out.size):
        raise KernelError(f"max_unpool index out of range [0, {out.size})")
    out[flat] = x.reshape(-1)
    return out.reshape(output_shape)
