"""Resampling: resize (nearest, linear, cubic; ONNX coordinate modes; antialias), pixel shuffles."""

from __future__ import annotations

import math

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types
from anekit.ir.registry import Attr, InferError, TensorType, declare

COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


def _resize_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    sizes, scales, roi = attrs["sizes"], attrs["scales"], attrs["roi"]
    if len(sizes) != x.rank or len(scales) != x.rank:
        raise InferError(
            f"sizes {list(sizes)} and scales {list(scales)} need one value per axis ({x.rank})"
        )
    if any(s < 0 for s in sizes) or any(not s > 0 for s in scales):
        raise InferError(f"sizes must be >= 0 and scales > 0, got {list(sizes)} and {list(scales)}")
    if roi and len(roi) != 2 * x.rank:
        raise InferError(f"roi needs {2 * x.rank} values (starts then ends), got {len(roi)}")
    if x.dtype is DType.BOOL:
        raise InferError("resize takes a numeric tensor, got bool")
    if attrs["antialias"] and attrs["mode"] == "nearest":
        raise InferError("antialias applies to linear and cubic modes, not nearest")
    return [TensorType(tuple(sizes), x.dtype)]


def source_coordinates(
    mode: str, out_size: int, in_size: int, scale: float, roi: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray | None]:
    """Input coordinate of each output index, and (tf_crop_and_resize) which fall outside.

    fp32 arithmetic in onnxruntime's order, so that ties round the same way; the spec's
    ``length_resized`` is the integer output size.
    """
    f32 = np.float32
    y = np.arange(out_size, dtype=f32)
    s, n_in, n_out = f32(scale), f32(in_size), f32(out_size)
    if mode == "align_corners":
        x = np.zeros_like(y) if out_size == 1 else y * (n_in - 1) / (n_out - 1)
    elif mode == "asymmetric":
        x = y / s
    elif mode == "tf_crop_and_resize":
        lo, hi = f32(roi[0]), f32(roi[1])
        if out_size == 1:
            x = np.full_like(y, f32(0.5) * (lo + hi) * (n_in - 1))
        else:
            x = lo * (n_in - 1) + y * (hi - lo) * (n_in - 1) / (n_out - 1)
        return x, (x < 0) | (x > n_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.zeros_like(y) if out_size == 1 else (y + f32(0.5)) / s - f32(0.5)
    elif mode == "half_pixel":
        x = (y + f32(0.5)) / s - f32(0.5)
    elif mode == "half_pixel_symmetric":
        adjustment = n_out / (s * n_in)
        offset = n_in / 2 * (1 - adjustment)
        x = offset + (y + f32(0.5)) / s - f32(0.5)
    else:
        raise ValueError(f"unknown coordinate transformation mode {mode!r}")
    return x, None


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distance d."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def interpolation_taps(
    x: np.ndarray, scale: float, mode: str, a: float, antialias: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(neighbour indices [out, n], weights [out, n]) of each source coordinate.

    As ONNX: a coordinate on an integer takes the window to its left (weight 1 on itself),
    and antialiasing widens the kernel by 1/scale when downsampling.
    """
    base = np.floor(x)
    on_grid = x == base
    ratio = np.where(on_grid, 1.0, x - base)  # in (0, 1]
    base = np.where(on_grid, base - 1, base).astype(np.int64)
    support = 1.0 if mode == "linear" else 2.0
    s = min(scale, 1.0) if antialias else 1.0
    first = int(math.floor(-support / s) + 1)  # offset of the first tap from ``base``
    n = 2 - 2 * first
    offsets = np.arange(first, first + n)
    dist = (offsets[None, :] - ratio[:, None]) * s
    if mode == "linear":
        weights = np.clip(1.0 - np.abs(dist), 0.0, 1.0)
    else:
        weights = _cubic(dist, a)
    if antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return base[:, None] + offsets[None, :], weights


def nearest_index(x: np.ndarray, rule: str, downsampling: bool) -> np.ndarray:
    """Index of the input element nearest to each source coordinate under ``rule``."""
    lo = np.floor(x)
    frac = x - lo
    if rule == "simple":  # onnxruntime's rule before opset 11
        rule = "ceil" if downsampling else "floor"
    if rule == "round_prefer_floor":
        up = frac > 0.5
    elif rule == "round_prefer_ceil":
        up = frac >= 0.5
    elif rule == "floor":
        up = np.zeros_like(frac, dtype=bool)
    else:
        up = frac > 0
    return (lo + up).astype(np.int64)


def _resize_axis(x: np.ndarray, axis: int, out_size: int, scale: float, attrs: Attrs) -> np.ndarray:
    in_size = x.shape[axis]
    roi = attrs["roi"]
    r = x.ndim
    bounds = (roi[axis], roi[axis + r]) if roi else (0.0, 1.0)
    coord, outside = source_coordinates(
        attrs["coordinate_transformation_mode"], out_size, in_size, scale, bounds
    )
    if attrs["mode"] == "nearest":
        idx = nearest_index(coord, attrs["nearest_mode"], scale < 1)
        y = np.take(x, np.clip(idx, 0, in_size - 1), axis=axis)
    else:
        taps, weights = interpolation_taps(
            coord, scale, attrs["mode"], attrs["cubic_coeff_a"], attrs["antialias"]
        )
        if attrs["exclude_outside"]:
            weights = np.where((taps < 0) | (taps >= in_size), 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
        taps = np.clip(taps, 0, in_size - 1)  # outside taps repeat the edge
        shape = [1] * r
        shape[axis] = out_size
        y = np.zeros(x.shape[:axis] + (out_size,) + x.shape[axis + 1 :], dtype=np.float32)
        for j in range(taps.shape[1]):  # one gather per tap
            w = weights[:, j].astype(np.float32).reshape(shape)
            y += np.take(x, taps[:, j], axis=axis) * w
    if outside is not None and outside.any():
        shape = [1] * r
        shape[axis] = out_size
        y = np.where(outside.reshape(shape), np.float32(attrs["extrapolation_value"]), y)
    return y


@declare(
    "resize",
    layer_type="texture",
    inputs=("x",),
    attrs=(
        Attr("sizes", "ints", doc="the output shape"),
        Attr("scales", "floats", doc="per-axis scale used to map coordinates (out/in if unknown)"),
        Attr("mode", "str", "nearest", choices=("nearest", "linear", "cubic")),
        Attr("coordinate_transformation_mode", "str", "half_pixel", choices=COORDINATE_MODES),
        Attr("nearest_mode", "str", "round_prefer_floor", choices=NEAREST_MODES),
        Attr("cubic_coeff_a", "float", -0.75),
        Attr("exclude_outside", "bool", False),
        Attr("extrapolation_value", "float", 0.0),
        Attr("antialias", "bool", False),
        Attr("roi", "floats", (), doc="tf_crop_and_resize: starts then ends, normalised"),
    ),
    infer=_resize_infer,
)
def resize(
    x,
    sizes,
    scales,
    mode,
    coordinate_transformation_mode,
    nearest_mode,
    cubic_coeff_a,
    exclude_outside,
    extrapolation_value,
    antialias,
    roi,
):
    """separable N-d resampling, one axis at a time (the ONNX Resize semantics)"""
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": coordinate_transformation_mode,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": cubic_coeff_a,
        "exclude_outside": exclude_outside,
        "extrapolation_value": extrapolation_value,
        "antialias": antialias,
        "roi": roi,
    }
    dtype = x.dtype
    y = x
    for axis in range(x.ndim):
        identity_roi = not roi or (
            math.isclose(roi[axis], 0.0) and math.isclose(roi[axis + x.ndim], 1.0)
        )
        if sizes[axis] == x.shape[axis] and math.isclose(scales[axis], 1.0) and identity_roi:
            continue
        y = _resize_axis(y, axis, sizes[axis], scales[axis], attrs)
    if dtype.kind in "iu" and y.dtype != dtype:
        info = np.iinfo(dtype)
        y = np.clip(np.rint(y), info.min, info.max)
    return y.astype(dtype)


# --- pixel shuffles -------------------------------------------------------------------------


def _depth_to_space_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    b = attrs["block_size"]
    if x.rank != 4:
        raise InferError(f"depth_to_space needs a rank-4 NCHW input, got {x}")
    if b <= 0 or x.shape[1] % (b * b):
        raise InferError(f"{x.shape[1]} channels are not a multiple of block_size^2 = {b * b}")
    n, c, h, w = x.shape
    return [TensorType((n, c // (b * b), h * b, w * b), x.dtype)]


@declare(
    "depth_to_space",
    inputs=("x",),
    attrs=(Attr("block_size", "int"), Attr("mode", "str", "DCR", choices=("DCR", "CRD"))),
    infer=_depth_to_space_infer,
)
def depth_to_space(x, block_size, mode):
    """move channel blocks into b x b spatial tiles (DCR: depth-column-row; CRD: pixel shuffle)"""
    n, c, h, w = x.shape
    b = block_size
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    b = attrs["block_size"]
    if x.rank != 4:
        raise InferError(f"space_to_depth needs a rank-4 NCHW input, got {x}")
    if b <= 0 or x.shape[2] % b or x.shape[3] % b:
        raise InferError(f"spatial size {list(x.shape[2:])} is not a multiple of block_size {b}")
    n, c, h, w = x.shape
    return [TensorType((n, c * b * b, h // b, w // b), x.dtype)]


@declare(
    "space_to_depth",
    inputs=("x",),
    attrs=(Attr("block_size", "int"), Attr("mode", "str", "DCR", choices=("DCR", "CRD"))),
    infer=_space_to_depth_infer,
)
def space_to_depth(x, block_size, mode):
    """move b x b spatial tiles into channels (the inverse of depth_to_space in the same mode)"""
    n, c, h, w = x.shape
    b = block_size
    t = x.reshape(n, c, h // b, b, w // b, b)
    t = t.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else t.transpose(0, 1, 3, 5, 2, 4)
    return t.reshape(n, c * b * b, h // b, w // b)
