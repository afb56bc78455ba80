"""Convolution over 1 to 3 spatial axes (NC + spatial layout, weights M x C/group x kernel)."""

from __future__ import annotations

import itertools

import numpy as np

from anekit.ir.dtypes import DType
from anekit.ir.ops._infer import Attrs, Types, float_only, numel
from anekit.ir.registry import Attr, InferError, TensorType, declare

CONV_ATTRS = (
    Attr("strides", "ints", (), doc="per spatial axis; empty = all 1"),
    Attr("pads", "ints", (), doc="begins for each spatial axis, then ends; empty = all 0"),
    Attr("dilations", "ints", (), doc="per spatial axis; empty = all 1"),
    Attr("group", "int", 1),
)


def conv_geometry(
    spatial: int, attrs: Attrs
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(strides, pads, dilations) with defaults filled for ``spatial`` axes."""
    strides = attrs["strides"] or (1,) * spatial
    pads = attrs["pads"] or (0,) * (2 * spatial)
    dilations = attrs["dilations"] or (1,) * spatial
    if len(strides) != spatial or len(dilations) != spatial or len(pads) != 2 * spatial:
        raise InferError(
            f"strides/dilations need {spatial} values and pads {2 * spatial} for {spatial} spatial axes"
        )
    if any(s <= 0 for s in strides) or any(d <= 0 for d in dilations) or any(p < 0 for p in pads):
        raise InferError("strides and dilations must be positive and pads non-negative")
    return tuple(strides), tuple(pads), tuple(dilations)


def conv_output_size(
    size: int, k: int, stride: int, pad_begin: int, pad_end: int, dilation: int
) -> int:
    return (size + pad_begin + pad_end - ((k - 1) * dilation + 1)) // stride + 1


def _float_operands(ins: Types) -> tuple[TensorType, TensorType, TensorType | None, int]:
    """(x, weight, bias or None, spatial axes) of a float convolution, ranks checked."""
    float_only(ins, range(len(ins)))
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    if x.rank < 3 or w.rank != x.rank:
        raise InferError(f"input rank {x.rank} and weight rank {w.rank} must match and be >= 3")
    if any(k < 1 for k in w.shape[2:]):  # onnxruntime's rule too: no empty kernel
        raise InferError(f"the kernel {list(w.shape[2:])} must only contain positive sizes")
    return x, w, b, x.rank - 2


def _conv_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, w, b, sp = _float_operands(ins)
    strides, pads, dil = conv_geometry(sp, attrs)
    g = attrs["group"]
    if g <= 0 or x.shape[1] % g or w.shape[0] % g:
        raise InferError(
            f"input/output channels should be divisible by num group: C={x.shape[1]}, M={w.shape[0]}, group={g}"
        )
    if w.shape[1] * g != x.shape[1]:
        raise InferError(f"weight expects {w.shape[1] * g} input channels, input has {x.shape[1]}")
    if b is not None and b.shape != (w.shape[0],):
        raise InferError(f"bias shape {list(b.shape)} must be [{w.shape[0]}]")
    out = []
    for i in range(sp):
        o = conv_output_size(
            x.shape[2 + i], w.shape[2 + i], strides[i], pads[i], pads[i + sp], dil[i]
        )
        if o <= 0:
            raise InferError(
                f"kernel {list(w.shape[2:])} does not fit the padded input {list(x.shape[2:])}"
            )
        out.append(o)
    return [TensorType((x.shape[0], w.shape[0], *out), x.dtype)]


@declare(
    "conv", layer_type="conv", inputs=("x", "weight", "bias?"), attrs=CONV_ATTRS, infer=_conv_infer
)
def conv(x, weight, bias, strides, pads, dilations, group):
    """N-d cross-correlation (as ONNX Conv) with explicit pads"""
    y = _correlate(x, weight, strides, pads, dilations, group, np.float32)
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * (x.ndim - 2))
    return y


def _correlate(x, weight, strides, pads, dilations, group, acc_dtype) -> np.ndarray:
    """The grouped N-d cross-correlation, accumulated in ``acc_dtype``."""
    sp = x.ndim - 2
    strides, pads, dil = conv_geometry(
        sp, {"strides": strides, "pads": pads, "dilations": dilations}
    )
    n, c = x.shape[:2]
    m, cg = weight.shape[:2]
    kernel = weight.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + sp]) for i in range(sp)])
    out_sp = [
        conv_output_size(x.shape[2 + i], kernel[i], strides[i], pads[i], pads[i + sp], dil[i])
        for i in range(sp)
    ]
    o = int(np.prod(out_sp))
    wg = weight.reshape(group, m // group, cg, -1)  # g, mg, cg, K
    acc = np.zeros((n, group, m // group, o), dtype=acc_dtype)
    # One grouped matmul per kernel offset keeps memory at one input-sized slice.
    for kidx, offs in enumerate(itertools.product(*(range(k) for k in kernel))):
        sl = tuple(
            slice(offs[i] * dil[i], offs[i] * dil[i] + (out_sp[i] - 1) * strides[i] + 1, strides[i])
            for i in range(sp)
        )
        patch = xp[(slice(None), slice(None), *sl)].reshape(n, group, cg, o)
        acc += np.matmul(wg[None, :, :, :, kidx], patch)
    return acc.reshape(n, m, *out_sp)


def _conv_integer_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, w = ins[0], ins[1]
    zx, zw = (list(ins[2:]) + [None, None])[:2]
    for name, t, zp in (("x", x, zx), ("weight", w, zw)):
        if t.dtype not in (DType.INT8, DType.UINT8):
            raise InferError(f"{name} must be int8 or uint8, got {t.dtype}")
        if zp is not None and (
            zp.dtype != t.dtype or zp.numel not in (1, w.shape[0] if name == "weight" else 1)
        ):
            raise InferError(
                f"{name}'s zero point must be one {t.dtype} (or one per output channel)"
            )
    as_float = [TensorType(t.shape, DType.FP32) for t in (x, w)]
    (out,) = _conv_infer(as_float, attrs)
    return [TensorType(out.shape, DType.INT32)]


@declare(
    "conv_integer",
    inputs=("x", "weight", "x_zero_point?", "w_zero_point?"),
    attrs=CONV_ATTRS,
    infer=_conv_integer_infer,
)
def conv_integer(x, weight, x_zero_point, w_zero_point, strides, pads, dilations, group):
    """(x - x_zero_point) correlated with (weight - w_zero_point), exact in int32"""
    xi = x.astype(np.int64)
    wi = weight.astype(np.int64)
    if x_zero_point is not None:
        xi = xi - x_zero_point.astype(np.int64).reshape(())
    if w_zero_point is not None:
        wi = wi - w_zero_point.astype(np.int64).reshape((-1,) + (1,) * (weight.ndim - 1))
    # padding is zero after the shift: pad the centred input
    return _correlate(xi, wi, strides, pads, dilations, group, np.int64).astype(np.int32)


def conv_transpose_output_size(
    size: int, k: int, stride: int, pad_begin: int, pad_end: int, dilation: int, out_pad: int
) -> int:
    return stride * (size - 1) + out_pad + (k - 1) * dilation + 1 - pad_begin - pad_end


def _transpose_geometry(
    sp: int, attrs: Attrs
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    strides = attrs["strides"] or (1,) * sp
    pads = attrs["pads"] or (0,) * (2 * sp)
    dilations = attrs["dilations"] or (1,) * sp
    out_pad = attrs["output_padding"] or (0,) * sp
    if len(strides) != sp or len(dilations) != sp or len(out_pad) != sp or len(pads) != 2 * sp:
        raise InferError(
            f"strides/dilations/output_padding need {sp} values and pads {2 * sp} "
            f"for {sp} spatial axes"
        )
    if min(strides) <= 0 or min(dilations) <= 0 or min(out_pad) < 0:
        raise InferError("strides and dilations must be positive and output_padding non-negative")
    return tuple(strides), tuple(pads), tuple(dilations), tuple(out_pad)


def _conv_transpose_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    x, w, b, sp = _float_operands(ins)
    strides, pads, dil, out_pad = _transpose_geometry(sp, attrs)
    g = attrs["group"]
    if g <= 0 or x.shape[1] % g:
        raise InferError(f"{x.shape[1]} input channels do not divide into {g} groups")
    if w.shape[0] != x.shape[1]:
        raise InferError(
            f"weight [C, M/group, k...] = {list(w.shape)} expects {w.shape[0]} input channels, "
            f"input has {x.shape[1]}"
        )
    m = w.shape[1] * g
    if b is not None and b.shape != (m,):
        raise InferError(f"bias shape {list(b.shape)} must be [{m}]")
    out = []
    for i in range(sp):
        o = conv_transpose_output_size(
            x.shape[2 + i], w.shape[2 + i], strides[i], pads[i], pads[sp + i], dil[i], out_pad[i]
        )
        if o <= 0:
            raise InferError(f"pads {list(pads)} leave no output for input {list(x.shape[2:])}")
        out.append(o)
    return [TensorType((x.shape[0], m, *out), x.dtype)]


@declare(
    "conv_transpose",
    layer_type="deconv",
    inputs=("x", "weight", "bias?"),
    attrs=(
        Attr("strides", "ints", ()),
        Attr("pads", "ints", (), doc="cropped from each end; a negative pad appends zeros"),
        Attr("dilations", "ints", ()),
        Attr("output_padding", "ints", (), doc="extra output at the end of each spatial axis"),
        Attr("group", "int", 1),
    ),
    infer=_conv_transpose_infer,
)
def conv_transpose(x, weight, bias, strides, pads, dilations, output_padding, group):
    """N-d transposed convolution (as ONNX ConvTranspose), weight [C, M/group, k...]"""
    sp = x.ndim - 2
    attrs = {
        "strides": strides,
        "pads": pads,
        "dilations": dilations,
        "output_padding": output_padding,
    }
    strides, pads, dil, out_pad = _transpose_geometry(sp, attrs)
    n, c = x.shape[:2]
    cg, mg = c // group, weight.shape[1]
    in_sp = x.shape[2:]
    kernel = weight.shape[2:]
    out_sp = [
        conv_transpose_output_size(
            in_sp[i], kernel[i], strides[i], pads[i], pads[sp + i], dil[i], out_pad[i]
        )
        for i in range(sp)
    ]
    # accumulate the un-cropped result in a buffer that also covers negative pads
    shift = [max(-pads[i], 0) for i in range(sp)]
    full = [strides[i] * (in_sp[i] - 1) + (kernel[i] - 1) * dil[i] + 1 for i in range(sp)]
    size = [max(full[i], pads[i] + out_sp[i]) + shift[i] for i in range(sp)]
    buf = np.zeros((n, group, mg, *size), dtype=np.float32)
    xg = x.reshape(n, group, cg, -1)
    wg = np.swapaxes(weight.reshape(group, cg, mg, -1), 1, 2)  # g, mg, cg, K
    for kidx, offs in enumerate(itertools.product(*(range(k) for k in kernel))):
        part = np.matmul(wg[None, :, :, :, kidx], xg).reshape(n, group, mg, *in_sp)
        sl = tuple(
            slice(
                shift[i] + offs[i] * dil[i],
                shift[i] + offs[i] * dil[i] + strides[i] * (in_sp[i] - 1) + 1,
                strides[i],
            )
            for i in range(sp)
        )
        buf[(slice(None), slice(None), slice(None), *sl)] += part
    crop = tuple(slice(shift[i] + pads[i], shift[i] + pads[i] + out_sp[i]) for i in range(sp))
    y = buf[(slice(None), slice(None), slice(None), *crop)].reshape(n, group * mg, *out_sp)
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * sp)
    return y


def _col2im_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    (x,) = ins
    image, block = attrs["image_shape"], attrs["block_shape"]
    sp = len(image)
    if x.rank != 3 or len(block) != sp or sp == 0:
        raise InferError(
            f"col2im takes [N, C*prod(block), L] with matching image/block ranks, got {x}, "
            f"image {list(image)}, block {list(block)}"
        )
    strides, pads, dil = conv_geometry(sp, attrs)
    k = numel(block)
    if x.shape[1] % k:
        raise InferError(f"dim 1 ({x.shape[1]}) is not a multiple of the block size {k}")
    blocks = 1
    for i in range(sp):
        blocks *= conv_output_size(image[i], block[i], strides[i], pads[i], pads[sp + i], dil[i])
    if blocks != x.shape[2]:
        raise InferError(f"the image holds {blocks} blocks, the input has {x.shape[2]}")
    return [TensorType((x.shape[0], x.shape[1] // k, *image), x.dtype)]


@declare(
    "col2im",
    inputs=("x",),
    attrs=(
        Attr("image_shape", "ints"),
        Attr("block_shape", "ints"),
        Attr("strides", "ints", ()),
        Attr("pads", "ints", ()),
        Attr("dilations", "ints", ()),
    ),
    infer=_col2im_infer,
    no_lowering="not lowered yet: MIL has no col2im (it would be a scatter-add of patches)",
)
def col2im(x, image_shape, block_shape, strides, pads, dilations):
    """sum the columns of sliding blocks back into an image (the inverse layout of im2col)"""
    sp = len(image_shape)
    strides, pads, dil = conv_geometry(
        sp, {"strides": strides, "pads": pads, "dilations": dilations}
    )
    n = x.shape[0]
    c = x.shape[1] // numel(block_shape)
    grid = [
        conv_output_size(image_shape[i], block_shape[i], strides[i], pads[i], pads[sp + i], dil[i])
        for i in range(sp)
    ]
    padded = [image_shape[i] + pads[i] + pads[sp + i] for i in range(sp)]
    buf = np.zeros((n, c, *padded), dtype=x.dtype)
    cols = x.reshape(n, c, -1, *grid)
    for kidx, offs in enumerate(itertools.product(*(range(k) for k in block_shape))):
        sl = tuple(
            slice(offs[i] * dil[i], offs[i] * dil[i] + (grid[i] - 1) * strides[i] + 1, strides[i])
            for i in range(sp)
        )
        buf[(slice(None), slice(None), *sl)] += cols[:, :, kidx]
    crop = tuple(slice(pads[i], pads[i] + image_shape[i]) for i in range(sp))
    return buf[(slice(None), slice(None), *crop)]
