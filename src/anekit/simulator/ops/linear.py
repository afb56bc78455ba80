"""Linear-algebra MIL ops: linear, matmul (numpy broadcasting, transposes) and einsum (iOS 15-18 defs).

Float operands are float32 (fp16 values widened exactly), so products run in fp32 (the C GEMM
of ``gemm.py`` for weight products, numpy's BLAS otherwise); the fp16 result is rounded once
afterwards.
"""

from __future__ import annotations

import numpy as np

from .. import gemm
from ..registry import NUMERIC, Signature, SimOp, op
from ._util import as_bool, as_str


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    if weight.ndim != 2:
        raise ValueError(f"weight must be rank 2 [D_out, D_in], not {list(weight.shape)}")
    if x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"x's last dimension {list(x.shape)[-1:]} does not match weight's D_in "
            f"{weight.shape[1]}"
        )
    out = np.matmul(x, weight.T.astype(x.dtype, copy=False))
    if bias is not None:
        if bias.shape != (weight.shape[0],):
            raise ValueError(f"bias has shape {list(bias.shape)}, expected [{weight.shape[0]}]")
        out += bias.astype(out.dtype, copy=False)
    return out


def matmul(
    x: np.ndarray,
    y: np.ndarray,
    transpose_x: np.ndarray | bool = False,
    transpose_y: np.ndarray | bool = False,
) -> np.ndarray:
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError("matmul needs x and y of rank 1 or more")
    if as_bool(transpose_x):
        if x.ndim == 1:
            raise ValueError("x is rank 1, so transpose_x cannot be true")
        x = np.swapaxes(x, -1, -2)
    if as_bool(transpose_y) and y.ndim > 1:
        y = np.swapaxes(y, -1, -2)
    return gemm.matmul(x, y.astype(x.dtype, copy=False))


def _matmul_outputs(sig: Signature) -> tuple[str, ...]:
    # iOS 17: x and y may differ in dtype when exactly one of them is a constant; the result
    # then has the dtype of the other one.
    x, y = sig.dtypes["x"], sig.dtypes["y"]
    x_const, y_const = "x" in sig.consts, "y" in sig.consts
    if x == y:
        return (x,)
    if x_const == y_const:
        raise ValueError(f"x ({x}) and y ({y}) must have the same dtype unless one is a constant")
    return (y if x_const else x,)


def _einsum_letters(equation: str) -> tuple[list[int], list[int], list[int]]:
    """coremltools' parse_einsum_equation: each letter numbered in order of appearance."""
    left, arrow, right = equation.replace(" ", "").partition("->")
    terms = left.split(",")
    if not arrow or len(terms) != 2:
        raise ValueError(f"einsum equation {equation!r} must be 'a,b->c' with two inputs")
    numbers: dict[str, int] = {}
    vectors = []
    for term in (*terms, right):
        vec = []
        for ch in term:
            if not ch.isalpha():
                raise ValueError(f"einsum equation {equation!r} has the character {ch!r}")
            vec.append(numbers.setdefault(ch, len(numbers)))
        vectors.append(vec)
    return vectors[0], vectors[1], vectors[2]


def einsum(values: tuple[np.ndarray, ...], equation: str) -> np.ndarray:
    equation = as_str(equation)
    if len(values) != 2:
        raise ValueError(f"einsum takes two values, got {len(values)}")
    x, y = values
    a, b, c = _einsum_letters(equation)
    # The two equations the definition supports (and their relabellings).
    if not (
        (a, b, c) == ([0, 1, 2, 3], [0, 3, 2, 4], [0, 1, 2, 4])
        or (a, b, c) == ([0, 1, 2], [2, 1, 3], [0, 1, 3])
    ):
        raise ValueError(
            f"unsupported einsum equation {equation!r}: MIL supports 'nchw,nwhu->nchu' and "
            "'chw,whr->chr' (up to relabelling)"
        )
    if x.ndim != len(a) or y.ndim != len(b):
        raise ValueError(f"einsum inputs of shapes {list(x.shape)} and {list(y.shape)}")
    if len(a) == 4:
        n, h = max(x.shape[0], y.shape[0]), max(x.shape[2], y.shape[2])
        xs, ys = (n, x.shape[1], h, x.shape[3]), (n, y.shape[1], h, y.shape[3])
    else:
        h = max(x.shape[1], y.shape[1])
        xs, ys = (x.shape[0], h, x.shape[2]), (y.shape[0], h, y.shape[2])
    return np.einsum(equation, np.broadcast_to(x, xs), np.broadcast_to(y, ys))


OPS: tuple[SimOp, ...] = (
    op("linear", "x:T weight!:U bias?!:U", "T", linear, T=NUMERIC, U=NUMERIC),
    op("matmul", "x:T y:U transpose_x?!:bool transpose_y?!:bool", _matmul_outputs, matmul,
       T=NUMERIC, U=NUMERIC),
    op("einsum", "values*:T equation!:string", "T", einsum, T=NUMERIC),
)  # fmt: skip
