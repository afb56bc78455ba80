"""Shape MIL ops: reshape, transpose, squeeze/expand_dims, slicing, reversing, space/depth moves.

They only move values, so their fp16 results are never rounded (``exact``). Reshape's ``0``
follows the opset: iOS 15/16 copy the same dimension of ``x`` (and need ``len(shape) ==
rank``), iOS 17+ align ``0``s from the right and use 1 past x's rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import window_kernels
from ..registry import ANY, SimOp, op
from ._util import as_bools, as_int, as_ints, axes_of, axis_of

_INT = "int8|int16|int32"
_WIDE = "fp16|fp32|int8|int16|int32|uint8|uint16|bool"


def _opset(dtypes: Mapping[str, str], opset: int) -> dict[str, Any]:
    return {"opset": opset}


def reshape_target(x_shape: tuple[int, ...], shape: tuple[int, ...], opset: int) -> tuple[int, ...]:
    """The output shape of reshape (0 and -1 resolved)."""
    target = list(shape)
    if 0 in target:
        if opset >= 17:
            for i in range(1, len(target) + 1):
                if target[-i] == 0:
                    target[-i] = x_shape[-i] if i <= len(x_shape) else 1
        else:
            if len(target) != len(x_shape):
                raise ValueError(
                    f"shape {list(shape)} has a 0, so it needs x's rank {len(x_shape)}"
                )
            target = [x_shape[i] if d == 0 else d for i, d in enumerate(target)]
    size = math.prod(x_shape)
    if target.count(-1) > 1:
        raise ValueError(f"shape {list(shape)} has more than one -1")
    if any(d < -1 for d in target):
        raise ValueError(f"shape {list(shape)} has a negative size")
    if -1 in target:
        rest = math.prod(d for d in target if d != -1)
        if rest == 0 or size % rest:
            raise ValueError(f"cannot reshape {list(x_shape)} into {list(shape)}")
        target[target.index(-1)] = size // rest
    if math.prod(target) != size:
        raise ValueError(f"cannot reshape {list(x_shape)} ({size} elements) into {list(shape)}")
    return tuple(target)


def reshape(x: np.ndarray, shape: np.ndarray, opset: int = 18) -> np.ndarray:
    target = reshape_target(x.shape, as_ints(shape), opset)
    if x.flags.c_contiguous:
        return x.reshape(target)
    try:
        return x.reshape(target, copy=False)  # a view where the layout allows one
    except TypeError:  # pragma: no cover - numpy before 2.1 has no copy argument
        return x.reshape(target)
    except ValueError:  # a transposed layout: copied (in pieces on two threads when large)
        return window_kernels.contiguous(x).reshape(target)


def transpose(x: np.ndarray, perm: np.ndarray) -> np.ndarray:
    order = as_ints(perm)
    if len(order) != x.ndim:
        raise ValueError(f"perm {list(order)} does not match x's rank {x.ndim}")
    return np.transpose(x, axes_of(order, x.ndim, "perm"))


def prepare_transpose(known: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> Any:
    """transpose with its perm worked out once (prepared.py), for an x of the rank it fits."""
    if set(shapes) != {"x"} or "perm" not in known:
        return None
    rank = len(shapes["x"])
    try:
        order = as_ints(known["perm"])
        axes = axes_of(order, rank, "perm") if len(order) == rank else None
    except ValueError:
        return None  # the general kernel raises it, naming the op
    if axes is None:
        return None

    def run(x: np.ndarray) -> np.ndarray:
        return np.transpose(x, axes) if x.ndim == rank else transpose(x, known["perm"])

    return run


transpose.prepare = prepare_transpose  # type: ignore[attr-defined]  # see prepared.py


def squeeze(x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    if axes is None:
        return x.reshape(tuple(d for d in x.shape if d != 1))
    chosen = axes_of(as_ints(axes), x.ndim)
    # Like PyTorch: axes whose size is not 1 are left alone.
    return x.reshape(tuple(d for i, d in enumerate(x.shape) if not (i in chosen and d == 1)))


def expand_dims(x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    given = as_ints(axes)
    out_rank = x.ndim + len(given)
    positions = sorted(axes_of(given, out_rank))
    shape = list(x.shape)
    for p in positions:
        shape.insert(p, 1)
    return x.reshape(shape)


def reverse(x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    chosen = range(x.ndim) if axes is None else axes_of(as_ints(axes), x.ndim)
    return np.flip(x, axis=tuple(chosen)) if x.ndim else x


def reverse_sequence(
    x: np.ndarray, lengths: np.ndarray, seq_axis: Any = 0, batch_axis: Any = 0
) -> np.ndarray:
    s = axis_of(as_int(seq_axis), x.ndim, "seq_axis")
    b = axis_of(as_int(batch_axis), x.ndim, "batch_axis")
    counts = as_ints(lengths)
    if len(counts) != x.shape[b]:
        raise ValueError(f"lengths has {len(counts)} values; x has {x.shape[b]} batches")
    out = x.copy()
    for i, n in enumerate(counts):
        if not 0 <= n <= x.shape[s]:
            raise ValueError(f"length {n} is outside [0, {x.shape[s]}]")
        index: list[Any] = [slice(None)] * x.ndim
        index[b] = i
        index[s] = slice(0, n)
        source = out[tuple(index)]
        out[tuple(index)] = np.flip(source, axis=s - (1 if b < s else 0))
    return out


def _masks(value: Any, rank: int, what: str) -> tuple[bool, ...]:
    if value is None:
        return (False,) * rank
    masks = as_bools(value)
    if len(masks) != rank:
        raise ValueError(f"{what} has {len(masks)} values; x has rank {rank}")
    return masks


def _slice_index(
    x: np.ndarray,
    begin: np.ndarray,
    end: np.ndarray,
    stride: np.ndarray | None = None,
    begin_mask: np.ndarray | None = None,
    end_mask: np.ndarray | None = None,
    squeeze_mask: np.ndarray | None = None,
) -> tuple[Any, ...]:
    """The numpy index of a slice_by_index (coremltools' solve_slice_by_index_slice)."""
    rank = x.ndim
    b, e = list(as_ints(begin)), list(as_ints(end))
    s = list(as_ints(stride)) if stride is not None else [1] * rank
    if not len(b) == len(e) == len(s) == rank:
        raise ValueError(f"begin, end and stride need {rank} values (x's rank)")
    if 0 in s:
        raise ValueError("stride cannot be 0")
    bm = _masks(begin_mask, rank, "begin_mask")
    em = _masks(end_mask, rank, "end_mask")
    sm = _masks(squeeze_mask, rank, "squeeze_mask")
    index: list[Any] = []
    for i in range(rank):
        if sm[i]:  # pure index at begin (coremltools: slice(begin, None, INT32_MAX))
            position = b[i] + x.shape[i] if b[i] < 0 else b[i]
            if not 0 <= position < x.shape[i]:
                raise ValueError(f"squeezed index {b[i]} is out of range for size {x.shape[i]}")
            index.append(position)
        else:
            index.append(slice(None if bm[i] else b[i], None if em[i] else e[i], s[i]))
    return tuple(index)


def slice_by_index(
    x: np.ndarray,
    begin: np.ndarray,
    end: np.ndarray,
    stride: np.ndarray | None = None,
    begin_mask: np.ndarray | None = None,
    end_mask: np.ndarray | None = None,
    squeeze_mask: np.ndarray | None = None,
) -> np.ndarray:
    return x[_slice_index(x, begin, end, stride, begin_mask, end_mask, squeeze_mask)]


def slice_update(
    x: np.ndarray,
    update: np.ndarray,
    begin: np.ndarray,
    end: np.ndarray,
    stride: np.ndarray | None = None,
    begin_mask: np.ndarray | None = None,
    end_mask: np.ndarray | None = None,
    squeeze_mask: np.ndarray | None = None,
) -> np.ndarray:
    index = _slice_index(x, begin, end, stride, begin_mask, end_mask, squeeze_mask)
    out = x.copy()
    if out[index].shape != update.shape:
        raise ValueError(
            f"update has shape {list(update.shape)}, the slice has {list(out[index].shape)}"
        )
    out[index] = update
    return out


def slice_by_size(x: np.ndarray, begin: np.ndarray, size: np.ndarray) -> np.ndarray:
    return x[_size_index(x, begin, size)]


def _size_index(x: np.ndarray, begin: np.ndarray, size: np.ndarray) -> tuple[Any, ...]:
    """The numpy index of a slice_by_size."""
    b, n = as_ints(begin), as_ints(size)
    if not len(b) == len(n) == x.ndim:
        raise ValueError(f"begin and size need {x.ndim} values (x's rank)")
    index = []
    for dim, start, count in zip(x.shape, b, n, strict=True):
        start = start + dim if start < 0 else start
        stop = dim if count == -1 else start + count
        if not 0 <= start <= dim or count < -1 or stop > dim:
            raise ValueError(f"slice [{start}, {stop}) is outside a dimension of size {dim}")
        index.append(slice(start, stop))
    return tuple(index)


# the index a slice takes depends on x's shape alone: movement.static_views works it out
# once at load for a static shape
slice_by_index.index_of = _slice_index  # type: ignore[attr-defined]
slice_by_size.index_of = _size_index  # type: ignore[attr-defined]


def _block(x: np.ndarray, block_size: Any, name: str) -> int:
    if x.ndim != 4:
        raise ValueError(f"x must be rank 4 [N, C, H, W], not {list(x.shape)}")
    bs = as_int(block_size)
    if bs < 1:
        raise ValueError(f"{name} must be positive, not {bs}")
    return bs


def depth_to_space(x: np.ndarray, block_size: Any) -> np.ndarray:
    # TensorFlow's DCR order (depth_to_space), as the NN backend's DEPTH_TO_SPACE mode.
    bs = _block(x, block_size, "block_size")
    n, c, h, w = x.shape
    if c % (bs * bs):
        raise ValueError(f"channels {c} are not divisible by block_size^2 = {bs * bs}")
    y = x.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (bs * bs), h * bs, w * bs)


