"""Lowering of IR resize to MIL: per axis, the IR's own source indices and tap weights as consts.

Integer nearest-neighbour upsampling of the two spatial axes becomes
``upsample_nearest_neighbor`` (the engine's texture form); every other case is exact through
``gather`` with constant indices (nearest) or a weighted sum of gathers (linear, cubic,
antialiased), so any coordinate mode lowers to what the reference kernel computes.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import numpy as np

from anekit.codegen.lower.context import Lowering
from anekit.ir.ops.resize import interpolation_taps, nearest_index, source_coordinates

LowerFn = Callable[[Lowering], str]


def _axis_plan(lo: Lowering, axis: int, in_size: int, out_size: int):  # noqa: ANN202
    """('skip'|'repeat'|'gather'|'taps', data) for one axis."""
    attrs = lo.attrs
    rank = len(lo.out_shape())
    roi = attrs["roi"]
    bounds = (roi[axis], roi[axis + rank]) if roi else (0.0, 1.0)
    scale = attrs["scales"][axis]
    coord, outside = source_coordinates(
        attrs["coordinate_transformation_mode"], out_size, in_size, scale, bounds
    )
    if outside is not None and outside.any():
        raise lo.error("tf_crop_and_resize with an extrapolated region has no MIL form here")
    if attrs["mode"] == "nearest":
        idx = np.clip(nearest_index(coord, attrs["nearest_mode"], scale < 1), 0, in_size - 1)
        if out_size == in_size and np.array_equal(idx, np.arange(in_size)):
            return "skip", None
        if out_size % in_size == 0 and np.array_equal(
            idx, np.arange(out_size) // (out_size // in_size)
        ):
            return "repeat", out_size // in_size
        return "gather", idx
    taps, weights = interpolation_taps(
        coord, scale, attrs["mode"], attrs["cubic_coeff_a"], attrs["antialias"]
    )
    if attrs["exclude_outside"]:
        weights = np.where((taps < 0) | (taps >= in_size), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    taps = np.clip(taps, 0, in_size - 1)
    return "taps", (taps, weights.astype(np.float32))


def _resize(lo: Lowering) -> str:
    x = lo.need(0)
    out = lo.out_shape()
    rank = x.rank
    if x.dtype not in ("fp16", "fp32"):
        raise lo.error("resize of an integer tensor has no MIL form here")
    plans = [_axis_plan(lo, a, x.shape[a], out[a]) for a in range(rank)]
    var, shape = lo.x(0), list(x.shape)
    steps: list[tuple[str, object]] = []
    spatial_repeat = rank == 4 and all(plans[a][0] in ("repeat", "skip") for a in (2, 3))
    for axis, (kind, data) in enumerate(plans):
        if kind == "skip" or (spatial_repeat and axis >= 2):
            continue
        steps.append(("axis", (axis, kind, data)))
    if spatial_repeat and any(plans[a][0] == "repeat" for a in (2, 3)):
        steps.append(("upsample", None))
    if not steps:
        return lo.alias(var)
    for n, (what, data) in enumerate(steps):
        last = n == len(steps) - 1
        if what == "upsample":
            factors = [plans[a][1] if plans[a][0] == "repeat" else 1 for a in (2, 3)]
            shape = [shape[0], shape[1], shape[2] * factors[0], shape[3] * factors[1]]
            inputs = {"x": var, "scale_factor_height": lo.p("scale_h", np.int32(factors[0])),
                      "scale_factor_width": lo.p("scale_w", np.int32(factors[1]))}  # fmt: skip
            var = (
                lo.out("upsample_nearest_neighbor", inputs)
                if last
                else lo.tmp("upsample_nearest_neighbor", inputs, shape)
            )
            continue
        axis, kind, plan = data  # type: ignore[misc]
        var, shape = _resize_axis(lo, var, shape, axis, kind, plan, out[axis], last)
    return var


def _resize_axis(lo: Lowering, var: str, shape: list[int], axis: int, kind: str, plan,  # noqa: ANN001
                 out_size: int, last: bool) -> tuple[str, list[int]]:  # fmt: skip
    new = list(shape)
    new[axis] = out_size
    ax = lo.p("axis", np.int32(axis))
    zero_batch = lo.p("batch_dims", np.int32(0))
    if kind == "repeat":
        plan, kind = np.arange(out_size) // plan, "gather"
    if kind == "gather":
        inputs = {"x": var, "indices": lo.t(plan, "indices"), "axis": ax, "batch_dims": zero_batch}
        return (lo.out("gather", inputs) if last else lo.tmp("gather", inputs, new)), new
    taps, weights = plan
    wshape = [1] * len(shape)
    wshape[axis] = out_size
    terms: list[str] = []
    for j in range(taps.shape[1]):
        if not weights[:, j].any():
            continue
        g = lo.tmp("gather", {"x": var, "indices": lo.t(taps[:, j], "taps"), "axis": ax,
                              "batch_dims": zero_batch}, new)  # fmt: skip
        terms.append(
            lo.tmp("mul", {"x": g, "y": lo.t(weights[:, j].reshape(wshape), "weights")}, new)
        )
    acc = terms[0]
    for term in terms[1:]:
        acc = lo.tmp("add", {"x": acc, "y": term}, new, hint="interpolated")
    return (lo.alias(acc) if last else acc), new


LOWERINGS: MappingProxyType[str, LowerFn] = MappingProxyType({"resize": _resize})
