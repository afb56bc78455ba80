"""Gradient of convolution (groups, strides, pads, dilations; 1 to 3 spatial axes).

Both gradients go through the "patches" of the input: a depthwise convolution with a
constant one-hot kernel copies every window position into its own channel
(x [N, C, *sp] -> [N, C*K, *out], K = kernel size). Then

- the weight gradient is one batched matmul of the output gradient with the patches, and
- the input gradient is a matmul of the weight with the output gradient, scattered back
  by the transposed convolution of the same constant kernel.

Every convolution in the gradient therefore has a constant kernel (the engine bakes
convolution kernels into the program) and the trainable weight only meets matmuls, which
the engine runs with both operands computed (e5rt-reference section 2.5.1 runs the whole step,
CNNs included, on the engine).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from anekit.ir.ops.conv import conv_geometry
from anekit.train.emit import Emitter
from anekit.train.vjp import rule


def window_kernel(channels: int, kernel: Sequence[int], dtype) -> np.ndarray:
    """[channels*K, 1, *kernel]: output channel c*K + k copies window offset k of channel c."""
    k = int(np.prod(kernel))
    eye = np.zeros((k, *kernel), dtype=dtype)
    for i, offs in enumerate(itertools.product(*(range(n) for n in kernel))):
        eye[(i, *offs)] = 1
    return np.ascontiguousarray(np.tile(eye[:, None], (channels, 1) + (1,) * len(kernel)))


def geometry(kernel: Sequence[int], attrs) -> dict:
    strides, pads, dil = conv_geometry(len(kernel), attrs)
    return {"strides": strides, "pads": pads, "dilations": dil}


def patches(e: Emitter, x: str, kernel: Sequence[int], geo: dict) -> str:
    """[N, C*K, *out]: the input under every window offset."""
    c = e.shape(x)[1]
    w = e.const(window_kernel(c, kernel, e.ed.values[x].dtype.numpy), hint="window")
    return e("conv", x, w, group=c, **geo)


def unpatch(e: Emitter, dp: str, x_shape: Sequence[int], kernel: Sequence[int], geo: dict) -> str:
    """The adjoint of `patches`: sum window gradients [N, C*K, *out] back onto [N, C, *sp]."""
    c = x_shape[1]
    w = e.const(window_kernel(c, kernel, e.ed.values[dp].dtype.numpy), hint="window")
    return transposed(e, dp, w, x_shape, geo, group=c)


def transposed(e: Emitter, g: str, w: str, x_shape: Sequence[int], geo: dict, group: int) -> str:
    """The input gradient of conv(x, w) for a constant ``w``: the transposed convolution
    covers the padded extent the windows read; the input's own part of it is then cut out
    (and any tail no window reached is padded with zeros)."""
    sp = len(x_shape) - 2
    full = e("conv_transpose", g, w, group=group, strides=geo["strides"],
             dilations=geo["dilations"])  # fmt: skip
    reach = e.shape(full)[2:]
    begin = geo["pads"][:sp]
    ends = [min(reach[i], begin[i] + x_shape[2 + i]) for i in range(sp)]
    cut = e("slice", full, starts=begin, ends=ends, axes=tuple(range(2, 2 + sp)))
    tail = [x_shape[2 + i] - (ends[i] - begin[i]) for i in range(sp)]
    if any(tail):
        cut = e("pad", cut, pads=(0, 0, *[0] * sp, 0, 0, *tail))
    return cut


def conv_as_matmul(e: Emitter, x: str, w: str, geo: dict, group: int) -> str:
    """conv(x, w) for a computed weight: patches (a constant kernel) and one batched
    matmul [G, Co/G, CK] @ [G, CK, N*L] (no bias)."""
    n = e.shape(x)[0]
    co, cg, *kernel = e.shape(w)
    ck = cg * int(np.prod(kernel))
    p = patches(e, x, kernel, geo)
    out = e.shape(p)[2:]
    length = int(np.prod(out))
    pm = e.transpose(e.reshape(p, (n, group, ck, length)), (1, 2, 0, 3))  # G, CK, N, L
    y = e("matmul", e.reshape(w, (group, co // group, ck)), e.reshape(pm, (group, ck, n * length)))
    y = e.transpose(e.reshape(y, (group, co // group, n, length)), (2, 0, 1, 3))
    return e.reshape(y, (n, co, *out))


@rule("conv")
def _conv(e: Emitter, node, gys):
    (g,) = gys
    x, w = node.inputs[:2]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    group = node.attrs["group"]
    n, c, *sp = e.shape(x)
    co, cg, *kernel = e.shape(w)
    geo = geometry(kernel, node.attrs)
    out = e.shape(g)[2:]
    length = int(np.prod(out))
    ck = cg * int(np.prod(kernel))
    # gradient per group: [G, Co/G, N*L]
    gm = e.reshape(g, (n, group, co // group, length))
    gm = e.reshape(e.transpose(gm, (1, 2, 0, 3)), (group, co // group, n * length))
    gb = None
    if bias:
        gb = e.sum_axes(g, [0, *range(2, 2 + len(out))], keepdims=False)
    tail = [gb] if len(node.inputs) > 2 else []
    p = e.reshape(patches(e, x, kernel, geo), (n, group, ck, length))
    pm = e.reshape(e.transpose(p, (1, 0, 3, 2)), (group, n * length, ck))
    gw = e.reshape(e("matmul", gm, pm), e.shape(w))  # G, Co/G, CK (pruned if unused)
    if e.ed.constant(w) is not None:  # a fixed kernel: its own transposed convolution
        return [transposed(e, g, w, (n, c, *sp), geo, group), gw, *tail]
    wm = e.transpose(e.reshape(w, (group, co // group, ck)), (0, 2, 1))  # G, CK, Co/G
    dp = e("matmul", wm, gm)  # G, CK, N*L
    dp = e.transpose(e.reshape(dp, (group, ck, n, length)), (2, 0, 1, 3))
    gx = unpatch(e, e.reshape(dp, (n, c * int(np.prod(kernel)), *out)), (n, c, *sp), kernel, geo)
    return [gx, gw, *tail]
