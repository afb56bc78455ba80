"""Elementwise builder ops: arithmetic, comparisons, activations, clip, cast and where."""

from __future__ import annotations

from collections.abc import Callable

from anekit.frontend.builder.ops.common import TensorLike, named
from anekit.frontend.builder.tensor import Tensor, as_tensor, record
from anekit.ir.dtypes import DType, to_dtype


def _binary(op: str) -> Callable[..., Tensor]:
    def fn(a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
        return record(op, [a, b], name=name)

    return named(fn, op, f"Elementwise {op} (numpy broadcasting).")


add = _binary("add")
sub = _binary("sub")
mul = _binary("mul")
div = _binary("div")
pow = _binary("pow")  # noqa: A001
maximum = _binary("maximum")
minimum = _binary("minimum")
equal = _binary("equal")
less = _binary("less")
greater = _binary("greater")


def _unary(op: str) -> Callable[..., Tensor]:
    def fn(x: TensorLike, *, name: str | None = None) -> Tensor:
        return record(op, [x], name=name)

    return named(fn, op, f"Elementwise {op}.")


neg = _unary("neg")
abs = _unary("abs")  # noqa: A001
exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
reciprocal = _unary("reciprocal")
erf = _unary("erf")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
relu = _unary("relu")
silu = _unary("silu")
softplus = _unary("softplus")
hard_swish = _unary("hard_swish")
sin = _unary("sin")
cos = _unary("cos")
identity = _unary("identity")


def rsqrt(x: TensorLike, *, name: str | None = None) -> Tensor:
    return record("reciprocal", [record("sqrt", [x])], name=name)


def leaky_relu(x: TensorLike, alpha: float = 0.01, *, name: str | None = None) -> Tensor:
    return record("leaky_relu", [x], {"alpha": alpha}, name=name)


def elu(x: TensorLike, alpha: float = 1.0, *, name: str | None = None) -> Tensor:
    return record("elu", [x], {"alpha": alpha}, name=name)


def hard_sigmoid(
    x: TensorLike, alpha: float = 1 / 6, beta: float = 0.5, *, name: str | None = None
) -> Tensor:
    return record("hard_sigmoid", [x], {"alpha": alpha, "beta": beta}, name=name)


def gelu(x: TensorLike, approximate: str = "none", *, name: str | None = None) -> Tensor:
    """GELU, exact ('none') or the tanh approximation ('tanh')."""
    return record("gelu", [x], {"approximate": approximate}, name=name)


def clip(
    x: TensorLike, min: float | None = None, max: float | None = None, *, name: str | None = None
) -> Tensor:  # noqa: A002
    return record("clip", [x], {"min": min, "max": max}, name=name)


clamp = clip


def cast(x: TensorLike, dtype: str | DType, *, name: str | None = None) -> Tensor:
    return record("cast", [x], {"to": to_dtype(dtype)}, name=name)


def where(cond: TensorLike, a: TensorLike, b: TensorLike, *, name: str | None = None) -> Tensor:
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    return record("where", [cond, as_tensor(a, like), as_tensor(b, like)], name=name)
