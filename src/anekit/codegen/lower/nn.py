"""Lowerings of the compute IR ops (convolutions, matmul, attention, softmax, normalisations,
reductions) to MIL operations, in the forms the engine's compiler accepts."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import MappingProxyType

import numpy as np

from anekit.codegen.lower.context import Lowering
from anekit.ir.dtypes import FP16_MAX
from anekit.ir.ops.conv import conv_geometry
from anekit.ir.ops.reduce import reduced_axes

LowerFn = Callable[[Lowering], str]


def saturated(lo: Lowering, var: str, shape: tuple[int, ...]) -> str:
    """In fp16 programs, ``var`` clamped to +-65504 before a softmax or a normalisation
    (Orion section 7): an overflowed activation then saturates instead of turning the
    whole softmax or norm into NaN. fp32 programs are left alone."""
    if lo.fdtype != "fp16":
        return var
    return lo.tmp(
        "clip",
        {"x": var, "alpha": lo.f("fp16_min", -FP16_MAX), "beta": lo.f("fp16_max", FP16_MAX)},
        shape,
        hint="saturated",
    )


def interleave_pads(pads: tuple[int, ...]) -> list[int]:
    """IR pads (all begins, then all ends) as MIL's [begin0, end0, begin1, end1, ...]."""
    n = len(pads) // 2
    return [p for i in range(n) for p in (pads[i], pads[n + i])]


def channel_vector(lo: Lowering, i: int, rank: int, key: str) -> str:
    """Operand ``i`` (a [C] vector) broadcastable on axis 1 of a rank-``rank`` tensor."""
    a = lo.need(i)
    shape = (1, -1) + (1,) * (rank - 2)
    if a.const is not None:
        return lo.t(a.const.reshape(shape), key)
    target = (1, a.shape[0]) + (1,) * (rank - 2)
    return lo.tmp("reshape", {"x": lo.var(a), "shape": lo.p("shape", list(target))}, target)


# --- convolutions and matmul ---------------------------------------------------------------------


def _conv_params(lo: Lowering) -> dict[str, str]:
    """MIL conv's strides, explicit pads, dilations and groups for the call's attributes."""
    strides, pads, dilations = conv_geometry(lo.need(0).rank - 2, lo.attrs)
    return {
        "strides": lo.p("strides", list(strides)),
        "pad_type": lo.p("pad_type", "custom", "string"),
        "pad": lo.p("pad", interleave_pads(pads)),
        "dilations": lo.p("dilations", list(dilations)),
        "groups": lo.p("groups", np.int32(lo.attrs["group"])),
    }


def _conv(lo: Lowering) -> str:
    x = lo.need(0)
    inputs = {"x": lo.x(0), "weight": lo.weight(1), **_conv_params(lo)}
    if lo.arg(2) is None:
        return lo.out("conv", inputs)
    # the engine's compiler takes no conv bias= (Orion #13): a separate add, which it fuses
    y = lo.tmp("conv", inputs, lo.out_shape())
    return lo.out("add", {"x": y, "y": channel_vector(lo, 2, x.rank, "bias")})


