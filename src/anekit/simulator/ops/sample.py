"""MIL ``resample`` (iOS 15): an image sampled at per-output coordinates (grid sampling).

``x`` is ``[B, C, H, W]`` and ``coordinates`` ``[B, H2, W2, 2]`` holding ``(x, y)`` = ``(w, h)``
pairs; the result is ``[B, C, H2, W2]``. A coordinate becomes a source position ``p`` along an
axis of size ``d`` by ``coordinates_mode``:

- ``unnormalized``: ``p = c`` (pixel indices; ``align_corners`` plays no part),
- ``normalized_minus_one_to_one``: ``p = (c + 1) / 2 * (d - 1)`` with ``align_corners``, else
  ``((c + 1) * d - 1) / 2`` (the extremes are the corner pixels' centres, or their outer edges),
- ``normalized_zero_to_one``: ``p = c * (d - 1)``, else ``c * d - 0.5``.

``bilinear`` weighs the four pixels around ``p``, ``nearest`` takes ``rint(p)`` (ties to even,
as torch's ``nearbyint``). Pixels outside the image come from the padded image Apple's
definition describes: ``constant`` (``padding_value``), ``border`` (edge replicated),
``reflection`` (mirrored about the edge pixels' centres: ``|1 2 3| -> 3 2 |1 2 3| 2 1``) and
``symmetric`` (mirrored about the outer edges: ``2 1 |1 2 3| 3 2``). These semantics reproduce
coremltools' reference outputs for the op (its iOS 15 ``TestResample``), and torch's
``grid_sample`` (coremltools converts it to ``resample``, reflection without align_corners
becoming ``symmetric``). A NaN or infinite coordinate gives NaN, except that with ``constant``
or ``border`` padding an infinite one lies outside the image like any far coordinate.
Arithmetic is float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..registry import Signature, SimOp, op
from ._util import F32, as_bool, as_float, as_str, checked_shape

SAMPLING = ("bilinear", "nearest")
PADDING = ("constant", "border", "reflection", "symmetric")
COORDINATES = ("unnormalized", "normalized_minus_one_to_one", "normalized_zero_to_one")
# coordinates dtypes per opset: iOS 16 added fp16, iOS 17 the small integers
_COORD_DTYPES = {15: {"fp32", "int32"}, 16: {"fp32", "int32", "fp16"}}
_COORD_DTYPES_17 = {"fp32", "fp16", "int32", "int16", "uint16", "int8", "uint8"}


def _positions(c: np.ndarray, size: int, mode: str, align: bool) -> np.ndarray:
    """Source positions (float32) along an axis of ``size`` pixels."""
    one, half, d = F32(1), F32(0.5), F32(size)
    if mode == "unnormalized":
        return c
    if mode == "normalized_minus_one_to_one":
        return (c + one) * half * (d - one) if align else ((c + one) * d - one) * half
    return c * (d - one) if align else c * d - half


def _wrap(p: np.ndarray, size: int, padding: str) -> np.ndarray:
    """Positions brought where integer taps cannot overflow. Reflecting modes mirror them into
    the image, continuously (before ``nearest`` rounds, as Apple, torch and onnxruntime do:
    coremltools' reference output for ``symmetric`` depends on it at a tie); bilinear sampling
    of the padded image is unchanged by this (its interpolant is symmetric about the mirrors).
    The other modes clip positions to two pixels beyond the image (all further look alike)."""
    with np.errstate(invalid="ignore"):
        if padding in ("reflection", "symmetric"):
            if padding == "reflection" and size == 1:
                return np.where(np.isfinite(p), F32(0), np.nan).astype(F32)
            # mirrors at lo and hi: the pixel centres 0, d-1 or the outer edges -1/2, d-1/2
            lo = F32(0) if padding == "reflection" else F32(-0.5)
            span = F32(size - 1) if padding == "reflection" else F32(size)
            u = p - lo
            u = u - np.floor(u / (2 * span)) * (2 * span)  # one period: [0, 2 span)
            u = np.where(u > span, 2 * span - u, u)
            return np.where(np.isfinite(p), u + lo, np.nan).astype(F32)
        return np.clip(p, F32(-2), F32(size + 1))  # NaN stays NaN


def _pad_index(idx: np.ndarray, size: int, padding: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Integer taps mapped into the image; for ``constant``, also which taps are inside."""
    if padding == "constant":
        inside = (idx >= 0) & (idx < size)
        return np.clip(idx, 0, size - 1), inside
    if padding == "border" or size == 1:
        return np.clip(idx, 0, size - 1), None
    if padding == "reflection":  # period 2(d-1): 0 1 .. d-1 d-2 .. 1
        m = np.mod(idx, 2 * (size - 1))
        return np.where(m >= size, 2 * (size - 1) - m, m), None
    m = np.mod(idx, 2 * size)  # symmetric, period 2d: 0 1 .. d-1 d-1 .. 0
    return np.where(m >= size, 2 * size - 1 - m, m), None


def resample(
    x: np.ndarray,
    coordinates: np.ndarray,
    sampling_mode: Any,
    padding_mode: Any,
    padding_value: Any,
    coordinates_mode: Any,
    align_corners: Any,
) -> np.ndarray:
    sampling, padding = as_str(sampling_mode), as_str(padding_mode)
    cmode, align = as_str(coordinates_mode), as_bool(align_corners)
    _check_modes(sampling, padding, cmode)
    if x.ndim != 4 or coordinates.ndim != 4:
        raise ValueError(
            f"x and coordinates must be rank 4, got {list(x.shape)} and {list(coordinates.shape)}"
        )
    b, c, h, w = x.shape
    if coordinates.shape[0] != b or coordinates.shape[3] != 2:
        raise ValueError(
            f"coordinates must be [{b}, H2, W2, 2] for x {list(x.shape)}, "
            f"got {list(coordinates.shape)}"
        )
    _, h2, w2, _ = coordinates.shape
    checked_shape((b, c, h2, w2), "resampled")
    if b * c * h2 * w2 == 0:
        return np.zeros((b, c, h2, w2), F32)
    if h == 0 or w == 0:
        raise ValueError(f"cannot sample an empty image {list(x.shape)}")
    xf = np.asarray(x, dtype=F32)
    coords = np.asarray(coordinates).astype(F32)
    fill = F32(as_float(padding_value))
    batch = np.arange(b).reshape(b, 1, 1)
    axes = []  # per axis (y, then x): [(index, inside, weight), ...] over the taps
    bad = np.zeros((b, h2, w2), dtype=bool)
    for size, column in ((h, 1), (w, 0)):
        p = _wrap(_positions(coords[..., column], size, cmode, align), size, padding)
        nan = np.isnan(p)
        bad |= nan
        p = np.where(nan, F32(0), p)
        if sampling == "nearest":
            taps = [(np.rint(p).astype(np.int64), None)]
        else:
            base = np.floor(p)
            t = (p - base).astype(F32)
            base = base.astype(np.int64)
            taps = [(base, F32(1) - t), (base + 1, t)]
        axes.append([(*_pad_index(i, size, padding), wt) for i, wt in taps])
    out = np.zeros((b, h2, w2, c), dtype=F32)
    for iy, in_y, wy in axes[0]:
        for ix, in_x, wx in axes[1]:
            picked = xf[batch, :, iy, ix]  # [B, H2, W2, C]
            if in_y is not None:
                picked = np.where((in_y & in_x)[..., None], picked, fill)
            if wy is None:
                out += picked
            else:
                out += picked * (wy * wx)[..., None]
    if bad.any():
        out[bad] = np.nan
    return np.moveaxis(out, -1, 1)


def _check_modes(sampling: str, padding: str, cmode: str) -> None:
    for what, value, allowed in (
        ("sampling_mode", sampling, SAMPLING),
        ("padding_mode", padding, PADDING),
        ("coordinates_mode", cmode, COORDINATES),
    ):
        if value not in allowed:
            raise ValueError(f"unknown {what} {value!r} (one of {', '.join(allowed)})")


def _check(sig: Signature, opset: int) -> None:
    consts = sig.consts
    _check_modes(
        *(as_str(consts[k]) for k in ("sampling_mode", "padding_mode", "coordinates_mode"))
    )
    dtype = sig.dtypes.get("coordinates")
    allowed = _COORD_DTYPES.get(opset, _COORD_DTYPES_17 if opset >= 17 else _COORD_DTYPES[15])
    if dtype is not None and dtype not in allowed:
        raise ValueError(f"resample coordinates of type {dtype} need iOS 17 or later (or "
                         f"iOS 16 for fp16); this program is iOS {opset}")  # fmt: skip


OPS: tuple[SimOp, ...] = (
    op("resample", "x:T coordinates:U sampling_mode!:string padding_mode!:string "
       "padding_value!:T coordinates_mode!:string align_corners!:bool", "T", resample,
       check=_check, T="fp16|fp32", U="fp16|fp32|int8|uint8|int16|uint16|int32"),
)  # fmt: skip
