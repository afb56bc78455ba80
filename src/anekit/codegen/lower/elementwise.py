"""Lowerings of elementwise IR ops (unary math, activations, binary arithmetic, comparisons,
logic, casts, select) to MIL operations."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import MappingProxyType

from anekit.codegen.lower.context import Lowering

LowerFn = Callable[[Lowering], str]

# IR unary ops that are one MIL op of the same meaning (MIL name when it differs).
_DIRECT_UNARY = {
    "abs": "abs", "acos": "acos", "asin": "asin", "atan": "atan", "atanh": "atanh", "ceil": "ceil", "cos": "cos", "cosh": "cosh",
    "erf": "erf", "exp": "exp", "floor": "floor", "log": "log", "round": "round",
    "sign": "sign", "sin": "sin", "sinh": "sinh", "sqrt": "sqrt", "tan": "tan", "tanh": "tanh",
    "sigmoid": "sigmoid", "relu": "relu", "silu": "silu", "softplus": "softplus",
    "softsign": "softsign", "identity": "identity",
}  # fmt: skip
_DIRECT_BINARY = {
    "add": "add", "sub": "sub", "mul": "mul", "maximum": "maximum", "minimum": "minimum",
    "equal": "equal", "not_equal": "not_equal", "less": "less", "less_equal": "less_equal",
    "greater": "greater", "greater_equal": "greater_equal", "and": "logical_and",
    "or": "logical_or", "xor": "logical_xor",
}  # fmt: skip
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _unary(mil_op: str) -> LowerFn:
    return lambda lo: lo.out(mil_op, {"x": lo.x(0)})


def _binary(mil_op: str) -> LowerFn:
    def lower(lo: Lowering) -> str:
        a, b = lo.need(0), lo.need(1)
        dtype = a.dtype if a.var is not None else b.dtype if b.var is not None else None
        return lo.out(mil_op, {"x": lo.var(a, dtype), "y": lo.var(b, dtype)})

    return lower


def _neg(lo: Lowering) -> str:
    a = lo.need(0)
    minus = lo.p("minus_one", -1, a.dtype) if a.dtype != lo.fdtype else lo.f("minus_one", -1.0)
    return lo.out("mul", {"x": lo.x(0), "y": minus})


def _inverse_hyperbolic(sign: float) -> LowerFn:
    """asinh(x) = log(x + sqrt(x^2 + 1)), acosh(x) = log(x + sqrt(x^2 - 1)): MIL has neither."""

    def lower(lo: Lowering) -> str:
        x, shape = lo.x(0), lo.out_shape()
        square = lo.tmp("mul", {"x": x, "y": x}, shape, hint="square")
        shifted = lo.tmp(
            "add", {"x": square, "y": lo.f("one" if sign > 0 else "minus_one", sign)}, shape
        )
        root = lo.tmp("sqrt", {"x": shifted}, shape)
        return lo.out("log", {"x": lo.tmp("add", {"x": x, "y": root}, shape)})

    return lower


def _reciprocal(lo: Lowering) -> str:
    return lo.out("real_div", {"x": lo.f("one", 1.0), "y": lo.x(0)})


def _div(lo: Lowering) -> str:
    a, b = lo.need(0), lo.need(1)
    if a.dtype in ("fp16", "fp32"):
        return lo.out("real_div", {"x": lo.x(0, a.dtype), "y": lo.x(1, a.dtype)})
    # integers truncate toward zero: sign(a) * sign(b) * (|a| floor_div |b|)
    shape, dt = lo.out_shape(), a.dtype
    xa, xb = lo.x(0), lo.x(1, dt)
    q = lo.tmp(
        "floor_div",
        {"x": lo.tmp("abs", {"x": xa}, a.shape, dt), "y": lo.tmp("abs", {"x": xb}, b.shape, dt)},
        shape,
        dt,
    )
    signs = lo.tmp(
        "mul",
        {"x": lo.tmp("sign", {"x": xa}, a.shape, dt), "y": lo.tmp("sign", {"x": xb}, b.shape, dt)},
        shape,
        dt,
    )
    return lo.out("mul", {"x": q, "y": signs})


def _pow(lo: Lowering) -> str:
    a = lo.need(0)
    if a.dtype not in ("fp16", "fp32"):
        raise lo.error("integer pow has no MIL form", hint="cast the base to float first")
    return lo.out("pow", {"x": lo.x(0), "y": lo.x(1, a.dtype)})


def _mod(lo: Lowering) -> str:
    if not lo.attrs["fmod"]:
        return _binary("mod")(lo)
    # C fmod: a - b * trunc(a / b), trunc(q) = sign(q) * floor(|q|)
    a = lo.need(0)
    if a.dtype not in ("fp16", "fp32"):
        raise lo.error("integer fmod has no MIL form")
    shape = lo.out_shape()
    xa, xb = lo.x(0), lo.x(1)
    q = lo.tmp("real_div", {"x": xa, "y": xb}, shape)
    trunc = lo.tmp(
        "mul",
        {
            "x": lo.tmp("sign", {"x": q}, shape),
            "y": lo.tmp("floor", {"x": lo.tmp("abs", {"x": q}, shape)}, shape),
        },
        shape,
    )
    return lo.out("sub", {"x": xa, "y": lo.tmp("mul", {"x": xb, "y": trunc}, shape)})


def _prelu(lo: Lowering) -> str:
    shape = lo.out_shape()
    x = lo.x(0)
    positive = lo.tmp(
        "greater_equal", {"x": x, "y": lo.f("zero", 0.0)}, lo.need(0).shape, "bool", "positive"
    )
    scaled = lo.tmp("mul", {"x": x, "y": lo.x(1)}, shape, hint="scaled")
    return lo.out("select", {"cond": positive, "a": x, "b": scaled})


def _where(lo: Lowering) -> str:
    a, b = lo.need(1), lo.need(2)
    dtype = a.dtype if a.var is not None else b.dtype
    return lo.select(lo.x(0), lo.var(a, dtype), a.shape, lo.var(b, dtype), b.shape)


def _not(lo: Lowering) -> str:
    return lo.out("logical_not", {"x": lo.x(0)})


# --- activations with parameters --------------------------------------------------------------


def _leaky_relu(lo: Lowering) -> str:
    return lo.out("leaky_relu", {"x": lo.x(0), "alpha": lo.f("alpha", lo.attrs["alpha"])})


def _elu(lo: Lowering) -> str:
    return lo.out("elu", {"x": lo.x(0), "alpha": lo.f("alpha", lo.attrs["alpha"])})


def _celu(lo: Lowering) -> str:
    # celu(x) = alpha * elu(x / alpha) with elu's alpha = 1
    alpha, shape = lo.attrs["alpha"], lo.out_shape()
    scaled = lo.tmp("mul", {"x": lo.x(0), "y": lo.f("inv_alpha", 1.0 / alpha)}, shape)
    elu = lo.tmp("elu", {"x": scaled, "alpha": lo.f("one", 1.0)}, shape)
    return lo.out("mul", {"x": elu, "y": lo.f("alpha", alpha)})


def _selu(lo: Lowering) -> str:
    shape = lo.out_shape()
    elu = lo.tmp("elu", {"x": lo.x(0), "alpha": lo.f("alpha", lo.attrs["alpha"])}, shape)
    return lo.out("mul", {"x": elu, "y": lo.f("gamma", lo.attrs["gamma"])})


def _hard_sigmoid(lo: Lowering) -> str:
    return lo.out(
        "sigmoid_hard",
        {
            "x": lo.x(0),
            "alpha": lo.f("alpha", lo.attrs["alpha"]),
            "beta": lo.f("beta", lo.attrs["beta"]),
        },
    )


def _hard_swish(lo: Lowering) -> str:
    x, shape = lo.x(0), lo.out_shape()
    gate = lo.tmp(
        "sigmoid_hard",
        {"x": x, "alpha": lo.f("sixth", 1.0 / 6.0), "beta": lo.f("half", 0.5)},
        shape,
    )
    return lo.out("mul", {"x": x, "y": gate})


def _thresholded_relu(lo: Lowering) -> str:
    return lo.out("thresholded_relu", {"x": lo.x(0), "alpha": lo.f("alpha", lo.attrs["alpha"])})


def _mish(lo: Lowering) -> str:
    x, shape = lo.x(0), lo.out_shape()
    t = lo.tmp("tanh", {"x": lo.tmp("softplus", {"x": x}, shape)}, shape)
    return lo.out("mul", {"x": x, "y": t})


def _gelu(lo: Lowering) -> str:
    tanh_form = lo.attrs["approximate"] == "tanh"
    if lo.device == "cpu" or lo.target.features.gelu:
        mode = "TANH_APPROXIMATION" if tanh_form else "EXACT"
        return lo.out("gelu", {"x": lo.x(0), "mode": lo.p("mode", mode, "string")})
    # The engine's compiler rejects gelu (Orion #10), so the engine runs the tanh form
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), written with ops it has. Whether an
    # exact GELU becomes that form is the passes' decision (decompose; validate sends an
    # exact one to the CPU), so here it is only ever the tanh form.
    if not tanh_form:
        raise lo.error("exact GELU reaches an engine program only if the passes let it through")
    x, shape = lo.x(0), lo.out_shape()
    x2 = lo.tmp("mul", {"x": x, "y": x}, shape, hint="x2")
    x3 = lo.tmp("mul", {"x": x2, "y": x}, shape, hint="x3")
    inner = lo.tmp(
        "add", {"x": x, "y": lo.tmp("mul", {"x": x3, "y": lo.f("c", 0.044715)}, shape)}, shape
    )
    t = lo.tmp(
        "tanh", {"x": lo.tmp("mul", {"x": inner, "y": lo.f("k", _SQRT_2_OVER_PI)}, shape)}, shape
    )
    one_plus = lo.tmp("add", {"x": t, "y": lo.f("one", 1.0)}, shape, hint="one_plus")
    half_x = lo.tmp("mul", {"x": x, "y": lo.f("half", 0.5)}, shape, hint="half_x")
    return lo.out("mul", {"x": half_x, "y": one_plus})


def _clip(lo: Lowering) -> str:
    low, high = lo.attrs["min"], lo.attrs["max"]
    a = lo.need(0)
    x = lo.x(0)
    floats = a.dtype in ("fp16", "fp32")

    def bound(key: str, v: float) -> str:
        return lo.f(key, v) if floats else lo.p(key, int(v), a.dtype)

    if low is not None and high is not None and floats:
        return lo.out("clip", {"x": x, "alpha": bound("min", low), "beta": bound("max", high)})
    if low is not None and high is not None:
        x = lo.tmp("maximum", {"x": x, "y": bound("min", low)}, a.shape, a.dtype)
        return lo.out("minimum", {"x": x, "y": bound("max", high)})
    if low is not None:
        return lo.out("maximum", {"x": x, "y": bound("min", low)})
    if high is not None:
        return lo.out("minimum", {"x": x, "y": bound("max", high)})
    return lo.alias(x)


def _isnan(lo: Lowering) -> str:
    x = lo.x(0)
    return lo.out("not_equal", {"x": x, "y": x})


def _isinf(lo: Lowering) -> str:
    a = lo.need(0)
    x = lo.x(0)
    neg, pos = lo.attrs["detect_negative"], lo.attrs["detect_positive"]
    if neg and pos:
        return lo.out("equal", {"x": lo.tmp("abs", {"x": x}, a.shape), "y": lo.f("inf", math.inf)})
    if pos:
        return lo.out("equal", {"x": x, "y": lo.f("inf", math.inf)})
    if neg:
        return lo.out("equal", {"x": x, "y": lo.f("minus_inf", -math.inf)})
    # detects nothing: always false (x < x is false even for NaN)
    return lo.out("less", {"x": x, "y": x})


def _cast(lo: Lowering) -> str:
    src = lo.need(0)
    dst = lo.out_dtype()
    x = lo.x(0)
    if src.dtype == dst:  # fp32 <-> fp16 in one program's precision: nothing to do
        return lo.alias(x)
    if dst == "bool":
        zero = lo.f("zero", 0.0) if src.dtype in ("fp16", "fp32") else lo.p("zero", 0, src.dtype)
        return lo.out("not_equal", {"x": x, "y": zero})
    return lo.out("cast", {"x": x, "dtype": lo.p("dtype", dst, "string")})


def _goc(lo: Lowering) -> str:
    """The gain/offset unit: x * gain + offset (either may be absent)."""
    x, shape = lo.x(0), lo.out_shape()
    gain, offset = lo.arg(1), lo.arg(2)
    if gain is not None and offset is not None:
        scaled = lo.tmp("mul", {"x": x, "y": lo.x(1)}, shape, hint="gain")
        return lo.out("add", {"x": scaled, "y": lo.x(2)})
    if gain is not None:
        return lo.out("mul", {"x": x, "y": lo.x(1)})
    if offset is not None:
        return lo.out("add", {"x": x, "y": lo.x(2)})
    return lo.alias(x)


LOWERINGS: MappingProxyType[str, LowerFn] = MappingProxyType(
    {
        **{op: _unary(m) for op, m in _DIRECT_UNARY.items()},
        **{op: _binary(m) for op, m in _DIRECT_BINARY.items()},
        "neg": _neg,
        "reciprocal": _reciprocal,
        "asinh": _inverse_hyperbolic(1.0),
        "acosh": _inverse_hyperbolic(-1.0),
        "div": _div,
        "pow": _pow,
        "mod": _mod,
        "prelu": _prelu,
        "where": _where,
        "not": _not,
        "leaky_relu": _leaky_relu,
        "elu": _elu,
        "celu": _celu,
        "selu": _selu,
        "hard_sigmoid": _hard_sigmoid,
        "hard_swish": _hard_swish,
        "thresholded_relu": _thresholded_relu,
        "mish": _mish,
        "gelu": _gelu,
        "clip": _clip,
        "isnan": _isnan,
        "isinf": _isinf,
        "cast": _cast,
        "goc": _goc,
    }
)