def _conv_integer(lo: Lowering) -> str:
    """(x - x_zero_point) correlated with (weight - w_zero_point) as a float conv rounded to
    int32. Integer products and their sums are exact in fp32 while below 2**24, which the
    weights bound here: 255 times the largest sum of a filter's |centred weights|. So the op
    stays on the CPU (its int8 operands keep it off the engine) and in fp32."""
    x, w = lo.need(0), lo.need(1)
    if w.const is None:
        raise lo.error(
            "a computed integer weight has no MIL form", hint="make the weight a constant"
        )
    if lo.fdtype != "fp32":
        raise lo.error("integer convolution is exact only in an fp32 (CPU) program")
    weight = np.asarray(w.const, np.int64)
    zw = lo.const_of(3)
    if zw is not None:
        weight = weight - np.asarray(zw, np.int64).reshape((-1,) + (1,) * (weight.ndim - 1))
    reach = 255 * int(np.abs(weight).reshape(weight.shape[0], -1).sum(axis=1).max(initial=0))
    if reach >= 2**24:
        raise lo.error(f"its sums can reach {reach}, past fp32's exact integers (2**24)")
    centred = lo.cast(lo.x(0), x.shape, "fp32")
    if lo.arg(2) is not None:
        zx = lo.x(2, "fp32")
        centred = lo.tmp("sub", {"x": centred, "y": zx}, x.shape, "fp32", "centred")
    weight = lo.t(weight.astype(np.float32), "centred_weight")
    inputs = {"x": centred, "weight": weight, **_conv_params(lo)}
    acc = lo.tmp("conv", inputs, lo.out_shape(), "fp32", "accumulated")
    return lo.out("cast", {"x": acc, "dtype": lo.p("dtype", "int32", "string")})


def _conv_transpose(lo: Lowering) -> str:
    x = lo.need(0)
    sp = x.rank - 2
    strides = lo.attrs["strides"] or (1,) * sp
    pads = list(lo.attrs["pads"] or (0,) * (2 * sp))
    dilations = lo.attrs["dilations"] or (1,) * sp
    out_pad = lo.attrs["output_padding"] or (0,) * sp
    # output_padding extends the end: take it from the end crop; beyond it the rows are zero
    extra = [0] * sp
    for i in range(sp):
        take = min(out_pad[i], pads[sp + i])
        pads[sp + i] -= take
        extra[i] = out_pad[i] - take
    shape = list(lo.out_shape())
    core = [shape[0], shape[1]] + [shape[2 + i] - extra[i] for i in range(sp)]
    inputs = {
        "x": lo.x(0),
        "weight": lo.x(1),
        "strides": lo.p("strides", list(strides)),
        "pad_type": lo.p("pad_type", "custom", "string"),
        "pad": lo.p("pad", interleave_pads(tuple(pads))),
        "dilations": lo.p("dilations", list(dilations)),
        "groups": lo.p("groups", np.int32(lo.attrs["group"])),
    }
    has_bias = lo.arg(2) is not None
    if not any(extra) and not has_bias:
        return lo.out("conv_transpose", inputs)
    y = lo.tmp("conv_transpose", inputs, core)
    if any(extra):
        widths = [0, 0, 0, 0] + [p for e in extra for p in (0, e)]
        inputs = {"x": y, "pad": lo.p("pad", widths), "mode": lo.p("mode", "constant", "string"),
                  "constant_val": lo.f("zero", 0.0)}  # fmt: skip
        if not has_bias:
            return lo.out("pad", inputs)
        y = lo.tmp("pad", inputs, shape)
    return lo.out("add", {"x": y, "y": channel_vector(lo, 2, x.rank, "bias")})


def matmul(lo: Lowering, x: str, y: str, transpose_y: bool = False, out: bool = True,
           shape: tuple[int, ...] | None = None) -> str:  # fmt: skip
    """MIL matmul with its transpose flags as named bool consts (Orion #12)."""
    inputs = {
        "x": x,
        "y": y,
        "transpose_x": lo.p("transpose_x", False),
        "transpose_y": lo.p("transpose_y", transpose_y),
    }
    if out:
        return lo.out("matmul", inputs)
    assert shape is not None
    return lo.tmp("matmul", inputs, shape)


def _matmul(lo: Lowering) -> str:
    return matmul(lo, lo.x(0), lo.x(1))


