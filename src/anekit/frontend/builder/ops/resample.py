"""Resampling builder ops: resize, interpolate, upsample, depth_to_space and the pixel shuffles."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.builder.ops.common import TensorLike, per_axis
from anekit.frontend.builder.tensor import Tensor, as_tensor, record


def resize(
    x: TensorLike,
    sizes: Sequence[int],
    *,
    scales: Sequence[float] | None = None,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    antialias: bool = False,
    name: str | None = None,
) -> Tensor:
    """Resample to the full output shape ``sizes`` with ONNX Resize semantics.

    ``scales`` (per axis) maps coordinates; it defaults to sizes / input shape.
    """
    shape = as_tensor(x).shape
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) != len(shape):
        raise ModelError(f"sizes {list(sizes)} must give every axis of the {len(shape)}-d input")
    if scales is None:
        scales = tuple(o / i if i else 1.0 for o, i in zip(sizes, shape, strict=True))
    attrs = {
        "sizes": sizes,
        "scales": tuple(scales),
        "mode": mode,
        "coordinate_transformation_mode": coordinate_transformation_mode,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": cubic_coeff_a,
        "antialias": antialias,
    }
    return record("resize", [x], attrs, name=name)


_INTERPOLATE_MODES = {
    # torch mode -> (IR mode, nearest rounding, coordinates without align_corners)
    "nearest": ("nearest", "floor", "asymmetric"),
    "nearest-exact": ("nearest", "round_prefer_ceil", "half_pixel"),
    "linear": ("linear", "floor", "pytorch_half_pixel"),
    "bilinear": ("linear", "floor", "pytorch_half_pixel"),
    "trilinear": ("linear", "floor", "pytorch_half_pixel"),
    "bicubic": ("cubic", "floor", "pytorch_half_pixel"),
}


def interpolate(
    x: TensorLike,
    size: int | Sequence[int] | None = None,
    scale_factor: float | Sequence[float] | None = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    *,
    name: str | None = None,
) -> Tensor:
    """Resample the spatial axes as torch.nn.functional.interpolate (N, C, spatial...)."""
    shape = as_tensor(x).shape
    sp = len(shape) - 2
    if mode not in _INTERPOLATE_MODES:
        raise ModelError(
            f"unknown interpolate mode '{mode}'; use one of {list(_INTERPOLATE_MODES)}"
        )
    if (size is None) == (scale_factor is None):
        raise ModelError("interpolate takes exactly one of size and scale_factor")
    if size is not None:
        out = per_axis(size, sp, "size")
        factors = tuple(o / i for o, i in zip(out, shape[2:], strict=True))
    else:
        if isinstance(scale_factor, int | float):
            factors = (float(scale_factor),) * sp
        else:
            factors = tuple(float(s) for s in scale_factor)
        if len(factors) != sp:
            raise ModelError(f"scale_factor needs {sp} values, got {list(factors)}")
        out = tuple(int(np.floor(i * f)) for i, f in zip(shape[2:], factors, strict=True))
    ir_mode, rounding, coords = _INTERPOLATE_MODES[mode]
    if align_corners:
        if ir_mode == "nearest":
            raise ModelError("align_corners only applies to the linear and cubic modes")
        coords = "align_corners"
    return resize(
        x,
        shape[:2] + out,
        scales=(1.0, 1.0) + factors,
        mode=ir_mode,
        coordinate_transformation_mode=coords,
        nearest_mode=rounding,
        name=name,
    )


def upsample(
    x: TensorLike, scale_factor: float | Sequence[float], mode: str = "nearest", *, name=None
) -> Tensor:
    """interpolate(x, scale_factor=..., mode=...)."""
    return interpolate(x, scale_factor=scale_factor, mode=mode, name=name)


def depth_to_space(
    x: TensorLike, block_size: int, mode: str = "DCR", *, name: str | None = None
) -> Tensor:
    """Channel blocks to b x b spatial tiles (ONNX DepthToSpace)."""
    return record("depth_to_space", [x], {"block_size": block_size, "mode": mode}, name=name)


def pixel_shuffle(x: TensorLike, upscale_factor: int, *, name: str | None = None) -> Tensor:
    """torch.nn.functional.pixel_shuffle (depth_to_space in CRD order)."""
    return depth_to_space(x, upscale_factor, "CRD", name=name)


def pixel_unshuffle(x: TensorLike, downscale_factor: int, *, name: str | None = None) -> Tensor:
    """torch.nn.functional.pixel_unshuffle (space_to_depth in CRD order)."""
    attrs = {"block_size": downscale_factor, "mode": "CRD"}
    return record("space_to_depth", [x], attrs, name=name)
