"""Elementwise ops: unary math and activations, binary arithmetic, comparisons, logic, casts."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types, broadcast, float_only, same_as, unary_float
from anekit.ir.ops.special import erf as _erf
from anekit.ir.registry import REQUIRED, Attr, InferError, KernelError, TensorType, declare

# --- unary ops without attributes: name -> (kernel, float inputs only) ---------------------

_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of a large negative argument stays finite: split by sign for stability
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.zeros_like(x), x)


def _int_safe_abs(x: np.ndarray) -> np.ndarray:
    return np.abs(x)


UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], bool, str, bool]] = {
    "neg": (np.negative, False, "-x", True),
    "abs": (_int_safe_abs, False, "|x|", True),
    "sign": (np.sign, False, "sign of x (-1, 0 or 1)", False),
    "exp": (np.exp, True, "e^x", True),
    "log": (np.log, True, "natural logarithm", True),
    "sqrt": (np.sqrt, True, "square root", True),
    "reciprocal": (lambda x: np.float32(1.0) / x, True, "1/x", True),
    "floor": (np.floor, True, "round down", False),
    "ceil": (np.ceil, True, "round up", False),
    "round": (np.round, True, "round half to even", False),
    "erf": (_erf, True, "the Gauss error function", True),
    "tanh": (np.tanh, True, "hyperbolic tangent", True),
    "sigmoid": (_sigmoid, True, "1/(1+e^-x)", True),
    "relu": (lambda x: np.maximum(x, 0).astype(x.dtype), False, "max(x, 0)", True),
    "softplus": (_softplus, True, "log(1+e^x)", True),
    "softsign": (lambda x: x / (1.0 + np.abs(x)), True, "x/(1+|x|)", False),
    "silu": (lambda x: x * _sigmoid(x), True, "x*sigmoid(x) (swish)", True),
    "mish": (lambda x: x * np.tanh(_softplus(x)), True, "x*tanh(softplus(x))", False),
    "hard_swish": (lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0), True, "x*relu6(x+3)/6", True),
    "sin": (np.sin, True, "sine", True),
    "cos": (np.cos, True, "cosine", True),
    "tan": (np.tan, True, "tangent", False),
    "asin": (np.arcsin, True, "arcsine", False),
    "acos": (np.arccos, True, "arccosine", False),
    "atan": (np.arctan, True, "arctangent", False),
    "sinh": (np.sinh, True, "hyperbolic sine", False),
    "cosh": (np.cosh, True, "hyperbolic cosine", False),
    "asinh": (np.arcsinh, True, "inverse hyperbolic sine", False),
    "acosh": (np.arccosh, True, "inverse hyperbolic cosine", False),
    "atanh": (np.arctanh, True, "inverse hyperbolic tangent", False),
    "identity": (lambda x: x, False, "x (a copy)", False),
}


def _declare_unary(
    name: str, fn: Callable[[np.ndarray], np.ndarray], floats: bool, doc: str, activation: bool
) -> None:
    declare(
        name,
        inputs=("x",),
        infer=unary_float if floats else same_as(0),
        doc=doc,
        activation=activation,
        layer_type="neuron" if name == "identity" else "",  # a copy: the neuron unit's pass-through
    )(lambda x: fn(x))


for _name, (_fn, _floats, _doc, _activation) in UNARY.items():
    _declare_unary(_name, _fn, _floats, _doc, _activation)


# --- unary ops with attributes ------------------------------------------------------------


@declare(
    "leaky_relu",
    activation=True,
    inputs=("x",),
    attrs=(Attr("alpha", "float", 0.01),),
    infer=unary_float,
)
def leaky_relu(x, alpha):
    """x if x >= 0 else alpha*x"""
    return np.where(x >= 0, x, x * np.float32(alpha))


@declare(
    "elu",
    inputs=("x",),
    attrs=(Attr("alpha", "float", 1.0),),
    infer=unary_float,
    activation=True,
)
def elu(x, alpha):
    """x if x > 0 else alpha*(e^x - 1)"""
    return np.where(x > 0, x, np.float32(alpha) * np.expm1(np.minimum(x, 0)))


@declare("celu", inputs=("x",), attrs=(Attr("alpha", "float", 1.0),), infer=unary_float)
def celu(x, alpha):
    """max(0, x) + min(0, alpha*(e^(x/alpha) - 1))"""
    a = np.float32(alpha)
    return np.maximum(x, 0) + np.minimum(0, a * np.expm1(np.minimum(x, 0) / a))


@declare(
    "selu",
    inputs=("x",),
    attrs=(
        Attr("alpha", "float", 1.67326319217681884765625),
        Attr("gamma", "float", 1.05070102214813232421875),
    ),
    infer=unary_float,
)
def selu(x, alpha, gamma):
    """gamma*(x if x > 0 else alpha*(e^x - 1))"""
    return np.float32(gamma) * np.where(x > 0, x, np.float32(alpha) * np.expm1(np.minimum(x, 0)))


@declare(
    "hard_sigmoid",
    activation=True,
    inputs=("x",),
    attrs=(Attr("alpha", "float", 0.2), Attr("beta", "float", 0.5)),
    infer=unary_float,
)
def hard_sigmoid(x, alpha, beta):
    """clip(alpha*x + beta, 0, 1)"""
    return np.clip(x * np.float32(alpha) + np.float32(beta), 0.0, 1.0)


@declare(
    "thresholded_relu",
    inputs=("x",),
    attrs=(Attr("alpha", "float", 1.0),),
    infer=unary_float,
)
def thresholded_relu(x, alpha):
    """x if x > alpha else 0"""
    return np.where(x > np.float32(alpha), x, 0).astype(x.dtype)


@declare(
    "gelu",
    activation=True,
    inputs=("x",),
    attrs=(Attr("approximate", "str", "none", choices=("none", "tanh")),),
    infer=unary_float,
)
def gelu(x, approximate):
    """x*Phi(x), exact (erf) or the tanh approximation"""
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)))
    return 0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))


@declare(
    "clip",
    activation=True,
    inputs=("x",),
    attrs=(Attr("min", "float", None), Attr("max", "float", None)),
    infer=same_as(0),
)
def clip(x, min, max):  # noqa: A002 - the op's attribute names
    """clamp x to [min, max]; an absent bound does not clamp"""
    out = x
    if min is not None:
        out = np.maximum(
            out, np.asarray(min).astype(x.dtype) if x.dtype.kind in "iu" else np.float32(min)
        )
    if max is not None:
        out = np.minimum(
            out, np.asarray(max).astype(x.dtype) if x.dtype.kind in "iu" else np.float32(max)
        )
    return out


@declare(
    "isnan",
    inputs=("x",),
    infer=lambda ins, a: [TensorType(ins[0].shape, DType.BOOL)],
)
def isnan(x):
    """x is NaN"""
    return np.isnan(x)


@declare(
    "isinf",
    inputs=("x",),
    attrs=(Attr("detect_negative", "bool", True), Attr("detect_positive", "bool", True)),
    infer=lambda ins, a: [TensorType(ins[0].shape, DType.BOOL)],
)
def isinf(x, detect_negative, detect_positive):
    """x is +inf (detect_positive) or -inf (detect_negative)"""
    return (np.isposinf(x) & detect_positive) | (np.isneginf(x) & detect_negative)


def _cast_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    return [TensorType(ins[0].shape, attrs["to"])]


@declare("cast", inputs=("x",), attrs=(Attr("to", "dtype"),), infer=_cast_infer)
def cast(x, to):
    """convert to dtype ``to`` (float to int truncates toward zero)"""
    if to is DType.BOOL:
        return x != 0
    if to.is_int and x.dtype.kind == "f":
        x = np.trunc(x)
        info = np.iinfo(to.numpy)
        x = np.where(np.isfinite(x), x, 0)  # NaN/inf casts are undefined; make them 0
        return np.clip(x, info.min, info.max).astype(to.numpy)
    return x.astype(to.numpy)


# --- binary ops ---------------------------------------------------------------------------


def _no_integer_zero(b: np.ndarray, op: str) -> None:
    """Integer division by zero has no result (onnxruntime refuses it too)."""
    if b.dtype.kind in "iub" and not b.all():
        raise KernelError(
            f"integer {op} by zero (the divisor has {b.size - np.count_nonzero(b)} zero(s))"
        )


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (C semantics, as ONNX runtimes do)."""
    _no_integer_zero(b, "division")
    q = np.abs(a) // np.abs(b)
    return (np.sign(a) * np.sign(b) * q).astype(np.result_type(a, b))


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return _int_div(a, b)
    return a / b


