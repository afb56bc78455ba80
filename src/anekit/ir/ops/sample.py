"""Sampling images at computed positions: grid_sample (as ONNX and torch), roi_align, and the
deformable convolution."""

from __future__ import annotations

import itertools

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types, float_only
from anekit.ir.ops.conv import CONV_ATTRS, conv_geometry, conv_output_size
from anekit.ir.registry import Attr, InferError, TensorType, declare

_CUBIC_A = -0.75


def _grid_sample_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, grid = ins
    float_only(ins, (0, 1))
    sp = x.rank - 2
    if sp < 1 or grid.rank != x.rank or grid.shape[0] != x.shape[0] or grid.shape[-1] != sp:
        raise InferError(
            f"grid must be [N, out..., {max(sp, 0)}] for input {list(x.shape)}, got {list(grid.shape)}"
        )
    if attrs["mode"] == "cubic" and sp != 2:
        raise InferError("cubic grid sampling is defined for 2-d images only")
    return [TensorType((*x.shape[:2], *grid.shape[1:-1]), x.dtype)]


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold coordinates into [lo, hi] by mirroring at the borders."""
    span = hi - lo
    if span <= 0:
        return np.zeros_like(x)
    d = np.where(x < lo, lo - x, x - hi)
    n = np.floor(d / span)
    r = d - n * span
    even = (n % 2) == 0
    below = np.where(even, lo + r, hi - r)
    above = np.where(even, hi - r, lo + r)
    return np.where(x < lo, below, np.where(x > hi, above, x))


def _taps(x: np.ndarray, mode: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Integer tap positions and their weights for one axis."""
    if mode == "nearest":  # x is already rounded
        return [x.astype(np.int64)], [np.ones_like(x)]
    base = np.floor(x)
    t = x - base
    base = base.astype(np.int64)
    if mode == "linear":
        return [base, base + 1], [1 - t, t]
    a = _CUBIC_A
    d = [t + 1, t, 1 - t, 2 - t]  # distances to taps base-1 .. base+2
    w = [
        ((a * d[0] - 5 * a) * d[0] + 8 * a) * d[0] - 4 * a,
        ((a + 2) * d[1] - (a + 3)) * d[1] * d[1] + 1,
        ((a + 2) * d[2] - (a + 3)) * d[2] * d[2] + 1,
        ((a * d[3] - 5 * a) * d[3] + 8 * a) * d[3] - 4 * a,
    ]
    return [base - 1, base, base + 1, base + 2], w


@declare(
    "grid_sample",
    inputs=("x", "grid"),
    attrs=(
        Attr("mode", "str", "linear", choices=("linear", "nearest", "cubic")),
        Attr("padding_mode", "str", "zeros", choices=("zeros", "border", "reflection")),
        Attr("align_corners", "bool", False),
    ),
    infer=_grid_sample_infer,
)
def grid_sample(x, grid, mode, padding_mode, align_corners):
    """x sampled at grid's [-1, 1] coordinates (last grid axis: x, y, ... = the reversed axes)"""
    n, c = x.shape[:2]
    dims = x.shape[2:]
    sp = len(dims)
    out = grid.shape[1:-1]
    batch = np.arange(n).reshape((n,) + (1,) * len(out))
    per_axis = []
    for i, d in enumerate(dims):
        g = grid[..., sp - 1 - i].astype(np.float64)
        pos = (g + 1) / 2 * (d - 1) if align_corners else ((g + 1) * d - 1) / 2
        lo, hi = (0.0, d - 1.0) if align_corners else (-0.5, d - 0.5)
        if mode == "nearest":  # round half to even first, as torch
            pos = np.rint(pos)
        if padding_mode == "border" and mode != "cubic":  # cubic clamps its taps instead
            pos = np.where((pos < lo) | (pos > hi), np.clip(pos, 0, d - 1), pos)
        elif padding_mode == "reflection":
            pos = _reflect(pos, lo, hi)
        per_axis.append(_taps(pos, mode))
    y = np.zeros((n, *out, c), dtype=np.float32)
    for choice in itertools.product(*(range(len(t[0])) for t in per_axis)):
        weight = np.ones((n, *out), dtype=np.float64)
        index, inside = [], np.ones((n, *out), dtype=bool)
        for i, k in enumerate(choice):
            taps, weights = per_axis[i]
            idx = taps[k]
            weight = weight * weights[k]
            d = dims[i]
            if padding_mode == "zeros":
                inside &= (idx >= 0) & (idx < d)
            elif padding_mode == "reflection":  # taps that leave the image mirror back
                lo, hi = (0.0, d - 1.0) if align_corners else (-0.5, d - 0.5)
                idx = _reflect(idx.astype(np.float64), lo, hi).astype(np.int64)
            index.append(np.clip(idx, 0, d - 1))
        picked = x[(batch, slice(None), *index)]  # split advanced indices go first: [n, out..., c]
        y += np.where(inside[..., None], picked * weight[..., None].astype(np.float32), 0)
    return np.moveaxis(y, -1, 1)


