"""Convolution MIL ops: conv and conv_transpose, 1-D to 3-D, groups, dilations (iOS 15-18 defs).

``conv`` gathers input windows (im2col, a strided view copied once) and multiplies them with
the weights in one batched sgemm per group; a 1x1 stride-1 conv is a plain matmul on views.
``conv_transpose`` multiplies first and scatters the kernel taps into the output (col2im).
Padding follows coremltools' ``aggregated_pad``: ``same`` puts the odd extra element after
(bottom/right heavy), ``same_lower`` before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import gemm, window_kernels
from ..registry import FLOAT, Signature, SimOp, op
from ._util import MAX_ELEMENTS, as_int, as_ints, as_str, checked_shape

PAD_TYPES = ("valid", "same", "custom", "same_lower")


def _spatial(values: np.ndarray | None, n: int, default: int, what: str) -> tuple[int, ...]:
    if values is None:
        return (default,) * n
    out = as_ints(values)
    if len(out) != n:
        raise ValueError(f"{what} has {len(out)} values; x has {n} spatial dimensions")
    return out


def pads(
    pad_type: str,
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pad: np.ndarray | None,
) -> list[tuple[int, int]]:
    """(before, after) padding of each spatial dimension."""
    n = len(sizes)
    if pad_type == "valid":
        return [(0, 0)] * n
    if pad_type == "custom":
        values = _spatial(pad, 2 * n, 0, "pad")
        if any(v < 0 for v in values):
            raise ValueError(f"pad {list(values)} has a negative value")
        return [(values[2 * i], values[2 * i + 1]) for i in range(n)]
    if pad_type in ("same", "same_lower"):
        out = []
        for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
            effective = (k - 1) * d + 1
            total = max(0, s * math.ceil(size / s) - size + effective - s)
            small = total // 2
            out.append((small, total - small) if pad_type == "same" else (total - small, small))
        return out
    raise ValueError(f"pad_type {pad_type!r} is not one of {', '.join(PAD_TYPES)}")


def _check_positive(values: Sequence[int], what: str) -> None:
    if any(v < 1 for v in values):
        raise ValueError(f"{what} {list(values)} must all be at least 1")


def windows(
    x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> np.ndarray:
    """A read-only view [N, C, *out, *kernel] of the (already padded) input's windows."""
    sizes = x.shape[2:]
    out = []
    for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        effective = (k - 1) * d + 1
        if size < effective:
            raise ValueError(
                f"the (padded) input size {size} is smaller than the kernel extent {effective}"
            )
        out.append((size - effective) // s + 1)
    st = x.strides
    shape = x.shape[:2] + tuple(out) + tuple(kernel)
    strides_ = (
        st[:2]
        + tuple(st[2 + i] * s for i, s in enumerate(strides))
        + tuple(st[2 + i] * d for i, d in enumerate(dilations))
    )
    return as_strided(x, shape, strides_, writeable=False)


def conv(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    strides: np.ndarray | None = None,
    pad_type: str = "valid",
    pad: np.ndarray | None = None,
    dilations: np.ndarray | None = None,
    groups: np.ndarray | int = 1,
) -> np.ndarray:
    n = x.ndim - 2
    if not 1 <= n <= 3 or weight.ndim != x.ndim:
        raise ValueError(
            f"x {list(x.shape)} and weight {list(weight.shape)} must both be rank 3, 4 or 5"
        )
    g = as_int(groups)
    c_in, c_out = x.shape[1], weight.shape[0]
    if g < 1 or c_in % g or c_out % g or weight.shape[1] != c_in // g:
        raise ValueError(
            f"weight {list(weight.shape)} does not fit x's {c_in} channels in {g} group(s)"
        )
    kernel = weight.shape[2:]
    st = _spatial(strides, n, 1, "strides")
    dl = _spatial(dilations, n, 1, "dilations")
    _check_positive(st, "strides")
    _check_positive(dl, "dilations")
    padding = pads(as_str(pad_type), x.shape[2:], kernel, st, dl, pad)
    pointwise = g == 1 and all(k == 1 for k in kernel) and all(s == 1 for s in st)
    if weight.dtype == np.float16 and pointwise and all(p == (0, 0) for p in padding):
        # a weight held as fp16 (plan.HALF_CONSUMERS): read as it is, never widened whole
        out = gemm.matmul_half(weight.reshape(c_out, c_in), x.reshape(x.shape[0], c_in, -1))
        return _biased(out.reshape((x.shape[0], c_out) + x.shape[2:]), bias, n)
    weight = weight.astype(x.dtype, copy=False)
    batch = x.shape[0]
    w = weight.reshape(g, c_out // g, -1)
    if not all(k == 1 for k in kernel) or not all(s == 1 for s in st) or g != 1:
        picks = _pick_weights(w)
        out = _gathered_windows(x, w, kernel, st, dl, padding, picks)
        if out is not None:
            return _biased(out.reshape((batch, c_out, *out.shape[2 + n :])), bias, n)
        if picks is None:  # real weights: the direct kernel, else a GEMM per group over windows
            out = _direct(x, w.reshape(c_out, -1), g, kernel, st, dl, padding)
            if out is None:
                out = _product_of_columns(x, w, kernel, st, dl, padding)
            if out is not None:
                return _biased(out, bias, n)
    if any(p != (0, 0) for p in padding):
        x = np.pad(x, ((0, 0), (0, 0), *padding))
    if g == 1 and all(k == 1 for k in kernel) and all(s == 1 for s in st):
        # 1x1 conv: [C_out, C_in] @ [N, C_in, S], on views
        out = gemm.matmul(weight.reshape(c_out, c_in), x.reshape(batch, c_in, -1))
        out = out.reshape((batch, c_out) + x.shape[2:])
    else:
        view = windows(x, kernel, st, dl)  # [N, C, *O, *K]
        spatial_out = view.shape[2 : 2 + n]
        order = (0, 1, *range(2 + n, 2 + 2 * n), *range(2, 2 + n))
        checked_shape((batch, c_in * math.prod(kernel), math.prod(spatial_out)), "im2col")
        picked = _picked(w, x)
        if picked is not None and _identity(picked, w.shape[2]):
            # each output channel is one window position: the windows themselves, +0 added
            # as the sum does, written once in the output's layout
            out = np.empty(view.shape[:2] + view.shape[2 + n :] + spatial_out, x.dtype)
            np.add(np.float32(0), view.transpose(order), out=out)
        elif picked is not None:
            cols = view.transpose(order).reshape(batch, g, w.shape[2], -1)
            out = _pick(cols, picked)
            np.add(np.float32(0), out, out=out)
        else:
            # always the C-order im2col copy: where the windows overlap along one axis (a 3-D
            # kernel of depth 2) numpy's reshape returns a strided view of x instead, and BLAS
            # sums that layout with other bits than the copy the C gather writes
            cols = np.ascontiguousarray(view.transpose(order).reshape(batch, g, w.shape[2], -1))
            out = np.matmul(w, cols)
        out = out.reshape((batch, c_out) + tuple(spatial_out))
    return _biased(out, bias, n)


def prepare_conv(
    known: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]], rounded: bool = False
) -> Any:
    """:func:`conv` for inputs of one shape with known weights (see prepared.py): a 1x1
    stride-1 product or the direct kernel, with the geometry worked out once; None (the
    general kernel) for picking weights, other paths and arguments it would refuse. With
    ``rounded`` the kernel's result is rounded to fp16 values (an fp16 output: the C
    kernels round each tile while it is in cache, saving the run loop's pass over it)."""
    weight, x_shape = known.get("weight"), shapes.get("x")
    if set(shapes) != {"x"} or not isinstance(weight, np.ndarray):
        return None
    if weight.dtype not in (np.float32, np.float16):
        return None
    n = len(x_shape) - 2
    if n not in (1, 2) or weight.ndim != len(x_shape):
        return None
    try:
        g = as_int(known.get("groups", 1))
        st = _spatial(known.get("strides"), n, 1, "strides")
        dl = _spatial(known.get("dilations"), n, 1, "dilations")
        _check_positive(st, "strides")
        _check_positive(dl, "dilations")
        kernel = weight.shape[2:]
        padding = pads(as_str(known.get("pad_type", "valid")), x_shape[2:], kernel, st, dl,
                       known.get("pad"))  # fmt: skip
    except ValueError:
        return None
    c_in, c_out, batch = x_shape[1], weight.shape[0], x_shape[0]
    if g < 1 or c_in % g or c_out % g or weight.shape[1] != c_in // g:
        return None
    bias = known.get("bias")
    if bias is not None:
        if not isinstance(bias, np.ndarray) or bias.shape != (c_out,):
            return None
        bias = bias.astype(np.float32, copy=False).reshape((1, c_out) + (1,) * n)
    pointwise = g == 1 and all(k == 1 for k in kernel) and all(s == 1 for s in st)
    if weight.dtype == np.float16 and not pointwise:
        return None  # the plan widens every other fp16 weight (plan.HALF_CONSUMERS)
    w = weight.reshape(g, c_out // g, -1)
    if not pointwise:
        out_sizes = _out_sizes_of(x_shape[2:], kernel, st, dl, padding)
        if _pick_weights(w) is not None or out_sizes is None or not window_kernels.direct_available():
            return None
        if math.prod((batch, c_out, *out_sizes)) > MAX_ELEMENTS:
            return None
        direct = window_kernels.DirectConv(w.reshape(c_out, -1), g, kernel, st, dl,
                                           [a for a, _ in padding], x_shape, out_sizes,
                                           rounded and bias is None)  # fmt: skip
        if bias is None:
            return direct

        def run(x: np.ndarray) -> np.ndarray:
            out = direct(x)
            out += bias
            return gemm.rounded_in_place(out) if rounded else out

        return run
    if any(p != (0, 0) for p in padding):
        return None
    matrix = weight.reshape(c_out, c_in)
    out_shape = (batch, c_out, *x_shape[2:])
    # an fp16 weight read as it is (plan.HALF_CONSUMERS), by conv's own fp16-weight product
    product = gemm.matmul_half if weight.dtype == np.float16 else gemm.matmul

    def run_1x1(x: np.ndarray) -> np.ndarray:
        # [C_out, C_in] @ [N, C_in, S], on views, as conv does
        out = product(matrix, x.reshape(batch, c_in, -1), rounded=rounded and bias is None)
        out = out.reshape(out_shape)
        if bias is not None:
            out += bias
            if rounded:
                gemm.rounded_in_place(out)
        return out

    return run_1x1


def _biased(out: np.ndarray, bias: np.ndarray | None, n: int) -> np.ndarray:
    """``out`` [N, C_out, *O] plus ``bias`` [C_out] (in place: the kernel made ``out``)."""
    if bias is not None:
        c_out = out.shape[1]
        if bias.shape != (c_out,):
            raise ValueError(f"bias has shape {list(bias.shape)}, expected [{c_out}]")
        out += bias.astype(out.dtype, copy=False).reshape((1, c_out) + (1,) * n)
    return out


def _out_sizes(
    x: np.ndarray,
    kernel: Sequence[int],
    st: Sequence[int],
    dl: Sequence[int],
    padding: Sequence[tuple[int, int]],
) -> list[int] | None:
    """The output's spatial sizes; None when a (padded) input is smaller than the kernel's
    extent (windows() then raises the error)."""
    return _out_sizes_of(x.shape[2:], kernel, st, dl, padding)


def _out_sizes_of(
    spatial: Sequence[int],
    kernel: Sequence[int],
    st: Sequence[int],
    dl: Sequence[int],
    padding: Sequence[tuple[int, int]],
) -> list[int] | None:
    """:func:`_out_sizes` of an input of spatial sizes ``spatial``."""
    sizes = [d + a + b for d, (a, b) in zip(spatial, padding, strict=True)]
    out_sizes = []
    for size, k, s, d in zip(sizes, kernel, st, dl, strict=True):
        if size < (k - 1) * d + 1:
            return None
        out_sizes.append((size - (k - 1) * d - 1) // s + 1)
    return out_sizes


def _direct(
    x: np.ndarray,
    w: np.ndarray,
    groups: int,
    kernel: Sequence[int],
    st: Sequence[int],
    dl: Sequence[int],
    padding: Sequence[tuple[int, int]],
) -> np.ndarray | None:
    """The 1-D or 2-D convolution of the unpadded ``x`` by ``w`` [C_out, C/g * K] without an
    im2col matrix (window_kernels.direct_conv: each output the C GEMM's sum over the im2col
    product), [N, C_out, *O]; None where that kernel does not run."""
    out_sizes = _out_sizes(x, kernel, st, dl, padding)
    if out_sizes is None or not window_kernels.direct_available():
        return None
    checked_shape((x.shape[0], w.shape[0], *out_sizes), "conv output")
    before = [a for a, _ in padding]
    return window_kernels.direct_conv(
        x, np.ascontiguousarray(w, np.float32), groups, kernel, st, dl, before, out_sizes
    )


def _product_of_columns(
    x: np.ndarray,
    w: np.ndarray,
    kernel: Sequence[int],
    st: Sequence[int],
    dl: Sequence[int],
    padding: Sequence[tuple[int, int]],
) -> np.ndarray | None:
    """``w`` [g, C_out/g, C/g * K] times the windows of the unpadded ``x``, gathered by the
    C window kernel straight into the im2col layout [N, g, C/g * K, O] (no padded copy, no
    strided reshape copy): [N, C_out, *O]. The gather writes 0 + x, so a -0 input reads as
    +0, which changes no sum (each output's accumulator starts at +0, and +0 + -0 = +0);
    the matrices are the same shape and layout as numpy's im2col copy, so the product's
    bits are too. None without the C module or when an input is not finite."""
    out_sizes = _out_sizes(x, kernel, st, dl, padding)
    if out_sizes is None or x.dtype != np.float32:
        return None
    batch, channels = x.shape[:2]
    checked_shape((batch, channels * math.prod(kernel), math.prod(out_sizes)), "im2col")
    # the channels as the leading axis: the gather runs in pieces over them
    planes = x.reshape(batch * channels, 1, *x.shape[2:])
    before = [a for a, _ in padding]
    cols = window_kernels.gather(planes, kernel, st, dl, before, out_sizes)
    if cols is None:
        return None
    g = w.shape[0]
    out = np.matmul(w, cols.reshape(batch, g, w.shape[2], -1))
    return out.reshape((batch, w.shape[0] * w.shape[1], *out_sizes))


def _gathered_windows(
    x: np.ndarray,
    w: np.ndarray,
    kernel: Sequence[int],
    st: Sequence[int],
    dl: Sequence[int],
    padding: Sequence[tuple[int, int]],
    picked: np.ndarray | None,
) -> np.ndarray | None:
    """The identity-pick conv (output channel c * K + t is window position t of input
    channel c) of the unpadded ``x`` by the C window gather: [N, C, *K, *O], or None when
    the weights (``picked``: their picks) are not that, the C module is missing or an input
    is not finite."""
    if picked is None or not _identity(picked, w.shape[2]):
        return None
    out_sizes = _out_sizes(x, kernel, st, dl, padding)
    if out_sizes is None:
        return None
    checked_shape((x.shape[0], x.shape[1] * math.prod(kernel), math.prod(out_sizes)), "im2col")
    before = [a for a, _ in padding]
    return window_kernels.gather(x, kernel, st, dl, before, out_sizes)


# A grouped convolution whose weights only pick inputs (each output sums one input times 1
# and the rest times 0) is how a compiled step gathers windows (im2col, pooling) and
# scatters their gradients back (col2im). Its products are exact, so any summation order
# gives the same sum: +0 plus the picked input (-0 becomes +0, as the GEMM's accumulator
# starting at +0 makes it), 0 where nothing is picked, NaN where any input of the group is
# infinite or NaN (0 * inf). The picked values are copied instead of multiplied (a GEMM of
# thousands of 9x9 matrices); inputs that are not all finite take the GEMM. Picks in
# order (each input channel one tap of one output) are copied and scattered by the C window
# kernels, which report whether what they read was finite (window_kernels.py).
PICK_LIMIT = 1 << 16  # weights larger than this are never checked (real weights, not picks)


def _picked(w: np.ndarray, x: np.ndarray) -> np.ndarray | None:
    """For weights ``w`` [g, outputs, inputs] of 0s and 1s with at most one 1 per output:
    the input each output picks (-1 for none), per group; else None. None as well when
    ``x`` is not all finite (then the sum is not the picked value)."""
    if x.dtype != np.float32:
        return None
    picked = _pick_weights(w)
    if picked is None or not math.isfinite(float(np.add.reduce(x, axis=None))):
        return None  # an inf or NaN in x (a sum that overflows only costs the GEMM)
    return picked


def _pick_weights(w: np.ndarray) -> np.ndarray | None:
    """:func:`_picked` of the weights alone (the inputs not checked)."""
    if w.size > PICK_LIMIT or w.dtype != np.float32:
        return None
    ones = w == 1
    if not np.all(ones | (w == 0)):
        return None
    counts = ones.sum(axis=2)
    if np.any(counts > 1):
        return None
    return np.where(counts == 1, ones.argmax(axis=2), -1)


def _pick(columns: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """``columns`` [N, g, inputs, *D] -> [N, g, outputs, *D], output o of group j being
    input ``picked[j, o]`` (0 for -1); ``columns`` itself when every group picks every input
    in order. Not yet +0-added: the caller adds it, or accumulates into zeros, which does."""
    if _identity(picked, columns.shape[2]):
        return columns
    trailing = columns.shape[3:]
    index = np.maximum(picked, 0).reshape(1, *picked.shape, *(1,) * len(trailing))
    shape = (columns.shape[0], *picked.shape, *trailing)
    out = np.take_along_axis(columns, np.broadcast_to(index, shape), axis=2)
    out[:, picked < 0] = 0
    return out


def _identity(picked: np.ndarray, inputs: int) -> bool:
    """Every group picks each of its ``inputs`` once, in order."""
    return picked.shape[1] == inputs and bool(np.all(picked == np.arange(inputs)))


def _check_conv(sig: Signature, opset: int) -> None:
    pad_type = as_str(sig.consts.get("pad_type", "valid"))
    if pad_type not in PAD_TYPES:
        raise ValueError(f"pad_type {pad_type!r} is not one of {', '.join(PAD_TYPES)}")
    if pad_type == "same_lower" and opset < 16:
        raise ValueError("pad_type same_lower needs iOS 16 or later")
    dilations = sig.consts.get("dilations")
    if (
        "weight" not in sig.consts
        and dilations is not None
        and any(d > 1 for d in as_ints(dilations))
    ):
        raise ValueError("a conv with non-constant weights does not support dilations")


def conv_transpose(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    pad: np.ndarray | None = None,
    output_shape: np.ndarray | None = None,
    pad_type: str = "valid",
    strides: np.ndarray | None = None,
    dilations: np.ndarray | None = None,
    groups: np.ndarray | int = 1,
) -> np.ndarray:
    n = x.ndim - 2
    if not 1 <= n <= 3 or weight.ndim != x.ndim:
        raise ValueError(
            f"x {list(x.shape)} and weight {list(weight.shape)} must both be rank 3, 4 or 5"
        )
    g = as_int(groups)
    batch, c_in = x.shape[:2]
    if g < 1 or c_in % g or weight.shape[0] != c_in:
        raise ValueError(
            f"weight {list(weight.shape)} must be [C_in={c_in}, C_out/groups, *K] for {g} group(s)"
        )
    c_out = weight.shape[1] * g
    kernel = weight.shape[2:]
    st = _spatial(strides, n, 1, "strides")
    dl = _spatial(dilations, n, 1, "dilations")
    _check_positive(st, "strides")
    _check_positive(dl, "dilations")
    sizes = x.shape[2:]
    full = [
        (d - 1) * s + (k - 1) * dd + 1 for d, s, k, dd in zip(sizes, st, kernel, dl, strict=True)
    ]
    pad_type = as_str(pad_type)
    if output_shape is not None:
        wanted = as_ints(output_shape)
        if len(wanted) != x.ndim or wanted[0] != batch or wanted[1] != c_out:
            raise ValueError(f"output_shape {list(wanted)} must be [{batch}, {c_out}, ...]")
        out_sizes = list(wanted[2:])
    elif pad_type == "same":
        out_sizes = [d * s for d, s in zip(sizes, st, strict=True)]
    elif pad_type == "valid":
        out_sizes = list(full)
    elif pad_type == "custom":
        values = _spatial(pad, 2 * n, 0, "pad")
        out_sizes = [f - values[2 * i] - values[2 * i + 1] for i, f in enumerate(full)]
    else:
        raise ValueError(f"pad_type {pad_type!r} is not one of valid, same, custom")
    if pad_type == "custom":
        starts = list(_spatial(pad, 2 * n, 0, "pad")[0::2])
    elif pad_type == "same":
        starts = [max(0, f - o) // 2 for f, o in zip(full, out_sizes, strict=True)]
    else:
        starts = [0] * n
    checked_shape((batch, c_out, *out_sizes), "conv_transpose output")
    if any(o < 1 for o in out_sizes):
        raise ValueError(f"output spatial size {out_sizes} is empty")
    # [N, g, Cg_in, D] -> per group: W_g^T [Cg_out*K, Cg_in] @ x_g [Cg_in, D]
    cg_in, cg_out = c_in // g, c_out // g
    w = weight.astype(x.dtype, copy=False).reshape(g, cg_in, cg_out * math.prod(kernel))
    buffer = _scattered_picks(x, np.swapaxes(w, 1, 2), (batch, g, cg_out, *kernel, *sizes),
                              st, dl, full)  # fmt: skip
    if buffer is None:
        picked = _picked(np.swapaxes(w, 1, 2), x)
        if picked is not None:  # the taps below add into zeros: that is the sum's +0
            # [N, g, Cg_in, *D]: splitting the channel axis is a view even of a strided x
            cols = _pick(x.reshape(batch, g, cg_in, *sizes), picked)  # [N, g, Cg_out*K, *D]
        else:
            wt, xs = np.swapaxes(w, 1, 2), x.reshape(batch, g, cg_in, -1)
            # numpy's product, as two halves on two threads when large (BLAS's bits either way)
            cols = gemm.split_matmul(wt, xs)
            if cols is None:
                cols = np.matmul(wt, xs)
        buffer = _scattered_taps(cols.reshape((batch, g, cg_out, *kernel, *sizes)), st, dl, full)
    if list(starts) == [0] * n and list(out_sizes) == full:
        out = buffer  # the output is the whole buffer: no crop, no copy
    else:
        out = np.zeros((batch, g, cg_out, *out_sizes), dtype=x.dtype)
        src, dst = [], []
        for start, size, f in zip(starts, out_sizes, full, strict=True):
            lo, hi = max(start, 0), min(start + size, f)
            src.append(slice(lo, max(lo, hi)))
            dst.append(slice(lo - start, lo - start + max(0, hi - lo)))
        out[(slice(None),) * 3 + tuple(dst)] = buffer[(slice(None),) * 3 + tuple(src)]
    out = out.reshape((batch, c_out, *out_sizes))
    if bias is not None:
        if bias.shape != (c_out,):
            raise ValueError(f"bias has shape {list(bias.shape)}, expected [{c_out}]")
        out += bias.astype(out.dtype, copy=False).reshape((1, c_out) + (1,) * n)
    return out


def _scattered_picks(
    x: np.ndarray,
    wt: np.ndarray,
    shape: tuple[int, ...],
    st: Sequence[int],
    dl: Sequence[int],
    full: Sequence[int],
) -> np.ndarray | None:
    """The col2im of identity-pick weights ``wt`` [g, Cg_out*K, Cg_in] (each input channel
    is one tap of one output channel, in order): ``x``'s values themselves scattered by the
    C loop, read as ``shape`` [N, g, Cg_out, *K, *D]; None when the weights are not that,
    the C module is missing or an input is not finite (the GEMM's products then differ)."""
    picked = _pick_weights(wt)
    if picked is None or not _identity(picked, wt.shape[2]):
        return None
    done = window_kernels.scatter(x.reshape(shape), st, dl, full)
    return done[0] if done is not None and done[1] else None


def _scattered_taps(
    cols: np.ndarray, st: Sequence[int], dl: Sequence[int], full: Sequence[int]
) -> np.ndarray:
    """cols [N, g, C, *K, *D] scattered into [N, g, C, *full]: the C loop where it runs,
    else numpy's (the same bits)."""
    done = window_kernels.scatter(cols, st, dl, full)
    if done is not None:
        return done[0]
    if tuple(cols.shape[3 : 3 + len(full)]) == tuple(st) and all(d == 1 for d in dl):
        return _tile_taps(cols, len(full))
    return _accumulate_taps(cols, st, dl, full)


def _accumulate_taps(
    cols: np.ndarray, st: Sequence[int], dl: Sequence[int], full: Sequence[int]
) -> np.ndarray:
    """cols [N, g, C, *K, *D]: each tap's products added into the output positions it
    reaches, tap after tap in index order, into zeros (this loop fixes the fp32 sum order
    of every output)."""
    n = len(full)
    kernel, sizes = cols.shape[3 : 3 + n], cols.shape[3 + n :]
    buffer = np.zeros((*cols.shape[:3], *full), dtype=cols.dtype)
    for taps in np.ndindex(*kernel):
        target = tuple(
            slice(k * d, k * d + (size - 1) * s + 1, s)
            for k, d, size, s in zip(taps, dl, sizes, st, strict=True)
        )
        buffer[(slice(None),) * 3 + target] += cols[(slice(None),) * 3 + taps]
    return buffer


def _tile_taps(cols: np.ndarray, n: int) -> np.ndarray:
    """:func:`_accumulate_taps` where the kernel equals the stride, undilated (a pooling
    gradient): the taps tile the output, every position receives exactly one product, so
    the loop's ``0 + v`` is done once per value in a single pass that writes the
    interleaved layout (the same bits, ~4x faster than nine strided passes)."""
    kernel, sizes = cols.shape[3 : 3 + n], cols.shape[3 + n :]
    # cols [N, g, C, *K, *D] read as [N, g, C, D0, K0, D1, K1, ...]
    order = (0, 1, 2, *(a for i in range(n) for a in (3 + n + i, 3 + i)))
    spread = tuple(v for dk in zip(sizes, kernel, strict=True) for v in dk)
    buffer = np.empty((*cols.shape[:3], *(d * k for d, k in zip(sizes, kernel, strict=True))),
                      cols.dtype)  # fmt: skip
    np.add(
        np.zeros((), cols.dtype),
        cols.transpose(order),
        out=buffer.reshape(*cols.shape[:3], *spread),
    )
    return buffer


_CONV = (
    "x:T weight:U bias?:U strides?!:int32 pad_type?!:string pad?!:int32 dilations?!:int32 "
    "groups?!:int32"
)
_CONV_TRANSPOSE = (
    "x:T weight:U bias?:U pad?!:int32 output_shape?!:int32 pad_type?!:string strides?!:int32 "
    "dilations?!:int32 groups?!:int32"
)

conv.prepare = prepare_conv  # type: ignore[attr-defined]  # see prepared.py
prepare_conv.rounds = True  # type: ignore[attr-defined]  # takes rounded= (prepared.py)

OPS: tuple[SimOp, ...] = (
    op("conv", _CONV, "T", conv, check=_check_conv, T=FLOAT, U=FLOAT),
    op("conv_transpose", _CONV_TRANSPOSE, "T", conv_transpose, T=FLOAT, U=FLOAT),
)