def _attention(lo: Lowering) -> str:
    """softmax(q k^T * scale + mask) v with a float additive mask (ane-compiler, Orion #6). The
    decompose pass keeps the fused op only without a causal flag or a boolean mask."""
    q, k = lo.need(0), lo.need(1)
    batch = lo.out_shape()[:-2]
    lq, lk = q.shape[-2], k.shape[-2]
    scores_shape = (*batch, lq, lk)
    scale = lo.attrs["scale"]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = matmul(lo, lo.x(0), lo.x(1), transpose_y=True, out=False, shape=scores_shape)
    s = lo.tmp("mul", {"x": s, "y": lo.f("scale", scale)}, scores_shape, hint="scaled")
    if lo.attrs["causal"]:  # decompose writes it out as an explicit additive mask
        raise lo.error("causal attention reaches code generation only decomposed")
    mask = lo.arg(3)
    if mask is not None and mask.dtype == "bool":  # decompose makes it additive
        raise lo.error("attention with a boolean mask reaches code generation only decomposed")
    if mask is not None:
        s = lo.tmp("add", {"x": s, "y": lo.x(3)}, scores_shape, hint="masked")
    s = saturated(lo, s, scores_shape)
    p = lo.tmp("softmax", {"x": s, "axis": lo.p("axis", np.int32(-1))}, scores_shape, hint="probs")
    return matmul(lo, p, lo.x(2))


# --- softmax and normalisations -----------------------------------------------------------------


def _softmax(lo: Lowering) -> str:
    x = saturated(lo, lo.x(0), lo.need(0).shape)
    return lo.out("softmax", {"x": x, "axis": lo.p("axis", np.int32(lo.attrs["axis"]))})


def _log_softmax(lo: Lowering) -> str:
    x = lo.need(0)
    axis = lo.attrs["axis"] % x.rank
    reduced = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    var = saturated(lo, lo.x(0), x.shape)
    lse = lo.tmp(
        "reduce_log_sum_exp",
        {"x": var, "axes": lo.p("axes", [axis]), "keep_dims": lo.p("keep_dims", True)},
        reduced,
    )
    return lo.out("sub", {"x": var, "y": lse})


def _batch_norm(lo: Lowering) -> str:
    x = lo.need(0)
    params = [lo.const_of(i) for i in range(1, 5)]
    if all(p is not None for p in params):
        scale, bias, mean, var = (np.asarray(p, np.float32) for p in params)  # type: ignore[arg-type]
        gain = scale / np.sqrt(var + np.float32(lo.attrs["epsilon"]))
        shape = (1, -1) + (1,) * (x.rank - 2)
        y = lo.tmp("mul", {"x": lo.x(0), "y": lo.t(gain.reshape(shape), "gain")}, x.shape)
        return lo.out("add", {"x": y, "y": lo.t((bias - mean * gain).reshape(shape), "offset")})
    # live statistics: (x - mean) * rsqrt(var + eps) * scale + bias, per channel
    vec = [
        channel_vector(lo, i, x.rank, k)
        for i, k in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var"))
    ]
    cshape = (1, x.shape[1]) + (1,) * (x.rank - 2)
    inv = lo.tmp("rsqrt", {"x": vec[3], "epsilon": lo.f("epsilon", lo.attrs["epsilon"])}, cshape)
    gain = lo.tmp("mul", {"x": inv, "y": vec[0]}, cshape, hint="gain")
    centred = lo.tmp("sub", {"x": lo.x(0), "y": vec[2]}, x.shape, hint="centred")
    y = lo.tmp("mul", {"x": centred, "y": gain}, x.shape)
    return lo.out("add", {"x": y, "y": vec[1]})


def _instance_norm(lo: Lowering) -> str:
    x = lo.need(0)
    eps = lo.f("epsilon", lo.attrs["epsilon"])
    scale, bias = lo.const_of(1), lo.const_of(2)
    if x.rank in (3, 4) and scale is not None and bias is not None:
        return lo.out(
            "instance_norm", {"x": lo.x(0), "gamma": lo.x(1), "beta": lo.x(2), "epsilon": eps}
        )
    if x.rank not in (3, 4):
        raise lo.error(f"instance_norm of a rank-{x.rank} tensor has no MIL form")
    y = lo.tmp("instance_norm", {"x": lo.x(0), "epsilon": eps}, x.shape)
    y = lo.tmp("mul", {"x": y, "y": channel_vector(lo, 1, x.rank, "scale")}, x.shape)
    return lo.out("add", {"x": y, "y": channel_vector(lo, 2, x.rank, "bias")})


