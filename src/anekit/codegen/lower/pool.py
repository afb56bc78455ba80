"""Lowerings of pooling IR ops (max, average, Lp) to MIL pools with explicit padding.

MIL's pools take ``pad_type = "custom"`` with interleaved pads. ``ceil_mode`` is expressed as
extra end padding with floor rounding, so the output size never depends on how a reader
rounds: a max pool pads with -inf and an average pool excludes padding, which leaves every
window's value unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import numpy as np

from anekit.codegen.lower.context import Lowering
from anekit.codegen.lower.nn import interleave_pads
from anekit.ir.ops.pool import pool_geometry

LowerFn = Callable[[Lowering], str]


def _floor_pads(lo: Lowering) -> tuple[tuple[int, ...], tuple[int, ...], list[int]]:
    """(kernel, strides, pads) giving the IR output size with floor rounding."""
    x = lo.need(0)
    sp = x.rank - 2
    kernel, strides, pads, dilations = pool_geometry(sp, lo.attrs)
    if any(d != 1 for d in dilations):
        raise lo.error("dilated pooling has no MIL form", hint="use dilations of 1")
    out = lo.out_shape()[2:]
    pads = list(pads)
    for i in range(sp):
        needed = (out[i] - 1) * strides[i] + kernel[i] - x.shape[2 + i] - pads[i]
        pads[sp + i] = max(pads[sp + i], needed)
    return kernel, strides, pads


def _pool_inputs(lo: Lowering, x: str, kernel, strides, pads) -> dict[str, str]:  # noqa: ANN001
    return {
        "x": x,
        "kernel_sizes": lo.p("kernel_sizes", list(kernel)),
        "strides": lo.p("strides", list(strides)),
        "pad_type": lo.p("pad_type", "custom", "string"),
        "pad": lo.p("pad", interleave_pads(tuple(pads))),
        "ceil_mode": lo.p("ceil_mode", False),
    }


def _max_pool(lo: Lowering) -> str:
    if lo.attrs["return_indices"]:
        raise lo.error("max pooling indices have no MIL form")
    kernel, strides, pads = _floor_pads(lo)
    if lo.need(0).dtype in ("fp16", "fp32"):
        return lo.out("max_pool", _pool_inputs(lo, lo.x(0), kernel, strides, pads))
    # MIL pools take floats: quantized (int8/uint8) values are exact in either float type
    pooled = lo.tmp("max_pool", _pool_inputs(lo, lo.x(0, lo.fdtype), kernel, strides, pads),
                    lo.out_shape())  # fmt: skip
    return lo.out("cast", {"x": pooled, "dtype": lo.p("dtype", lo.out_dtype(), "string")})


def _avg_pool(lo: Lowering) -> str:
    x = lo.need(0)
    sp = x.rank - 2
    kernel, strides, pads = _floor_pads(lo)
    var = lo.x(0)
    exclude = not lo.attrs["count_include_pad"]
    original = pool_geometry(sp, lo.attrs)[2]
    if not exclude and any(original):
        # padding counts in the average, overhang (ceil mode) does not: pad with zeros first
        padded = tuple(
            d + original[i - 2] + original[sp + i - 2] if i >= 2 else d
            for i, d in enumerate(x.shape)
        )
        widths = [0, 0, 0, 0] + interleave_pads(original)
        var = lo.tmp("pad", {"x": var, "pad": lo.p("pad", widths),
                             "mode": lo.p("mode", "constant", "string"),
                             "constant_val": lo.f("zero", 0.0)}, padded)  # fmt: skip
        pads = [0] * sp + [p - original[sp + i] for i, p in enumerate(pads[sp:])]
        exclude = True
    inputs = _pool_inputs(lo, var, kernel, strides, pads)
    inputs["exclude_padding_from_average"] = lo.p("exclude_padding_from_average", exclude)
    return lo.out("avg_pool", inputs)


def _lp_pool(lo: Lowering) -> str:
    """(sum over the window of |x|^p)^(1/p); padding contributes zeros."""
    x = lo.need(0)
    p = lo.attrs["p"]
    kernel, strides, pads = _floor_pads(lo)
    shape = lo.out_shape()
    powered = lo.tmp(
        "pow", {"x": lo.tmp("abs", {"x": lo.x(0)}, x.shape), "y": lo.f("p", p)}, x.shape
    )
    inputs = _pool_inputs(lo, powered, kernel, strides, pads)
    inputs["exclude_padding_from_average"] = lo.p("exclude_padding_from_average", False)
    mean = lo.tmp("avg_pool", inputs, shape)
    total = lo.tmp("mul", {"x": mean, "y": lo.f("window", float(np.prod(kernel)))}, shape)
    return lo.out("pow", {"x": total, "y": lo.f("inv_p", 1.0 / p)})


LOWERINGS: MappingProxyType[str, LowerFn] = MappingProxyType(
    {"max_pool": _max_pool, "avg_pool": _avg_pool, "lp_pool": _lp_pool}
)
