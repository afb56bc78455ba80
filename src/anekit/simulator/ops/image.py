"""Image MIL ops: upsampling and resizing of the last two axes (nearest and bilinear), crop, resize.

Bilinear sampling grids follow the definitions' formulas (``resize_bilinear``'s five
sampling modes; ``upsample_bilinear``'s ``align_corners`` and ``half_pixel_centers``), each
grid point clamped to ``[0, X_in - 1]``. Nearest neighbour takes ``floor(i * X_in / X_out)``
(``floor(i / scale)`` for the upsample ops).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..registry import FLOAT, Signature, SimOp, op
from ._util import F32, as_bool, as_float, as_int, as_ints, as_str, checked_shape

SAMPLING_MODES = ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "UNALIGN_CORNERS", "DEFAULT",
                  "OFFSET_CORNERS")  # fmt: skip


def grid(size_in: int, size_out: int, mode: str) -> np.ndarray:
    """Source coordinates (float64) of each output position along one axis."""
    i = np.arange(size_out, dtype=np.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if size_out == 1:
            points = np.full(1, (size_in - 1) / 2 if mode == "ALIGN_CORNERS" else 0.0)
        else:
            points = i * (size_in - 1) / (size_out - 1)
    elif mode == "DEFAULT":
        points = i * ((size_in - size_in / size_out) / (size_out - 1)) if size_out > 1 else i * 0
    elif mode == "OFFSET_CORNERS":
        delta = max(1, size_in - 1) / size_out
        points = 0.5 * delta + i * delta
    elif mode == "UNALIGN_CORNERS":
        spacing = size_in / size_out
        points = i * spacing + 0.5 * spacing - 0.5
    elif mode == "TF_DEFAULT":  # align_corners = half_pixel_centers = False
        points = i * (size_in / size_out)
    else:
        raise ValueError(f"unknown sampling_mode {mode!r} (one of {', '.join(SAMPLING_MODES)})")
    return np.clip(points, 0, size_in - 1)


def _linear(x: np.ndarray, axis: int, points: np.ndarray) -> np.ndarray:
    """Linear interpolation of ``x`` along ``axis`` at ``points`` (in float32)."""
    low = np.floor(points).astype(np.int64)
    high = np.minimum(low + 1, x.shape[axis] - 1)
    frac = (points - low).astype(F32)
    shape = [1] * x.ndim
    shape[axis] = -1
    a = np.take(x, low, axis=axis)
    b = np.take(x, high, axis=axis)
    return a + (b - a) * frac.reshape(shape)


def _bilinear(x: np.ndarray, height: int, width: int, mode_h: str, mode_w: str) -> np.ndarray:
    if x.ndim < 3:
        raise ValueError(f"x must be rank 3 or more, not {x.ndim}")
    checked_shape((*x.shape[:-2], height, width), "resized")
    if height < 1 or width < 1:
        raise ValueError(f"target size {height}x{width} is empty")
    y = _linear(x, x.ndim - 2, grid(x.shape[-2], height, mode_h))
    return _linear(y, x.ndim - 1, grid(x.shape[-1], width, mode_w))


def _nearest(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    if x.ndim < 3:
        raise ValueError(f"x must be rank 3 or more, not {x.ndim}")
    checked_shape((*x.shape[:-2], len(rows), len(cols)), "resized")
    rows = np.minimum(rows, x.shape[-2] - 1)
    cols = np.minimum(cols, x.shape[-1] - 1)
    # one axis after the other, the smaller intermediate first: each take writes C order (a
    # 2-D fancy index wrote [H, W, N, C] and handed the next op a transposed layout whose
    # copy cost PP-OCRv4 det ~130 ms per upsample); the values are copied either way
    if len(rows) * x.shape[-1] <= x.shape[-2] * len(cols):
        return x.take(rows, axis=-2).take(cols, axis=-1)
    return x.take(cols, axis=-1).take(rows, axis=-2)


def _scaled(size: int, scale: float) -> int:
    out = math.floor(size * scale)
    if out < 1:
        raise ValueError(f"scale {scale} makes a dimension of {size} empty")
    return out


def upsample_nearest_neighbor(
    x: np.ndarray, scale_factor_height: Any = 1, scale_factor_width: Any = 1
) -> np.ndarray:
    sh, sw = as_float(scale_factor_height), as_float(scale_factor_width)
    if not (sh > 0 and sw > 0):
        raise ValueError(f"scale factors {sh}, {sw} must be positive")
    h, w = _scaled(x.shape[-2], sh), _scaled(x.shape[-1], sw)
    rows = np.floor(np.arange(h) / sh).astype(np.int64)
    cols = np.floor(np.arange(w) / sw).astype(np.int64)
    return _nearest(x, rows, cols)


def resize_nearest_neighbor(
    x: np.ndarray, target_size_height: Any, target_size_width: Any
) -> np.ndarray:
    h, w = as_int(target_size_height), as_int(target_size_width)
    if h < 1 or w < 1:
        raise ValueError(f"target size {h}x{w} is empty")
    rows = (np.arange(h) * x.shape[-2]) // h
    cols = (np.arange(w) * x.shape[-1]) // w
    return _nearest(x, rows, cols)


def upsample_bilinear(
    x: np.ndarray,
    scale_factor_height: Any = 1,
    scale_factor_width: Any = 1,
    align_corners: Any = True,
    half_pixel_centers: Any = None,
) -> np.ndarray:
    sh, sw = as_float(scale_factor_height), as_float(scale_factor_width)
    if not (sh > 0 and sw > 0):
        raise ValueError(f"scale factors {sh}, {sw} must be positive")
    aligned = as_bool(align_corners)
    half = (not aligned) if half_pixel_centers is None else as_bool(half_pixel_centers)
    if aligned and half:
        raise ValueError("align_corners and half_pixel_centers cannot both be true")
    mode = "STRICT_ALIGN_CORNERS" if aligned else "UNALIGN_CORNERS" if half else "TF_DEFAULT"
    h, w = _scaled(x.shape[-2], sh), _scaled(x.shape[-1], sw)
    return _bilinear(x, h, w, mode, mode)


def resize_bilinear(
    x: np.ndarray,
    target_size_height: Any = 1,
    target_size_width: Any = 1,
    sampling_mode: Any = "DEFAULT",
) -> np.ndarray:
    mode = as_str(sampling_mode)
    if mode not in SAMPLING_MODES:
        raise ValueError(f"unknown sampling_mode {mode!r} (one of {', '.join(SAMPLING_MODES)})")
    return _bilinear(x, as_int(target_size_height), as_int(target_size_width), mode, mode)


def resize(
    x: np.ndarray,
    shape: np.ndarray,
    resized_dims: Any,
    interpolation_mode: Any = "LINEAR",
    sampling_mode: Any = "DEFAULT",
) -> np.ndarray:
    target = as_ints(shape)
    n = as_int(resized_dims)
    interpolation, mode = as_str(interpolation_mode), as_str(sampling_mode)
    if not 0 <= n <= len(target) <= x.ndim:
        raise ValueError(f"resized_dims {n} and shape {list(target)} do not fit rank {x.ndim}")
    if interpolation not in ("LINEAR", "NEAREST_NEIGHBOR") or mode not in SAMPLING_MODES:
        raise ValueError(f"unknown interpolation_mode {interpolation!r} or sampling_mode {mode!r}")
    out = x
    sizes = list(x.shape)
    for j in range(n):
        axis = x.ndim - n + j
        size = target[len(target) - n + j] or x.shape[axis]
        sizes[axis] = size
        checked_shape(sizes, "resized")
        if interpolation == "LINEAR":
            out = _linear(out.astype(F32, copy=False), axis, grid(x.shape[axis], size, mode))
        else:
            picks = np.minimum((np.arange(size) * x.shape[axis]) // size, x.shape[axis] - 1)
            out = np.take(out, picks, axis=axis)
    return out.astype(x.dtype, copy=False)


def crop(x: np.ndarray, crop_height: np.ndarray, crop_width: np.ndarray) -> np.ndarray:
    top, bottom = as_ints(crop_height)
    left, right = as_ints(crop_width)
    h, w = x.shape[-2:]
    if min(top, bottom, left, right) < 0 or top + bottom >= h or left + right >= w:
        raise ValueError(f"crops {[top, bottom]}, {[left, right]} do not fit {h}x{w}")
    return x[..., top : h - bottom, left : w - right]


def _check_rank(sig: Signature, opset: int) -> None:
    if "sampling_mode" in sig.consts and as_str(sig.consts["sampling_mode"]) not in SAMPLING_MODES:
        raise ValueError(f"unknown sampling_mode {as_str(sig.consts['sampling_mode'])!r}")


_SCALE = "scale_factor_height?!:U scale_factor_width?!:U"

OPS: tuple[SimOp, ...] = (
    op("upsample_nearest_neighbor", "x:T " + _SCALE, "T", upsample_nearest_neighbor,
       exact=True, T=FLOAT, U="fp32|int32"),
    op("upsample_bilinear", f"x:T {_SCALE} align_corners?!:bool half_pixel_centers?!:bool",
       "T", upsample_bilinear, T=FLOAT, U="fp32|int32"),
    op("resize_nearest_neighbor", "x:T target_size_height!:int32 target_size_width!:int32",
       "T", resize_nearest_neighbor, exact=True, T=FLOAT),
    op("resize_bilinear", "x:T target_size_height?!:int32 target_size_width?!:int32 "
       "sampling_mode?!:string", "T", resize_bilinear, check=_check_rank, T=FLOAT),
    op("resize", "x:T shape:U resized_dims!:uint32 interpolation_mode?!:string "
       "sampling_mode?!:string", "T", resize, check=_check_rank, T="fp16|fp32|int32",
       U="int32|int16|uint16|uint32"),
    op("crop", "x:T crop_height!:int32 crop_width!:int32", "T", crop, exact=True, T=FLOAT),
)  # fmt: skip