def _layer_norm(lo: Lowering) -> str:
    x = lo.need(0)
    axis = lo.attrs["axis"] % x.rank
    norm_shape = x.shape[axis:]
    inputs = {
        "x": saturated(lo, lo.x(0), x.shape),
        "axes": lo.p("axes", list(range(axis, x.rank))),
        "epsilon": lo.f("epsilon", lo.attrs["epsilon"]),
    }
    late: list[tuple[str, int]] = []
    for i, key, op in ((1, "gamma", "mul"), (2, "beta", "add")):
        a = lo.arg(i)
        if a is None:
            continue
        if a.const is not None:  # MIL wants gamma/beta of exactly the normalised shape
            inputs[key] = lo.t(np.broadcast_to(a.const, norm_shape), key)
        else:
            late.append((op, i))
    if not late:
        return lo.out("layer_norm", inputs)
    y = lo.tmp("layer_norm", inputs, x.shape)
    for n, (op, i) in enumerate(late):
        if n == len(late) - 1:
            return lo.out(op, {"x": y, "y": lo.x(i)})
        y = lo.tmp(op, {"x": y, "y": lo.x(i)}, x.shape)
    raise AssertionError("unreachable")


def _rms_norm(lo: Lowering) -> str:
    """x / sqrt(mean(x^2) + eps) * scale, with the square taken inside a reduction (no fp16
    overflow of x^2 between ops): mean(x^2) = (l2(x) / sqrt(n))^2."""
    x = lo.need(0)
    axis = lo.attrs["axis"] % x.rank
    axes = list(range(axis, x.rank))
    n = int(np.prod(x.shape[axis:]))
    reduced = tuple(1 if i >= axis else d for i, d in enumerate(x.shape))
    var = saturated(lo, lo.x(0), x.shape)
    l2 = lo.tmp("reduce_l2_norm", {"x": var, "axes": lo.p("axes", axes),
                                   "keep_dims": lo.p("keep_dims", True)}, reduced)  # fmt: skip
    rms = lo.tmp("mul", {"x": l2, "y": lo.f("inv_sqrt_n", 1.0 / math.sqrt(n))}, reduced)
    ms = lo.tmp("mul", {"x": rms, "y": rms}, reduced, hint="mean_square")
    inv = lo.tmp("rsqrt", {"x": ms, "epsilon": lo.f("epsilon", lo.attrs["epsilon"])}, reduced)
    if lo.arg(1) is None:
        return lo.out("mul", {"x": var, "y": inv})
    y = lo.tmp("mul", {"x": var, "y": inv}, x.shape)
    return lo.out("mul", {"x": y, "y": lo.x(1)})