# Small integer exponents as multiplications: np.power with a float exponent is ~20x
# slower (GPT-2's GELU computes x**3), and repeated products are exact in fp32 here.
_SMALL_POWERS = {1.0: lambda a: a, 2.0: lambda a: a * a, 3.0: lambda a: a * a * a}


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" and b.size == 1 and b.shape == () and float(b) in _SMALL_POWERS:
        return _SMALL_POWERS[float(b)](a)
    if a.dtype.kind in "iu":
        if b.dtype.kind in "iu":
            return np.power(a, np.maximum(b, 0)).astype(a.dtype)
        return np.power(a.astype(np.float64), b).astype(a.dtype)
    return np.power(a, b.astype(a.dtype) if b.dtype.kind in "iu" else b).astype(a.dtype)


BINARY: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], str]] = {
    "add": (np.add, "a + b"),
    "sub": (np.subtract, "a - b"),
    "mul": (np.multiply, "a * b"),
    "div": (_div, "a / b (integers truncate toward zero)"),
    "minimum": (np.minimum, "elementwise min"),
    "maximum": (np.maximum, "elementwise max"),
}

for _name, (_fn, _doc) in BINARY.items():
    declare(_name, inputs=("a", "b"), infer=broadcast(), doc=_doc, layer_type="elementwise",
            affine=_name in ("add", "sub", "mul", "div"))(  # a constant operand fits a GOC
        (lambda fn: lambda a, b: fn(a, b))(_fn)
    )