def space_to_depth(x: np.ndarray, block_size: Any) -> np.ndarray:
    bs = _block(x, block_size, "block_size")
    n, c, h, w = x.shape
    if h % bs or w % bs:
        raise ValueError(f"spatial size {h}x{w} is not divisible by block_size {bs}")
    y = x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * bs * bs, h // bs, w // bs)


def pixel_shuffle(x: np.ndarray, upscale_factor: Any) -> np.ndarray:
    f = _block(x, upscale_factor, "upscale_factor")
    n, c, h, w = x.shape
    if c % (f * f):
        raise ValueError(f"channels {c} are not divisible by upscale_factor^2 = {f * f}")
    y = x.reshape(n, c // (f * f), f, f, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (f * f), h * f, w * f)


def pixel_unshuffle(x: np.ndarray, downscale_factor: Any) -> np.ndarray:
    f = _block(x, downscale_factor, "downscale_factor")
    n, c, h, w = x.shape
    if h % f or w % f:
        raise ValueError(f"spatial size {h}x{w} is not divisible by downscale_factor {f}")
    y = x.reshape(n, c, h // f, f, w // f, f).transpose(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * f * f, h // f, w // f)


def space_to_batch(x: np.ndarray, block_shape: np.ndarray, paddings: np.ndarray) -> np.ndarray:
    if x.ndim != 4:
        raise ValueError(f"x must be rank 4 [N, C, H, W], not {list(x.shape)}")
    bh, bw = as_ints(block_shape)
    (pt, pb), (pl, pr) = np.asarray(paddings).reshape(2, 2).tolist()
    y = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c, h, w = y.shape
    if bh < 1 or bw < 1 or h % bh or w % bw:
        raise ValueError(f"padded size {h}x{w} is not divisible by block_shape {[bh, bw]}")
    y = y.reshape(n, c, h // bh, bh, w // bw, bw).transpose(3, 5, 0, 1, 2, 4)
    return y.reshape(n * bh * bw, c, h // bh, w // bw)


def batch_to_space(x: np.ndarray, block_shape: np.ndarray, crops: np.ndarray) -> np.ndarray:
    if x.ndim != 4:
        raise ValueError(f"x must be rank 4 [N, C, H, W], not {list(x.shape)}")
    bh, bw = as_ints(block_shape)
    (ct, cb), (cl, cr) = np.asarray(crops).reshape(2, 2).tolist()
    n, c, h, w = x.shape
    if bh < 1 or bw < 1 or n % (bh * bw):
        raise ValueError(f"batch {n} is not divisible by block_shape {[bh, bw]}")
    y = x.reshape(bh, bw, n // (bh * bw), c, h, w).transpose(2, 3, 4, 0, 5, 1)
    y = y.reshape(n // (bh * bw), c, h * bh, w * bw)
    return y[:, :, ct : h * bh - cb, cl : w * bw - cr]


def sliding_windows(x: np.ndarray, axis: Any, size: Any, stride: Any = 1) -> np.ndarray:
    ax = axis_of(as_int(axis), x.ndim)
    n, s = as_int(size), as_int(stride)
    if n < 1 or s < 1 or n > x.shape[ax]:
        raise ValueError(f"window size {n} / stride {s} do not fit dimension {x.shape[ax]}")
    view = np.lib.stride_tricks.sliding_window_view(x, n, axis=ax)  # [..., windows, ..., n]
    view = np.moveaxis(view, -1, ax + 1)[(slice(None),) * ax + (slice(None, None, s),)]
    return view


def flatten2d(x: np.ndarray, axis: Any = 1) -> np.ndarray:
    a = as_int(axis)
    a = a + x.ndim if a < 0 else a
    if not 0 <= a <= x.ndim:
        raise ValueError(f"axis {as_int(axis)} is out of range for rank {x.ndim}")
    return x.reshape(int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:])))


def shape(x: np.ndarray) -> np.ndarray:
    return np.array(x.shape, dtype=np.int32)


def reshape_like(
    x: np.ndarray,
    ref_tensors: tuple[np.ndarray, ...],
    begins: tuple[Any, ...],
    ends: tuple[Any, ...],
    end_masks: tuple[Any, ...],
) -> np.ndarray:
    if not len(ref_tensors) == len(begins) == len(ends) == len(end_masks):
        raise ValueError("ref_tensors, begins, ends and end_masks must have the same length")
    target: list[int] = []
    for ref, b, e, m in zip(ref_tensors, begins, ends, end_masks, strict=True):
        dims = ref.shape
        target += dims[as_int(b) :] if bool(np.asarray(m)) else dims[as_int(b) : as_int(e)]
    if int(np.prod(target, dtype=np.int64)) != x.size:
        raise ValueError(f"cannot reshape {list(x.shape)} into {target}")
    return x.reshape(target)


OPS: tuple[SimOp, ...] = (
    op("reshape", "x:T shape:U", "T", reshape, exact=True, defaults=_opset, T=_WIDE, U=_INT),
    op("transpose", "x:T perm!:int32", "T", transpose, exact=True, T=_WIDE),
    op("squeeze", "x:T axes?!:int32", "T", squeeze, exact=True, T=_WIDE),
    op("expand_dims", "x:T axes!:int32", "T", expand_dims, exact=True, T=_WIDE),
    op("reverse", "x:T axes?!:int32", "T", reverse, exact=True, T=_WIDE),
    op("reverse_sequence", "x:T lengths:U seq_axis?!:int32 batch_axis?!:int32", "T",
       reverse_sequence, exact=True, T=_WIDE, U=_INT),
    op("slice_by_index", "x:T begin:U end:U stride?!:U begin_mask?!:bool end_mask?!:bool "
       "squeeze_mask?!:bool", "T", slice_by_index, exact=True, T=_WIDE, U=_INT),
    op("slice_by_size", "x:T begin:U size:U", "T", slice_by_size, exact=True, T=_WIDE, U=_INT),
    op("slice_update", "x:T update:T begin:U end:U stride?!:U begin_mask?!:bool "
       "end_mask?!:bool squeeze_mask?!:bool", "T", slice_update, exact=True, T=_WIDE, U=_INT),
    op("depth_to_space", "x:T block_size!:int32", "T", depth_to_space, exact=True,
       T="fp16|fp32"),
    op("space_to_depth", "x:T block_size!:int32", "T", space_to_depth, exact=True,
       T="fp16|fp32"),
    op("pixel_shuffle", "x:T upscale_factor!:int32", "T", pixel_shuffle, exact=True,
       T="fp16|fp32"),
    op("pixel_unshuffle", "x:T downscale_factor!:uint32", "T", pixel_unshuffle, exact=True,
       T="fp16|fp32"),
    op("space_to_batch", "x:T block_shape!:int32 paddings!:int32", "T", space_to_batch,
       exact=True, T="fp16|fp32"),
    op("batch_to_space", "x:T block_shape!:int32 crops!:int32", "T", batch_to_space,
       exact=True, T="fp16|fp32"),
    op("sliding_windows", "x:T axis!:int32 size!:int32 stride?!:int32", "T", sliding_windows,
       exact=True, T=_WIDE),
    op("flatten2d", "x:T axis?!:int32", "T", flatten2d, exact=True, T=ANY),
    op("shape", "x:T", "int32", shape, T=ANY),
    op("reshape_like", "x:T ref_tensors*:R begins*!:int32 ends*!:int32 end_masks*!:bool", "T",
       reshape_like, exact=True, T=_WIDE, R=_WIDE),
)  # fmt: skip
