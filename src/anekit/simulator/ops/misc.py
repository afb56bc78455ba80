"""Misc MIL ops: cast, select, identity, and scaled_dot_product_attention (iOS 18)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..registry import Signature, SimOp, op
from ..values import STORAGE
from ._util import F32, as_str
from .activation import softmax

CAST_DTYPES = ("fp16", "fp32", "int8", "uint8", "int16", "uint16", "int32", "bool")


def cast(x: np.ndarray, dtype: Any) -> np.ndarray:
    target = as_str(dtype)
    if target not in CAST_DTYPES:
        raise ValueError(f"dtype {target!r} is not one of {', '.join(CAST_DTYPES)}")
    storage = STORAGE[target]
    if x.dtype.kind == "f" and storage.kind in "iu":
        # float -> int truncates toward zero (numpy's cast, as coremltools' value inference);
        # NaN and out-of-range values saturate instead of being undefined.
        info = np.iinfo(storage)  # (clipped in float64: int32's max is not a float32)
        wide = np.clip(np.trunc(x.astype(np.float64)), info.min, info.max)
        return np.nan_to_num(wide, nan=0).astype(storage)
    return x.astype(storage)


def _cast_outputs(sig: Signature) -> tuple[str, ...]:
    target = as_str(sig.consts["dtype"])
    if target not in CAST_DTYPES:
        raise ValueError(f"dtype {target!r} is not one of {', '.join(CAST_DTYPES)}")
    return (target,)


def select(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(cond, a, b)


def identity(x: np.ndarray) -> np.ndarray:
    return x


def scaled_dot_product_attention(
    query: np.ndarray, key: np.ndarray, value: np.ndarray, attn_mask: np.ndarray | None = None
) -> np.ndarray:
    if not query.ndim == key.ndim == value.ndim >= 3:
        raise ValueError("query, key and value must have one rank, 3 or more")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"query {list(query.shape)}, key {list(key.shape)} and value {list(value.shape)} "
            "do not fit together"
        )
    scores = np.matmul(query, np.swapaxes(key, -1, -2)) / F32(np.sqrt(query.shape[-1]))
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            scores = np.where(attn_mask, scores, F32(-np.inf))
        else:
            scores = scores + attn_mask
    return np.matmul(softmax(scores, -1), value)


OPS: tuple[SimOp, ...] = (
    op("cast", "x:T dtype!:string", _cast_outputs, cast,
       T="fp16|fp32|int8|uint8|int16|uint16|int32|bool"),
    op("select", "cond:bool a:T b:T", "T", select, exact=True, T="fp16|fp32|int32|bool"),
    op("identity", "x:T", "T", identity, exact=True,
       T="fp16|fp32|int8|int16|int32|uint8|uint16|bool"),
    op("scaled_dot_product_attention", "query:T key:T value:T attn_mask?:M", "T",
       scaled_dot_product_attention, T="fp16|fp32", M="bool|fp16|fp32"),
)  # fmt: skip
