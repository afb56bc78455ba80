"""Converters for Resize, Upsample, the pixel shuffles (DepthToSpace, SpaceToDepth),
GridSample, AffineGrid and RoiAlign."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.frontend.onnx.context import NodeContext
from anekit.frontend.onnx.converters._table import converter


def _floats_input(cx: NodeContext, i: int, what: str) -> tuple[float, ...] | None:
    """A constant float input, or None when absent or empty (Resize passes '' or [])."""
    if cx.input(i) is None:
        return None
    value = cx.require_const(i, what)
    return tuple(float(v) for v in value.reshape(-1)) if value.size else None


def _resize_geometry(
    cx: NodeContext, axes: tuple[int, ...], scales: tuple[float, ...] | None, sizes
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Full-rank (sizes, scales) from the node's scales or sizes on ``axes``."""
    in_shape = cx.shape(0)
    rank = len(in_shape)
    out = list(in_shape)
    factors = [1.0] * rank
    if scales is not None:
        if len(scales) != len(axes):
            raise ModelError(f"scales has {len(scales)} values for {len(axes)} axes")
        for a, s in zip(axes, scales, strict=True):
            if not s > 0:
                raise ModelError(f"scales must be positive, got {list(scales)}")
            factors[a] = s
            # floor(scale * size), in fp32 as onnxruntime (and torch's sizes) round it
            out[a] = int(np.float32(s) * np.float32(in_shape[a]))
        return tuple(out), tuple(factors)
    if sizes is None:
        raise ModelError("Resize needs scales or sizes")
    if len(sizes) != len(axes):
        raise ModelError(f"sizes has {len(sizes)} values for {len(axes)} axes")
    for a, s in zip(axes, sizes, strict=True):
        if in_shape[a] == 0 or s <= 0:
            raise ModelError(f"cannot resize axis {a} of size {in_shape[a]} to {s}")
        factors[a] = s / in_shape[a]
        out[a] = int(s)
    policy = cx.attr("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        if policy not in ("not_larger", "not_smaller"):
            raise ModelError(f"unknown keep_aspect_ratio_policy '{policy}'")
        chosen = [factors[a] for a in axes]
        scale = min(chosen) if policy == "not_larger" else max(chosen)
        for a in axes:
            factors[a] = scale
            out[a] = int(scale * in_shape[a] + 0.5)  # round half up, as the spec
    return tuple(out), tuple(factors)


@converter("Resize")
def resize(cx: NodeContext):
    rank = len(cx.shape(0))
    if cx.opset < 11:  # Resize-10: (X, scales), asymmetric coordinates, onnxruntime's rounding
        scales = _floats_input(cx, 1, "scales")
        sizes, factors = _resize_geometry(cx, tuple(range(rank)), scales, None)
        attrs = {
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "simple",
        }
        mode = cx.attr("mode", "nearest")
    else:
        axes = tuple(a % rank for a in cx.attr("axes", range(rank)))
        if len(set(axes)) != len(axes):
            raise ModelError(f"axes {list(axes)} repeat an axis")
        scales = _floats_input(cx, 2, "scales")
        sizes_in = cx.ints_input(3, "sizes") if cx.input(3) is not None else None
        if scales is not None and sizes_in:
            raise ModelError("Resize takes scales or sizes, not both")
        sizes, factors = _resize_geometry(cx, axes, scales, sizes_in or None)
        ctm = cx.attr("coordinate_transformation_mode", "half_pixel")
        attrs = {
            "coordinate_transformation_mode": ctm,
            "nearest_mode": cx.attr("nearest_mode", "round_prefer_floor"),
            "cubic_coeff_a": cx.attr("cubic_coeff_a", -0.75),
            "exclude_outside": cx.attr("exclude_outside", 0),
            "extrapolation_value": cx.attr("extrapolation_value", 0.0),
            "antialias": cx.attr("antialias", 0),
        }
        if ctm == "tf_crop_and_resize":
            roi = _floats_input(cx, 1, "roi")
            if roi is None or len(roi) != 2 * len(axes):
                raise ModelError(f"tf_crop_and_resize needs a roi of {2 * len(axes)} values")
            full = [0.0] * rank + [1.0] * rank
            for k, a in enumerate(axes):
                full[a], full[rank + a] = roi[k], roi[len(axes) + k]
            attrs["roi"] = tuple(full)
        mode = cx.attr("mode", "nearest")
    attrs.update({"sizes": sizes, "scales": factors, "mode": _mode(mode)})
    return cx.emit("resize", [cx.input(0)], attrs, final=True)


def _mode(mode: str) -> str:
    mode = mode.lower()
    if mode == "bilinear":  # Upsample-7 spelling
        return "linear"
    if mode not in ("nearest", "linear", "cubic"):
        raise ModelError(f"unknown resize mode '{mode}'")
    return mode


@converter("Upsample")
def upsample(cx: NodeContext):
    """Upsample (opsets 7 and 9): Resize with asymmetric coordinates and floor rounding."""
    rank = len(cx.shape(0))
    if cx.opset < 9:
        scales = tuple(float(s) for s in cx.attr("scales"))
    else:
        scales = _floats_input(cx, 1, "scales")
    if scales is None or any(s < 1 for s in scales):
        raise ModelError(f"Upsample scales must be >= 1, got {scales}")
    sizes, factors = _resize_geometry(cx, tuple(range(rank)), scales, None)
    attrs = {
        "sizes": sizes,
        "scales": factors,
        "mode": _mode(cx.attr("mode", "nearest")),
        "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": "simple",
    }
    return cx.emit("resize", [cx.input(0)], attrs, final=True)


@converter("DepthToSpace", "SpaceToDepth")
def pixel_shuffle(cx: NodeContext):
    op = "depth_to_space" if cx.op_type == "DepthToSpace" else "space_to_depth"
    attrs = {"block_size": cx.attr("blocksize"), "mode": cx.attr("mode", "DCR")}
    return cx.emit(op, [cx.input(0)], attrs, final=True)


@converter("GridSample")
def grid_sample(cx: NodeContext):
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(cx.attr("mode", "linear"), None)
    mode = mode or cx.attr("mode", "linear")
    if cx.opset < 20 and not cx.has_attr("mode"):
        mode = "linear"  # GridSample-16 defaults to bilinear
    attrs = {
        "mode": mode,
        "padding_mode": cx.attr("padding_mode", "zeros"),
        "align_corners": cx.attr("align_corners", 0),
    }
    return cx.emit("grid_sample", [cx.input(0), cx.input(1)], attrs, final=True)


@converter("AffineGrid")
def affine_grid(cx: NodeContext):
    """theta [N, nd, nd+1] applied to the constant grid of normalised output positions."""
    size = cx.ints_input(1, "size")
    n, spatial = size[0], size[2:]
    nd = len(spatial)
    if cx.shape(0) != (n, nd, nd + 1):
        raise ModelError(f"theta must be [{n}, {nd}, {nd + 1}] for size {list(size)}")
    align = bool(cx.attr("align_corners", 0))
    axes = []
    for d in spatial:
        step = np.arange(d, dtype=np.float64)
        axes.append((2 * step / (d - 1) - 1) if align and d > 1 else (2 * step + 1) / d - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    # homogeneous coordinates in grid order (x = last axis first), then a 1
    base = np.stack([m.reshape(-1) for m in mesh[::-1]] + [np.ones(mesh[0].size)], axis=-1)
    dtype = cx.type(0).dtype.numpy
    base_c = cx.constant(base.astype(dtype), "base_grid")
    theta_t = cx.emit("transpose", [cx.input(0)], {"perm": (0, 2, 1)})
    grid = cx.emit("matmul", [base_c, theta_t])  # [N, positions, nd]
    return cx.emit("reshape", [grid], {"shape": (n, *spatial, nd)}, final=True)


@converter("RoiAlign")
def roi_align(cx: NodeContext):
    # opset 10 had no coordinate mode and behaved as output_half_pixel
    ctm = cx.attr(
        "coordinate_transformation_mode", "half_pixel" if cx.opset >= 16 else "output_half_pixel"
    )
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise ModelError(f"unknown coordinate_transformation_mode '{ctm}'")
    attrs = {
        "output_height": cx.attr("output_height", 1),
        "output_width": cx.attr("output_width", 1),
        "sampling_ratio": cx.attr("sampling_ratio", 0),
        "spatial_scale": cx.attr("spatial_scale", 1.0),
        "mode": cx.attr("mode", "avg"),
        "half_pixel": ctm == "half_pixel",
    }
    return cx.emit("roi_align", [cx.input(0), cx.input(1), cx.input(2)], attrs, final=True)
