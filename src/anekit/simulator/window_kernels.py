"""The C window kernels (``_native``) behind picking convolutions, the im2col of every other
convolution (the gather writes the windows in the GEMM's layout), max pooling and clamps.

A compiled training step gathers windows with convolutions whose weights only pick inputs
(im2col and the max-pool backward's picks), scatters gradients back with their transposes
(col2im) and pools; numpy walks those as many short strided rows. The C loops do the same
fp32 operations on each element in the same order (see ``_native.c``), so the bits are the
same; these wrappers lay out the shapes (spatial ranks 1 to 3 as 3, the planes merged) and
return None where the module is missing or an argument does not fit, and the caller then
runs its numpy code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import fp16, gemm, pieces

try:  # built by setup.py where a C compiler is found; optional, numpy is the fallback
    from anekit import _native
except ImportError:  # pragma: no cover - depends on the install
    _native = None


SPLIT_MIN = 1 << 17  # output values from which a kernel runs in pieces on two threads
NARROW = 8  # output row width up to which DirectConv runs transposed (2-2.5x faster at 1-4)
PIECES = 4  # a piece the helper holds when the OS takes its CPU away is all the caller waits for
CHANNELS = 24  # output channels per unit of a direct conv split by channel (whole 6- and 8-row blocks)


def _run(call: Any, count: int, size: int) -> list[Any]:
    """``call(lo, hi)`` over [0, count) of the leading axis: in pieces on two threads when
    the output is large and two CPUs are there (every value is computed alike either way)."""
    if size >= SPLIT_MIN and pieces.spare_cpu(gemm.THREADS):
        return pieces.run(call, count, PIECES)
    return [call(0, count)]


def _three(values: Sequence[int], fill: int) -> tuple[int, ...]:
    """Spatial ``values`` of rank 1 to 3 as rank 3: ``fill`` leading (the C loops' innermost
    axis stays the real last one)."""
    return (*(fill,) * (3 - len(values)), *values)


def _float32(*arrays: np.ndarray) -> bool:
    return _native is not None and all(a.dtype == np.float32 for a in arrays)


def gather(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    before: Sequence[int],
    out_sizes: Sequence[int],
) -> np.ndarray | None:
    """[N, C, *K, *O]: ``0 + x`` at each window position of the input padded with zeros
    (``before`` of them leading each spatial axis), as the windows' copy plus the sum's +0;
    None without the C module or when a value read is not finite."""
    if not _float32(x) or x.size == 0:
        return None
    planes = x.reshape(*x.shape[:2], *_three(x.shape[2:], 1))  # a view: a new axis or none
    out = np.empty((*x.shape[:2], *kernel, *out_sizes), np.float32)
    target = out.reshape(*x.shape[:2], *_three(kernel, 1), *_three(out_sizes, 1))
    geometry = (_three(kernel, 1), _three(strides, 1), _three(dilations, 1), _three(before, 0))
    flags = _run(lambda lo, hi: _native.window_gather(planes[lo:hi], target[lo:hi], *geometry),
                 len(x), out.size)  # fmt: skip
    return out if all(flags) else None


def scatter(
    cols: np.ndarray, strides: Sequence[int], dilations: Sequence[int], full: Sequence[int]
) -> tuple[np.ndarray, bool] | None:
    """cols [N, g, C, *K, *D] added tap by tap, in index order, into zeros [N, g, C, *full]
    (tap k of input position i lands at ``k * dilation + i * stride``), and whether every
    value was finite; None without the C module."""
    if not _float32(cols) or cols.size == 0:
        return None
    n = len(full)
    kernel, sizes = cols.shape[3 : 3 + n], cols.shape[3 + n :]
    # [N, g * C, ...]: merging g and C is a view of an [N, C_in, *D] input split by channel
    source = cols.reshape(cols.shape[0], -1, *_three(kernel, 1), *_three(sizes, 1))
    out = np.empty((*cols.shape[:3], *full), np.float32)
    target = out.reshape(*source.shape[:2], *_three(full, 1))
    geometry = (_three(strides, 1), _three(dilations, 1))
    flags = _run(lambda lo, hi: _native.taps_scatter(source[lo:hi], target[lo:hi], *geometry),
                 len(cols), out.size)  # fmt: skip
    return out, all(flags)


def window_max(
    padded: np.ndarray, kernel: Sequence[int], strides: Sequence[int]
) -> np.ndarray | None:
    """[N, C, *O]: numpy's maximum of each window's taps of the (padded) input, the first
    tap first, then the others in index order (pooling's tap-by-tap loop); None without
    the C module or when no window fits (numpy's code raises the error)."""
    if not _float32(padded) or padded.size == 0:
        return None
    sizes = padded.shape[2:]
    out_sizes = [(size - k) // s + 1 for size, k, s in zip(sizes, kernel, strides, strict=True)]
    if any(o < 1 for o in out_sizes):
        return None
    out = np.empty((*padded.shape[:2], *out_sizes), np.float32)
    source = padded.reshape(*padded.shape[:2], *_three(sizes, 1))
    target = out.reshape(*padded.shape[:2], *_three(out_sizes, 1))
    geometry = (_three(kernel, 1), _three(strides, 1))
    _run(lambda lo, hi: _native.window_max(source[lo:hi], target[lo:hi], *geometry),
         len(padded), out.size)  # fmt: skip
    return out


class DirectConv:
    """The 1-D or 2-D convolution of inputs of one shape [N, C, *S] (zeros ``before`` each
    spatial axis and past its end) by ``w`` [C_out, C/groups * prod(K)] without an im2col
    matrix (``_native.conv_rows``): each output summed as the C GEMM sums the im2col
    product, in pieces of output rows on two threads when large. The geometry is worked
    out once; see :func:`direct_conv`."""

    def __init__(
        self,
        w: np.ndarray,
        groups: int,
        kernel: Sequence[int],
        strides: Sequence[int],
        dilations: Sequence[int],
        before: Sequence[int],
        x_shape: Sequence[int],
        out_sizes: Sequence[int],
        rounded: bool = False,
    ):
        self.w = np.ascontiguousarray(w, np.float32)
        self.rounded = rounded  # outputs rounded to fp16 values by the C call that makes them
        self.groups = groups
        self.x_shape = tuple(x_shape)
        self.planes = (*x_shape[:2], *_three(x_shape[2:], 1)[1:])
        self.out_shape = (x_shape[0], w.shape[0], *out_sizes)
        self.target = (*self.out_shape[:2], *_three(out_sizes, 1)[1:])
        self.geometry = tuple(_three(v, fill)[1:] for v, fill in
                              ((kernel, 1), (strides, 1), (dilations, 1), (before, 0)))  # fmt: skip
        if self.planes[3] == 1 and self.target[3] == 1 and self.geometry[0][1] == 1:
            # a 1-D convolution along H ([N, C, H, 1]) is the same memory along W, where
            # the kernel's tiles are 64 outputs wide instead of one
            self.planes = (*self.planes[:2], 1, self.planes[2])
            self.target = (*self.target[:2], 1, self.target[2])
            self.geometry = tuple((b, a) for a, b in self.geometry)
        self.rows = self.target[0] * self.target[2]
        self.work = math.prod(self.out_shape) * self.w.shape[1] // 16  # vector FMAs
        if groups == self.planes[1] == self.target[1]:
            # depthwise: taps on rows outside x are skipped (finite weights), so a feature
            # map a few rows high (PP-OCR's 5x5 over 2 rows: 2 of 5 rows inside) is less
            # work than its shape says, and split in pieces it ran slower (98 -> 144 us)
            self.work = self.work * _rows_inside(self.planes[2], self.target[2], *(
                v[0] for v in self.geometry)) // (self.target[2] * self.geometry[0][0])  # fmt: skip
        # rows a few values wide, one group: conv_rows' vectors along the output channels, over
        # the transposed weights (kept instead of w), with the same bits
        self.narrow = groups == 1 and self.target[3] <= NARROW
        if self.narrow:
            self.w = np.ascontiguousarray(self.w.T)
        # conv_rows' arguments after x, w and out for one call over every row and channel
        self.whole = (self.groups, *self.geometry, 0, self.rows, 0, self.out_shape[1],
                      self.narrow, self.rounded)  # fmt: skip

    def __call__(self, x: np.ndarray) -> np.ndarray:
        planes = x if x.flags.c_contiguous else np.ascontiguousarray(x)
        if planes.shape != self.planes:
            planes = planes.reshape(self.planes)
        out = np.empty(self.out_shape, np.float32)
        target = out if self.target == self.out_shape else out.reshape(self.target)
        if self.work < SPLIT_MIN:  # one call (a streaming model's small convolutions)
            _native.conv_rows(planes, self.w, target, *self.whole)
            return out
        args = (planes, self.w, target, self.groups, *self.geometry)
        c_out, rows, narrow, rounded = self.out_shape[1], self.rows, self.narrow, self.rounded
        if rows >= PIECES:
            _run(lambda lo, hi: _native.conv_rows(*args, lo, hi, 0, c_out, narrow, rounded),
                 rows, self.work)  # fmt: skip
        else:  # few output rows (a 1-D conv over one sequence): pieces of output channels
            _run(lambda lo, hi: _native.conv_rows(*args, 0, rows, lo * CHANNELS,
                                                  min(hi * CHANNELS, c_out), narrow, rounded),
                 -(-c_out // CHANNELS), self.work)  # fmt: skip
        return out


def _rows_inside(h: int, oh: int, kh: int, sy: int, dy: int, py: int) -> int:
    """How many (output row, kernel row) pairs of a convolution read a row of x."""
    taps = np.arange(oh)[:, None] * sy + np.arange(kh)[None, :] * dy - py
    return int(np.count_nonzero((taps >= 0) & (taps < h)))


def direct_available() -> bool:
    """True when :class:`DirectConv` runs: the C module has it and the CPU has AVX-512F
    (read per call: tests switch the module off)."""
    return _native is not None and hasattr(_native, "conv_rows") and gemm.ACCELERATED


def direct_conv(
    x: np.ndarray,
    w: np.ndarray,
    groups: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    before: Sequence[int],
    out_sizes: Sequence[int],
) -> np.ndarray | None:
    """:class:`DirectConv` of ``x``: [N, C_out, *O]; None without the C module or AVX-512F,
    for other ranks and dtypes."""
    if not direct_available() or len(kernel) not in (1, 2) or x.dtype != np.float32 or x.size == 0:
        return None
    return DirectConv(w, groups, kernel, strides, dilations, before, x.shape, out_sizes)(x)


def clamp(x: np.ndarray, lo: float, hi: float) -> np.ndarray | None:
    """``numpy.minimum(numpy.maximum(x, lo), hi)`` of a C-contiguous float32 array and two
    float32 bounds that are not NaN (their NaN payloads would not survive the call); None
    otherwise or without the C module."""
    if type(x) is not np.ndarray or not _float32(x) or not x.flags.c_contiguous:
        return None
    if math.isnan(lo) or math.isnan(hi):
        return None
    out = np.empty_like(x)
    source, target = x.reshape(-1), out.reshape(-1)
    if x.size < SPLIT_MIN:  # one piece (what _run does), without its closure
        _native.clamp(source, target, lo, hi)
        return out
    _run(lambda a, b: _native.clamp(source[a:b], target[a:b], lo, hi), x.size, x.size)
    return out


def contiguous(x: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``x`` (numpy's copy, which lets go of the GIL), in pieces
    along its first axis longer than 1 when large (the same values either way)."""
    if x.dtype == np.float32 and x.ndim - x.shape.count(1) == 2:
        return fp16.contiguous(x)  # a transpose: the C extension's tiled copy (3-10x numpy's)
    axis = next((i for i, d in enumerate(x.shape) if d > 1), None)
    if axis is None or x.size < SPLIT_MIN or not pieces.spare_cpu(gemm.THREADS):
        return np.ascontiguousarray(x)
    out = np.empty(x.shape, x.dtype)
    lead = (slice(None),) * axis

    def copy(lo: int, hi: int) -> None:
        np.copyto(out[(*lead, slice(lo, hi))], x[(*lead, slice(lo, hi))])

    pieces.run(copy, x.shape[axis], PIECES)
    return out
