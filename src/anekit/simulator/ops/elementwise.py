"""Elementwise MIL ops: binary arithmetic and comparisons, logical ops, unary math (iOS 15-18 defs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from anekit.ir.ops.special import erf as erf64

from .. import window_kernels
from ..registry import FLOAT, NUMERIC, SimOp, op
from ._util import F32


def _binary(ufunc: Callable[..., Any], fused: int | None = None) -> Callable[..., np.ndarray]:
    def kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return ufunc(x, y)

    kernel.elementwise = True  # type: ignore[attr-defined]  # see SimProgram's run loop
    if fused is not None:
        kernel.fused = fused  # type: ignore[attr-defined]
    return kernel


def _real_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":
        return np.true_divide(x, y)
    # int32 / int32: Core ML's ML Program backend truncates the quotient (coremltools'
    # test_real_div_int_builder_to_backend expects np.array(x / y, dtype=int32)).
    return np.trunc(np.true_divide(x, y, dtype=np.float64)).astype(x.dtype)


_real_div.elementwise = True  # type: ignore[attr-defined]


def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind != "f":
        if np.any(np.asarray(y) < 0):
            raise ValueError("an int32 cannot be raised to a negative power")
        return np.power(x, y)
    if y.ndim == 0 and x.ndim:
        # small integer exponents (GELU's x**3) by multiplication: numpy's float32 power is
        # a generic routine some 30 times slower
        e = float(y)
        if e == 2.0:
            return x * x
        if e == 3.0:
            return x * x * x
        if e == 1.0:
            return x.copy()
        if e == 0.5:
            return np.sqrt(x)
    return np.power(x, y)


def _unary(fn: Callable[[np.ndarray], Any]) -> Callable[..., np.ndarray]:
    def kernel(x: np.ndarray) -> np.ndarray:
        return fn(x)

    kernel.elementwise = True  # type: ignore[attr-defined]
    return kernel


def _exp2(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":
        return np.exp2(x)
    return np.exp2(x.astype(np.float64)).astype(x.dtype)  # int32: 2**x, wrapping as int32


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, computed in float64 and returned as float32."""
    return np.asarray(erf64(np.asarray(x, dtype=np.float64)), dtype=F32)


def _epsilon_default(value: float) -> Callable[[Mapping[str, str], int], dict[str, Any]]:
    """coremltools' ``nptype_from_builtin(x.dtype)(value)``: the default rounded to x's type."""

    def defaults(dtypes: Mapping[str, str], opset: int) -> dict[str, Any]:
        kind = np.float16 if dtypes["x"] == "fp16" else np.float32
        return {"epsilon": np.array(kind(value), dtype=F32)}

    return defaults


def _inverse(x: np.ndarray, epsilon: np.ndarray) -> np.ndarray:
    return np.reciprocal(x + epsilon)


def _log(x: np.ndarray, epsilon: np.ndarray) -> np.ndarray:
    return np.log(x + epsilon)


def _rsqrt(x: np.ndarray, epsilon: np.ndarray) -> np.ndarray:
    return np.reciprocal(np.sqrt(x + epsilon))


def _clip(x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    if np.ndim(alpha) == 0 and np.ndim(beta) == 0 and _f32(alpha) and _f32(beta):
        out = window_kernels.clamp(x, float(alpha), float(beta))  # one pass, not two
        if out is not None:
            return out
    out = np.maximum(x, alpha)
    if type(out) is not np.ndarray or out.shape != np.broadcast_shapes(out.shape, np.shape(beta)):
        return np.minimum(out, beta)
    return np.minimum(out, beta, out=out)  # in place: no second array


def _f32(value: Any) -> bool:
    return getattr(value, "dtype", None) == np.float32


def _check_clip(sig: Any, opset: int) -> None:
    # iOS 17 added the strict check that alpha < beta.
    if opset >= 17 and not float(sig.consts["alpha"]) < float(sig.consts["beta"]):
        raise ValueError(
            f"alpha ({float(sig.consts['alpha'])}) must be smaller than beta "
            f"({float(sig.consts['beta'])})"
        )


def _threshold(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.maximum(x, alpha)


# the C extension's fused arithmetic-and-rounding codes (fp16.binary_rounded)
_FUSED = {"add": 0, "sub": 1, "mul": 2}
_real_div.fused = 3  # type: ignore[attr-defined]

_ARITHMETIC = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "floor_div": np.floor_divide,
    "mod": np.remainder,
}
_COMPARE = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "less": np.less,
    "less_equal": np.less_equal,
}
_LOGICAL = {
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}
_FLOAT_UNARY: dict[str, Callable[[np.ndarray], Any]] = {
    "acos": np.arccos,
    "asin": np.arcsin,
    "atan": np.arctan,
    "atanh": np.arctanh,
    "ceil": np.ceil,
    "cos": np.cos,
    "cosh": np.cosh,
    "erf": erf,
    "exp": np.exp,
    "floor": np.floor,
    "round": np.round,  # half to even: 0.5 -> 0, as the definition says
    "sin": np.sin,
    "sinh": np.sinh,
    "sqrt": np.sqrt,
    "tan": np.tan,
    "tanh": np.tanh,
}
_NUMERIC_UNARY: dict[str, Callable[[np.ndarray], Any]] = {
    "abs": np.abs,
    "exp2": _exp2,
    "sign": np.sign,
    "square": np.square,
}
# Unary ops whose fp16 results are always fp16 values already (no rounding needed).
_EXACT_UNARY = frozenset({"abs", "ceil", "floor", "round", "sign"})

OPS: tuple[SimOp, ...] = (
    *(op(n, "x:T y:T", "T", _binary(f, _FUSED.get(n)), T=NUMERIC,
         exact=n in ("maximum", "minimum")) for n, f in _ARITHMETIC.items()),
    op("real_div", "x:T y:T", "T", _real_div, T=NUMERIC),
    op("pow", "x:T y:T", "T", _pow, T=NUMERIC),
    *(op(n, "x:T y:T", "bool", _binary(f), T=NUMERIC) for n, f in _COMPARE.items()),
    *(op(n, "x:T y:T", "T", _binary(f), T="bool") for n, f in _LOGICAL.items()),
    op("logical_not", "x:bool", "bool", _unary(np.logical_not)),
    *(op(n, "x:T", "T", _unary(f), T=FLOAT, exact=n in _EXACT_UNARY)
      for n, f in _FLOAT_UNARY.items()),
    *(op(n, "x:T", "T", _unary(f), T=NUMERIC, exact=n in _EXACT_UNARY)
      for n, f in _NUMERIC_UNARY.items()),
    op("inverse", "x:T epsilon?!:U", "T", _inverse, defaults=_epsilon_default(1e-4),
       T=FLOAT, U=FLOAT),
    op("log", "x:T epsilon?!:U", "T", _log, defaults=_epsilon_default(1e-45), T=FLOAT, U=FLOAT),
    op("rsqrt", "x:T epsilon?!:U", "T", _rsqrt, defaults=_epsilon_default(1e-12),
       T=FLOAT, U=FLOAT),
    op("clip", "x:T alpha!:T beta!:T", "T", _clip, exact=True, check=_check_clip, T=FLOAT),
    op("threshold", "x:T alpha!:T", "T", _threshold, exact=True, T=NUMERIC),
)  # fmt: skip