@declare("pow", inputs=("a", "b"), infer=broadcast(same_dtype=False))
def pow_(a, b):
    """a ** b (the result has a's dtype)"""
    return _pow(a, b)


@declare("mod", inputs=("a", "b"), attrs=(Attr("fmod", "bool", False),), infer=broadcast())
def mod(a, b, fmod):
    """remainder: sign of the divisor (Python) or of the dividend (fmod=True, C fmod)"""
    if a.dtype.kind in "iu":
        _no_integer_zero(b, "modulo")
    if fmod:
        return np.fmod(a, b)
    return np.mod(a, b)


@declare("prelu", inputs=("x", "slope"), infer=broadcast())
def prelu(x, slope):
    """x if x >= 0 else slope*x (slope broadcasts)"""
    return np.where(x >= 0, x, x * slope)


COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}
for _name, _fn in COMPARE.items():
    declare(_name, inputs=("a", "b"), infer=broadcast(DType.BOOL), doc=f"a {_name} b")(
        (lambda fn: lambda a, b: fn(a, b))(_fn)
    )


def _bool_inputs(ins: Types, attrs: Attrs) -> list[TensorType]:
    for t in ins:
        if t is not None and t.dtype is not DType.BOOL:
            raise InferError(f"logical ops take bool tensors, got {t.dtype}")
    return broadcast(DType.BOOL)(ins, attrs)


for _name, _fn in {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.items():
    declare(_name, inputs=("a", "b"), infer=_bool_inputs, doc=f"logical {_name}")(
        (lambda fn: lambda a, b: fn(a, b))(_fn)
    )


@declare("not", inputs=("x",), infer=_bool_inputs)
def not_(x):
    """logical not"""
    return np.logical_not(x)


def _where_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    cond, a, b = ins
    if cond.dtype is not DType.BOOL:
        raise InferError(f"condition must be bool, got {cond.dtype}")
    if a.dtype != b.dtype:
        raise InferError(f"branches have different dtypes {a.dtype} and {b.dtype}")
    return [TensorType(broadcast(same_dtype=False)(ins, attrs)[0].shape, a.dtype)]


@declare("where", inputs=("cond", "a", "b"), infer=_where_infer)
def where(cond, a, b):
    """a where cond else b (all three broadcast)"""
    return np.where(cond, a, b)


_ = float_only  # re-exported for op modules that build on these helpers
_ = REQUIRED