def _group_norm(lo: Lowering) -> str:
    """instance_norm over [N, groups, rest], then the per-channel scale and bias."""
    x = lo.need(0)
    g = lo.attrs["num_groups"]
    grouped = (x.shape[0], g, int(np.prod(x.shape[1:])) // g)
    var = saturated(lo, lo.x(0), x.shape)
    y = lo.tmp("reshape", {"x": var, "shape": lo.p("shape", list(grouped))}, grouped)
    y = lo.tmp("instance_norm", {"x": y, "epsilon": lo.f("epsilon", lo.attrs["epsilon"])}, grouped)
    y = lo.tmp("reshape", {"x": y, "shape": lo.p("shape", list(x.shape))}, x.shape)
    y = lo.tmp("mul", {"x": y, "y": channel_vector(lo, 1, x.rank, "scale")}, x.shape)
    return lo.out("add", {"x": y, "y": channel_vector(lo, 2, x.rank, "bias")})


def _lrn(lo: Lowering) -> str:
    x = lo.need(0)
    if x.rank not in (3, 4):
        raise lo.error(f"lrn of a rank-{x.rank} tensor has no MIL form")
    return lo.out(
        "local_response_norm",
        {
            "x": saturated(lo, lo.x(0), x.shape),
            "size": lo.p("size", np.int32(lo.attrs["size"])),
            "alpha": lo.f("alpha", lo.attrs["alpha"]),
            "beta": lo.f("beta", lo.attrs["beta"]),
            "k": lo.f("k", lo.attrs["bias"]),
        },
    )


# --- reductions ------------------------------------------------------------------------------

_REDUCE = {
    "reduce_sum": "reduce_sum", "reduce_mean": "reduce_mean", "reduce_max": "reduce_max",
    "reduce_min": "reduce_min", "reduce_prod": "reduce_prod", "reduce_l1": "reduce_l1_norm",
    "reduce_l2": "reduce_l2_norm", "reduce_log_sum": "reduce_log_sum",
    "reduce_log_sum_exp": "reduce_log_sum_exp", "reduce_sum_square": "reduce_sum_square",
}  # fmt: skip
# what a reduction does over no axes (noop_with_empty_axes): the elementwise part, if any
_NOOP = {
    "reduce_l1": "abs",
    "reduce_l2": "abs",
    "reduce_log_sum": "log",
    "reduce_sum_square": "square",
}


def _reduce(ir_op: str) -> LowerFn:
    def lower(lo: Lowering) -> str:
        x = lo.need(0)
        axes = reduced_axes(x.rank, lo.attrs)
        if not axes:
            return lo.out(_NOOP[ir_op], {"x": lo.x(0)}) if ir_op in _NOOP else lo.alias(lo.x(0))
        return lo.out(
            _REDUCE[ir_op],
            {"x": lo.x(0), "axes": lo.p("axes", list(axes)),
             "keep_dims": lo.p("keep_dims", bool(lo.attrs["keepdims"]))},
        )  # fmt: skip

    return lower


def _arg_reduce(mil_op: str) -> LowerFn:
    def lower(lo: Lowering) -> str:
        x = lo.need(0)
        axis = lo.attrs["axis"] % x.rank
        inputs = {
            "axis": lo.p("axis", np.int32(axis)),
            "keep_dims": lo.p("keep_dims", bool(lo.attrs["keepdims"])),
        }
        if not lo.attrs["select_last_index"]:
            return lo.out(mil_op, {"x": lo.x(0), **inputs})
        # the last index of the extreme: (n - 1) - arg(reverse(x)), exact for ties
        rev = lo.tmp("reverse", {"x": lo.x(0), "axes": lo.p("axes", [axis])}, x.shape, x.dtype)
        idx = lo.tmp(mil_op, {"x": rev, **inputs}, lo.out_shape(), "int32")
        last = lo.p("last", np.int32(x.shape[axis] - 1), "int32")
        return lo.out("sub", {"x": last, "y": idx})

    return lower


LOWERINGS: MappingProxyType[str, LowerFn] = MappingProxyType(
    {
        "conv": _conv,
        "conv_integer": _conv_integer,
        "conv_transpose": _conv_transpose,
        "matmul": _matmul,
        "attention": _attention,
        "softmax": _softmax,
        "log_softmax": _log_softmax,
        "batch_norm": _batch_norm,
        "instance_norm": _instance_norm,
        "layer_norm": _layer_norm,
        "rms_norm": _rms_norm,
        "group_norm": _group_norm,
        "lrn": _lrn,
        **{op: _reduce(op) for op in _REDUCE},
        "argmax": _arg_reduce("reduce_argmax"),
        "argmin": _arg_reduce("reduce_argmin"),
    }
)
