"""Lowering of IR grid_sample (ONNX GridSample, torch grid_sample) to MIL ``resample`` (iOS 15).

The grid's [-1, 1] coordinates are ``normalized_minus_one_to_one`` and ``align_corners`` passes
through. ``linear`` is ``bilinear`` and ``nearest`` is ``nearest`` (both round ties to even);
``zeros`` padding is ``constant`` with value 0, ``border`` is ``border``, and ``reflection``
mirrors about the corner pixels' centres with ``align_corners`` (Apple's ``reflection``) or
about their outer edges without (Apple's ``symmetric``), as coremltools converts torch's
grid_sampler. At an exact rounding tie outside the image ``nearest`` with reflection differs
(ONNX rounds a position, then mirrors it; Apple mirrors, then rounds: coremltools' reference
output of ``resample`` shows it), so that combination turns the grid into pixel positions
rounded to even first (``mul``, ``add``, ``round``) and samples them ``unnormalized``: integer
positions mirror to the same pixel either way (with ``align_corners`` true, the convention of
coremltools' TensorFlow resampler: pixel indices are the corner pixels' centres). ``resample``
samples 2-d images only and has no bicubic mode: other dimensionalities and ``cubic`` are
refused with an error naming the node.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import numpy as np

from anekit.codegen.lower.context import Lowering

LowerFn = Callable[[Lowering], str]

_SAMPLING = {"linear": "bilinear", "nearest": "nearest"}


def _grid_sample(lo: Lowering) -> str:
    x, grid = lo.need(0), lo.need(1)
    attrs = lo.attrs
    mode, padding, align = attrs["mode"], attrs["padding_mode"], bool(attrs["align_corners"])
    if mode not in _SAMPLING:
        raise lo.error(
            f"grid sampling mode '{mode}' has no MIL form: resample samples bilinear or nearest",
            hint="use mode 'linear' (bilinear) or 'nearest', or run the model on the reference "
            "backend",
        )
    if x.rank != 4:
        raise lo.error(
            f"grid sampling of a {x.rank - 2}-d image has no MIL form: resample samples 2-d "
            f"images [N, C, H, W] (input {list(x.shape)})"
        )
    if x.dtype not in ("fp16", "fp32"):
        raise lo.error(f"grid sampling of a {x.dtype} tensor has no MIL form here")
    if padding == "zeros":
        pad = "constant"
    elif padding == "border":
        pad = "border"
    elif padding == "reflection":
        pad = "reflection" if align else "symmetric"
    else:
        raise lo.error(f"grid sampling padding mode '{padding}' has no MIL form")
    fdtype = lo.fdtype
    coordinates, cmode = lo.var(grid, fdtype), "normalized_minus_one_to_one"
    if mode == "nearest" and padding == "reflection":
        w, h = x.shape[3], x.shape[2]
        # the IR's positions: (g + 1) / 2 * (d - 1) or ((g + 1) * d - 1) / 2, per (x, y)
        scale = np.array([w - 1, h - 1] if align else [w, h], np.float32) / 2
        offset = np.array([w - 1, h - 1], np.float32) / 2
        shape = grid.shape
        coordinates = lo.tmp("mul", {"x": coordinates, "y": lo.t(scale, "pixel_scale")}, shape)
        coordinates = lo.tmp("add", {"x": coordinates, "y": lo.t(offset, "pixel_offset")}, shape)
        coordinates = lo.tmp("round", {"x": coordinates}, shape, hint="pixels")
        cmode, align = "unnormalized", True
    inputs = {
        "x": lo.var(x, fdtype),
        "coordinates": coordinates,
        "sampling_mode": lo.p("sampling_mode", _SAMPLING[mode], "string"),
        "padding_mode": lo.p("padding_mode", pad, "string"),
        "padding_value": lo.f("padding_value", 0.0),
        "coordinates_mode": lo.p("coordinates_mode", cmode, "string"),
        "align_corners": lo.p("align_corners", align),
    }
    return lo.out("resample", inputs)


LOWERINGS: MappingProxyType[str, LowerFn] = MappingProxyType({"grid_sample": _grid_sample})
