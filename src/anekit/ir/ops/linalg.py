"""Linear algebra: matmul (numpy semantics), einsum, scaled dot-product attention."""

from __future__ import annotations

import numpy as np

from anekit.ir.ops._infer import Attrs, Types, broadcast_shapes, float_only
from anekit.ir.registry import Attr, InferError, TensorType, declare


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise InferError("matmul operands must have rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise InferError(f"contraction dims differ: {list(a)} @ {list(b)}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    a, b = ins
    if a.dtype != b.dtype:
        raise InferError(f"operands have different dtypes {a.dtype} and {b.dtype}")
    return [TensorType(matmul_shape(a.shape, b.shape), a.dtype)]


@declare("matmul", layer_type="matmul", inputs=("a", "b"), infer=_matmul_infer)
def matmul(a, b):
    """a @ b with numpy broadcasting of batch dims (rank-1 operands promoted)"""
    return np.matmul(a, b)


def _einsum_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    eq = attrs["equation"].replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ins):
        raise InferError(f"equation '{eq}' names {len(terms)} operands, got {len(ins)}")
    dims: dict[str, int] = {}
    ell: tuple[int, ...] | None = None
    for term, t in zip(terms, ins, strict=True):
        letters = term.replace("...", "")
        n_ell = len(t.shape) - len(letters)
        if "..." in term:
            if n_ell < 0:
                raise InferError(f"operand {term} has rank {len(t.shape)}")
            pos = term.index("...")
            e = t.shape[pos : pos + n_ell]
            ell = broadcast_shapes(ell or (), e)
            shape = t.shape[:pos] + t.shape[pos + n_ell :]
        else:
            if n_ell != 0:
                raise InferError(
                    f"operand '{term}' has {len(letters)} labels but rank {len(t.shape)}"
                )
            shape = t.shape
        for ch, d in zip(letters, shape, strict=True):
            if ch in dims and dims[ch] != d and 1 not in (dims[ch], d):
                raise InferError(f"label '{ch}' has sizes {dims[ch]} and {d}")
            dims[ch] = max(dims.get(ch, d), d)
    if not _:
        counts = {c: lhs.count(c) for c in dims}
        rhs = ("..." if ell else "") + "".join(sorted(c for c, n in counts.items() if n == 1))
    out: list[int] = []
    i = 0
    while i < len(rhs):
        if rhs.startswith("...", i):
            out.extend(ell or ())
            i += 3
            continue
        if rhs[i] not in dims:
            raise InferError(f"output label '{rhs[i]}' does not appear in the inputs")
        out.append(dims[rhs[i]])
        i += 1
    return [TensorType(tuple(out), ins[0].dtype)]


@declare(
    "einsum",
    inputs=("xs*",),
    attrs=(Attr("equation", "str"),),
    infer=_einsum_infer,
    no_engine_form="engine_forms rewrites the equations it can as transposes and matmuls",
)
def einsum(*xs, equation):
    """Einstein summation (numpy's einsum)"""
    return np.einsum(equation, *xs)


def _attention_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    q, k, v = ins[:3]
    float_only(ins, (0, 1, 2))
    if not (q.rank == k.rank == v.rank) or q.rank < 2:
        raise InferError("q, k and v must have the same rank (>= 2)")
    if q.shape[-1] != k.shape[-1]:
        raise InferError(f"q and k head sizes differ: {q.shape[-1]} vs {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise InferError(f"k and v sequence lengths differ: {k.shape[-2]} vs {v.shape[-2]}")
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    mask = ins[3] if len(ins) > 3 else None
    if mask is not None:
        broadcast_shapes(mask.shape, batch + (q.shape[-2], k.shape[-2]))
    return [TensorType(batch + (q.shape[-2], v.shape[-1]), q.dtype)]


@declare(
    "attention",
    layer_type="sdpa",
    inputs=("q", "k", "v", "mask?"),
    attrs=(Attr("scale", "float", None), Attr("causal", "bool", False)),
    infer=_attention_infer,
)
def attention(q, k, v, mask, scale, causal):
    """softmax(q k^T * scale + mask) v; a bool mask keeps True positions; causal masks the
    future (aligned bottom-right); a row with every key masked gives zeros"""
    s = np.float32(scale if scale is not None else 1.0 / np.sqrt(q.shape[-1]))
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * s
    lq, lk = scores.shape[-2:]
    bias = np.zeros((lq, lk), dtype=np.float32)
    if causal:
        keep = np.tril(np.ones((lq, lk), dtype=bool), k=lk - lq)
        bias = np.where(keep, bias, -np.inf)
    if mask is not None:
        bias = np.where(mask, bias, -np.inf) if mask.dtype == np.bool_ else bias + mask
    scores = scores + bias
    # fully masked rows are decided on the mask, not on the (possibly inf) scores
    dead = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    peak = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(peak), peak, 0))
    total = np.sum(e, axis=-1, keepdims=True)
    probs = np.where(dead, 0.0, e / np.where(total == 0, 1, total))
    return np.matmul(probs.astype(np.float32), v)


def _det_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    float_only(ins)
    if x.rank < 2 or x.shape[-1] != x.shape[-2]:
        raise InferError(f"det needs square matrices in the last two axes, got {x}")
    return [TensorType(x.shape[:-2], x.dtype)]


@declare("det", inputs=("x",), infer=_det_infer, no_lowering="MIL has no determinant")
def det(x):
    """determinant of each square matrix in the last two axes"""
    return np.linalg.det(x).astype(np.float32)