# --- roi_align --------------------------------------------------------------------------------


def _roi_align_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, rois, idx = ins
    float_only(ins, (0, 1))
    if x.rank != 4 or rois.rank != 2 or rois.shape[1] != 4:
        raise InferError(f"roi_align takes x [N, C, H, W] and rois [R, 4], got {x} and {rois}")
    if idx.dtype not in (DType.INT32, DType.INT64) or idx.shape != (rois.shape[0],):
        raise InferError(f"batch_indices must be int32/int64 [{rois.shape[0]}], got {idx}")
    if attrs["output_height"] <= 0 or attrs["output_width"] <= 0:
        raise InferError("output_height and output_width must be positive")
    shape = (rois.shape[0], x.shape[1], attrs["output_height"], attrs["output_width"])
    return [TensorType(shape, x.dtype)]


def _bilinear_axis(pos: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low index, high index, weight of high) along one axis, clamped as onnxruntime."""
    pos = np.maximum(pos, 0.0)
    low = np.floor(pos).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    frac = np.where(at_end, 0.0, pos - low)
    return low, high, frac


@declare(
    "roi_align",
    inputs=("x", "rois", "batch_indices"),
    attrs=(
        Attr("output_height", "int", 1),
        Attr("output_width", "int", 1),
        Attr("sampling_ratio", "int", 0, doc="samples per bin side; 0 = ceil(roi / output)"),
        Attr("spatial_scale", "float", 1.0),
        Attr("mode", "str", "avg", choices=("avg", "max")),
        Attr("half_pixel", "bool", True, doc="shift ROI corners by -0.5 (else force ROIs >= 1)"),
    ),
    infer=_roi_align_infer,
    no_lowering="not lowered yet: MIL crop_resize does not average sampling points as RoiAlign does",
)
def roi_align(x, rois, batch_indices, output_height, output_width, sampling_ratio,
              spatial_scale, mode, half_pixel):  # fmt: skip
    """bilinear samples on a regular grid in each ROI bin, averaged (or maxed, onnxruntime's way:
    the largest weighted corner) per bin"""
    _, _, h, w = x.shape
    ph, pw = output_height, output_width
    box = rois.astype(np.float64) * spatial_scale - (0.5 if half_pixel else 0.0)
    start_w, start_h = box[:, 0], box[:, 1]
    roi_w, roi_h = box[:, 2] - start_w, box[:, 3] - start_h
    if not half_pixel:
        roi_w, roi_h = np.maximum(roi_w, 1.0), np.maximum(roi_h, 1.0)
    bin_h, bin_w = roi_h / ph, roi_w / pw
    if sampling_ratio > 0:
        grid_h = np.full(len(box), sampling_ratio)
        grid_w = grid_h
    else:
        grid_h = np.ceil(roi_h / ph).astype(np.int64)
        grid_w = np.ceil(roi_w / pw).astype(np.int64)
    count = np.maximum(grid_h * grid_w, 1).astype(np.float32)[:, None, None, None]
    b = batch_indices.astype(np.int64)[:, None, None]
    acc = np.zeros((len(box), ph, pw, x.shape[1]), dtype=np.float32)
    if mode == "max":
        acc[:] = -np.inf
    rows, cols = np.arange(ph), np.arange(pw)
    for iy in range(int(grid_h.max(initial=0))):  # one pass per sample position in a bin
        y = (
            start_h[:, None]
            + rows * bin_h[:, None]
            + (iy + 0.5) * (bin_h / np.maximum(grid_h, 1))[:, None]
        )
        y_lo, y_hi, ly = _bilinear_axis(y, h)
        for ix in range(int(grid_w.max(initial=0))):
            x_pos = (
                start_w[:, None]
                + cols * bin_w[:, None]
                + (ix + 0.5) * (bin_w / np.maximum(grid_w, 1))[:, None]
            )
            x_lo, x_hi, lx = _bilinear_axis(x_pos, w)
            inside = ((y >= -1) & (y <= h))[:, :, None] & ((x_pos >= -1) & (x_pos <= w))[:, None, :]
            live = ((iy < grid_h) & (ix < grid_w))[:, None, None, None]
            corners = []
            for ys, wy in ((y_lo, 1 - ly), (y_hi, ly)):
                for xs, wx in ((x_lo, 1 - lx), (x_hi, lx)):
                    weight = np.where(inside, wy[:, :, None] * wx[:, None, :], 0.0)
                    value = x[b, :, ys[:, :, None], xs[:, None, :]]  # [R, ph, pw, C]
                    corners.append(weight[..., None].astype(np.float32) * value)
            if mode == "avg":
                acc += np.where(live, corners[0] + corners[1] + corners[2] + corners[3], 0.0)
            else:
                best = np.maximum(
                    np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3])
                )
                acc = np.where(live, np.maximum(acc, best), acc)
    out = acc / count if mode == "avg" else np.where(np.isneginf(acc), 0.0, acc)
    return np.moveaxis(out, -1, 1)


# --- deformable convolution -------------------------------------------------------------------


def _deform_conv_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, w, offset = ins[:3]
    bias, mask = (list(ins[3:]) + [None, None])[:2]
    float_only(ins, range(len(ins)))
    if x.rank != 4 or w.rank != 4:
        raise InferError("deform_conv supports 2-d images: x [N, C, H, W], weight [M, C/g, kh, kw]")
    g, og = attrs["group"], attrs["offset_group"]
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    if g <= 0 or og <= 0 or c % g or m % g or c % og or w.shape[1] * g != c:
        raise InferError(f"channels {c} -> {m} do not fit group {g} and offset_group {og}")
    strides, pads, dil = conv_geometry(2, attrs)
    out = [
        conv_output_size(d, k, strides[i], pads[i], pads[2 + i], dil[i])
        for i, (d, k) in enumerate(((h, kh), (wd, kw)))
    ]
    if offset.shape != (n, og * kh * kw * 2, *out):
        raise InferError(f"offset must be {[n, og * kh * kw * 2, *out]}, got {list(offset.shape)}")
    if mask is not None and mask.shape != (n, og * kh * kw, *out):
        raise InferError(f"mask must be {[n, og * kh * kw, *out]}, got {list(mask.shape)}")
    if bias is not None and bias.shape != (m,):
        raise InferError(f"bias must be [{m}], got {list(bias.shape)}")
    return [TensorType((n, m, *out), x.dtype)]


@declare(
    "deform_conv",
    inputs=("x", "weight", "offset", "bias?", "mask?"),
    attrs=(*CONV_ATTRS, Attr("offset_group", "int", 1)),
    infer=_deform_conv_infer,
    no_lowering="MIL has no deformable convolution",
)
def deform_conv(x, weight, offset, bias, mask, strides, pads, dilations, group, offset_group):
    """2-d convolution whose taps move by learned offsets (bilinear, zero outside), times mask"""
    n, c, h, wd = x.shape
    m, cg, kh, kw = weight.shape
    og = offset_group
    strides, pads, dil = conv_geometry(
        2, {"strides": strides, "pads": pads, "dilations": dilations}
    )
    oh, ow = offset.shape[2:]
    off = offset.reshape(n, og, kh, kw, 2, oh, ow)
    mk = None if mask is None else mask.reshape(n, og, kh, kw, oh, ow)
    xs = x.reshape(n, og, c // og, h, wd)
    base_y = (np.arange(oh) * strides[0] - pads[0])[:, None]
    base_x = (np.arange(ow) * strides[1] - pads[1])[None, :]
    bi, gi = np.arange(n)[:, None, None, None], np.arange(og)[None, :, None, None]
    wg = weight.reshape(group, m // group, cg, kh, kw)
    y = np.zeros((n, group, m // group, oh * ow), dtype=np.float32)
    for i in range(kh):  # one sampled column block per kernel tap
        for j in range(kw):
            py = base_y + i * dil[0] + off[:, :, i, j, 0]  # [n, og, oh, ow]
            px = base_x + j * dil[1] + off[:, :, i, j, 1]
            y0, x0 = np.floor(py), np.floor(px)
            sample = np.zeros((n, og, oh, ow, c // og), dtype=np.float32)
            for yy, wy in ((y0, 1 - (py - y0)), (y0 + 1, py - y0)):
                for xx, wx in ((x0, 1 - (px - x0)), (x0 + 1, px - x0)):
                    ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < wd)
                    yi = np.clip(yy, 0, h - 1).astype(np.int64)
                    xi = np.clip(xx, 0, wd - 1).astype(np.int64)
                    val = xs[bi, gi, :, yi, xi]  # [n, og, oh, ow, c/og]
                    sample += np.where(ok, wy * wx, 0.0)[..., None].astype(np.float32) * val
            if mk is not None:
                sample *= mk[:, :, i, j][..., None]
            cols = np.moveaxis(sample, -1, 2).reshape(n, group, cg, oh * ow)
            y += np.matmul(wg[None, :, :, :, i, j], cols)
    y = y.reshape(n, m, oh, ow)
    if bias is not None:
        y = y + bias.reshape(1, m, 1, 1)
    return y
