"""Pooling MIL ops: avg_pool, max_pool, l2_pool over 1 to 3 spatial dimensions (iOS 15-18 defs).

Output sizes follow coremltools' ``spatial_dimensions_out_shape``, including its ceil-mode
rule; padding follows ``aggregated_pad`` (as conv). An average's divisor counts the window
positions inside the padded input (or only inside the input with
``exclude_padding_from_average``); positions a ceil-mode window hangs past the padding are
never counted, as in PyTorch, whose ``ceil_mode`` the definition follows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import window_kernels
from ..registry import FLOAT, Signature, SimOp, op
from ._util import F32, as_bool, as_ints, as_str, checked_shape
from .conv import PAD_TYPES, pads, windows


def _geometry(
    x: np.ndarray, kernel_sizes: Any, strides: Any, pad_type: Any, pad: Any, ceil_mode: Any
) -> tuple[tuple[int, ...], tuple[int, ...], list[tuple[int, int]], list[int]]:
    """(kernel, strides, (before, after) padding, extra positions past the padding)."""
    n = x.ndim - 2
    if not 1 <= n <= 3:
        raise ValueError(f"x must be rank 3 to 5 [N, C, *D], not {list(x.shape)}")
    kernel = as_ints(kernel_sizes)
    st = as_ints(strides) if strides is not None else (1,) * n
    if len(kernel) != n or len(st) != n:
        raise ValueError(f"kernel_sizes and strides need {n} values (x's spatial rank)")
    if any(v < 1 for v in (*kernel, *st)):
        raise ValueError(f"kernel_sizes {list(kernel)} and strides {list(st)} must be positive")
    padding = pads(as_str(pad_type).lower(), x.shape[2:], kernel, st, (1,) * n, pad)
    extra = []
    for size, k, s, (a, b) in zip(x.shape[2:], kernel, st, padding, strict=True):
        total = a + b
        if as_bool(ceil_mode):
            out = (size + total - k + s - 1) // s + 1
            if (out - 1) * s >= size + total / 2 and total > 0:
                out -= 1
        else:
            out = (size + total - k) // s + 1
        if out < 1:
            raise ValueError(f"a window of {k} does not fit a padded size of {size + total}")
        extra.append(max(0, (out - 1) * s + k - (size + total)))
    return kernel, st, padding, extra


def _pool(
    x: np.ndarray,
    geometry: tuple[tuple[int, ...], tuple[int, ...], list[tuple[int, int]], list[int]],
    fill: float,
    reduce: Callable[..., np.ndarray],
) -> np.ndarray:
    kernel, st, padding, extra = geometry
    n = len(kernel)
    widths = [(0, 0), (0, 0)] + [(a, b + e) for (a, b), e in zip(padding, extra, strict=True)]
    checked_shape([d + a + b for d, (a, b) in zip(x.shape, widths, strict=True)], "padded input")
    if any(w != (0, 0) for w in widths):
        padded = np.pad(x, widths, constant_values=np.asarray(fill, dtype=x.dtype))
    else:
        padded = x  # windows() only reads it: no copy
    if reduce is _window_max:
        out = window_kernels.window_max(padded, kernel, st)
        if out is not None:
            return out
    view = windows(padded, kernel, st, (1,) * n)
    return reduce(view, axis=tuple(range(-n, 0)))


def _counts(
    x: np.ndarray,
    geometry: tuple[tuple[int, ...], tuple[int, ...], list[tuple[int, int]], list[int]],
    exclude_padding: bool,
) -> np.ndarray:
    """How many positions of each window are averaged over (broadcasts against the output)."""
    kernel, st, padding, extra = geometry
    n = len(kernel)
    per_dim = []
    for size, k, s, (a, b), e in zip(x.shape[2:], kernel, st, padding, extra, strict=True):
        inside = np.zeros(size + a + b + e, dtype=F32)
        if exclude_padding:
            inside[a : a + size] = 1
        else:
            inside[: size + a + b] = 1
        running = np.concatenate([[0.0], np.cumsum(inside)])
        starts = np.arange(0, len(inside) - k + 1, s)
        per_dim.append((running[starts + k] - running[starts]).astype(F32))
    counts = per_dim[0]
    for c in per_dim[1:]:
        counts = np.multiply.outer(counts, c)
    return counts.reshape((1, 1) + counts.shape[:n])


def avg_pool(
    x: np.ndarray,
    kernel_sizes: Any,
    pad_type: Any,
    strides: Any = None,
    pad: Any = None,
    ceil_mode: Any = False,
    exclude_padding_from_average: Any = False,
) -> np.ndarray:
    geometry = _geometry(x, kernel_sizes, strides, pad_type, pad, ceil_mode)
    total = _pool(x, geometry, 0.0, np.sum)
    return total / _counts(x, geometry, as_bool(exclude_padding_from_average))


def max_pool(
    x: np.ndarray,
    kernel_sizes: Any,
    pad_type: Any,
    strides: Any = None,
    pad: Any = None,
    ceil_mode: Any = False,
) -> np.ndarray:
    geometry = _geometry(x, kernel_sizes, strides, pad_type, pad, ceil_mode)
    return _pool(x, geometry, -np.inf, _window_max)


def _window_max(view: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    """The maximum over each window of ``view`` [N, C, *O, *K] (``axis`` the K axes), one
    elementwise maximum per kernel position: numpy's reduction over a strided window view
    runs a short inner loop per window (10x slower). A maximum is exact in any order, and
    NaN propagates either way."""
    n = len(axis)
    taps = view.shape[-n:]
    out = np.array(view[(Ellipsis, *([0] * n))])
    for tap in np.ndindex(*taps):
        if any(tap):
            np.maximum(out, view[(Ellipsis, *tap)], out=out)
    return out


def l2_pool(
    x: np.ndarray,
    kernel_sizes: Any,
    pad_type: Any,
    strides: Any = None,
    pad: Any = None,
    ceil_mode: Any = False,
) -> np.ndarray:
    if x.ndim > 4:
        raise ValueError("l2_pool supports 1-D and 2-D pooling only")
    geometry = _geometry(x, kernel_sizes, strides, pad_type, pad, ceil_mode)
    return np.sqrt(_pool(x * x, geometry, 0.0, np.sum))


def _check_pool(sig: Signature, opset: int) -> None:
    pad_type = as_str(sig.consts["pad_type"]).lower()
    if pad_type not in PAD_TYPES:
        raise ValueError(f"pad_type {pad_type!r} is not one of {', '.join(PAD_TYPES)}")
    if pad_type == "same_lower" and opset < 16:
        raise ValueError("pad_type same_lower needs iOS 16 or later")
    if as_bool(sig.consts.get("ceil_mode", False)):
        if pad_type == "same":
            raise ValueError("ceil_mode must be false when pad_type is same")
        pad = sig.consts.get("pad")
        values = as_ints(pad) if pad is not None and pad_type == "custom" else ()
        if any(values[i] != values[i + 1] for i in range(0, len(values) - 1, 2)):
            raise ValueError("padding must be symmetric when ceil_mode is true")
        if len(as_ints(sig.consts["kernel_sizes"])) > 2:
            raise ValueError("ceil_mode is supported for 1-D and 2-D pooling only")


_POOL = "x:T kernel_sizes!:int32 strides?!:int32 pad_type!:string pad?!:int32 ceil_mode?!:bool"

OPS: tuple[SimOp, ...] = (
    op("avg_pool", "exclude_padding_from_average?!:bool " + _POOL, "T", avg_pool,
       check=_check_pool, T=FLOAT),
    op("max_pool", _POOL, "T", max_pool, check=_check_pool, exact=True, T=FLOAT),
    op("l2_pool", _POOL, "T", l2_pool, check=_check_pool, T=FLOAT),
)  # fmt: skip
