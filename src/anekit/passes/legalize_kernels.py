"""Kernel split: a convolution whose kernel is wider than the engine's becomes narrower ones.

conv(x, W)[o, t] = sum_a W[o, :, a] x_padded[s t + d a], so cutting the kernel axis a into
pieces of at most ``max_kernel`` taps gives one convolution per piece, over the slice of x
that piece reads (with the padding it needs at either end), and their sum is the original
output: exact up to fp32 rounding. It covers ViT's 16x16/16 patchify (four 8x8 pieces)
and wav2vec2's 128-wide positional convolution. Runs after the layout pass, so every
convolution is rank 4 by then (1-D ones are [N, C, 1, W]).

A 1-D convolution whose stride s is large (an STFT front end: kernel 256, stride 128) is
folded instead: with x'[c s + r, j] = x[c, j s + r] and W'[o, c s + r, a] = W[o, c, a s + r]
it is one stride-1 convolution of ceil(k / s) taps over C s channels, the same sum with no
pieces (silero-vad's front end: one layer, not 36 convolutions and 35 additions).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from anekit.ir.graph import Graph, Node
from anekit.passes.context import PassContext
from anekit.passes.rewrite import Rewriter

# Pieces per convolution beyond which the split is not worth it (the layer stays on the CPU).
MAX_PIECES = 64


def _ranges(k: int, cap: int) -> list[tuple[int, int]]:
    n = math.ceil(k / cap)
    size = math.ceil(k / n)
    return [(lo, min(lo + size, k)) for lo in range(0, k, size)]


def _window(extent: int, out: int, stride: int, dil: int, pad_begin: int, lo: int, hi: int):
    """(slice start, slice end, pad begin, pad end) of the input that taps lo..hi-1 read."""
    first = lo * dil - pad_begin
    last = (out - 1) * stride + (hi - 1) * dil + 1 - pad_begin
    return max(first, 0), min(last, extent), max(-first, 0), max(last - extent, 0)


def _fold_stride(rw: Rewriter, node: Node, weight: np.ndarray, cap: int) -> bool:
    """The stride of a wide 1-D convolution folded into its channels (module docstring);
    False, with nothing added, where it does not apply: dilation, groups, or more than
    ``cap`` taps left."""
    x = node.inputs[0]
    at = node.attrs
    s, dil = (at["strides"] or (1, 1))[1], at["dilations"] or (1, 1)
    pad_h, begin, pad_h_end, _ = at["pads"] or (0, 0, 0, 0)  # the end follows from the output
    n, c, h, width = rw.shape(x)
    o, _, kh, k = weight.shape
    taps = math.ceil(k / s)
    if h != 1 or kh != 1 or s < 2 or tuple(dil) != (1, 1) or at.get("group", 1) != 1:
        return False
    if taps > cap or pad_h or pad_h_end:
        return False
    out = rw.shape(node.output)[3]
    used = (out - 1 + taps) * s  # the padded input the folded taps read: whole rows of s
    end = used - begin - width  # past the real end: zeros read only by weights past k
    origin = node.origin
    xs = x
    if begin == 0 and end < 0:
        xs = rw.add("slice", [x], {"starts": (0,), "ends": (used,), "axes": (3,)},
                    hint=f"{node.name}/fold_crop", origin=origin, before=node)  # fmt: skip
    elif begin or end:  # zeros before (the convolution's own padding) and after, or a crop
        xs = rw.add("pad", [x], {"pads": (0, 0, 0, begin, 0, 0, 0, end)},
                    hint=f"{node.name}/fold_pad", origin=origin, before=node)  # fmt: skip
    rows = rw.add("reshape", [xs], {"shape": (n, c, used // s, s)},
                  hint=f"{node.name}/fold_rows", origin=origin, before=node)  # fmt: skip
    cols = rw.add("transpose", [rows], {"perm": (0, 1, 3, 2)},
                  hint=f"{node.name}/fold_cols", origin=origin, before=node)  # fmt: skip
    folded = rw.add("reshape", [cols], {"shape": (n, c * s, 1, used // s)},
                    hint=f"{node.name}/fold", origin=origin, before=node)  # fmt: skip
    padded = np.zeros((o, c, taps * s), weight.dtype)
    padded[:, :, :k] = weight[:, :, 0, :]
    wf = padded.reshape(o, c, taps, s).transpose(0, 1, 3, 2).reshape(o, c * s, 1, taps)
    ins = [folded, rw.constant(wf, f"{node.inputs[1]}/folded"), *node.inputs[2:]]
    attrs = {**at, "strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0)}
    y = rw.add("conv", ins, attrs, hint=node.name, origin=origin, before=node)
    rw.replace_uses(node.output, y)
    rw.ctx.event(origin, "split",
                 f"kernel {k} > {cap} at stride {s}: folded into one convolution of {taps} "
                 f"taps over {c * s} channels")  # fmt: skip
    rw.ctx.count("convolution strides folded into channels")
    return True


def _split(rw: Rewriter, node: Node, cap: int) -> bool:
    x, w = node.inputs[:2]
    weight = rw.const(w)
    if weight is None or weight.ndim != 4 or max(weight.shape[2:]) <= cap:
        return False
    if _fold_stride(rw, node, weight, cap):
        return True
    at = node.attrs
    strides, dil = at["strides"] or (1, 1), at["dilations"] or (1, 1)
    pads = at["pads"] or (0, 0, 0, 0)
    out_hw = rw.shape(node.output)[2:]
    in_hw = rw.shape(x)[2:]
    axes = [_ranges(k, cap) for k in weight.shape[2:]]
    if math.prod(len(a) for a in axes) > MAX_PIECES:
        return False
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    total = None
    for k, pieces in enumerate(itertools.product(*axes)):
        starts, ends, pad_b, pad_e = [], [], [], []
        for ax, (lo, hi) in enumerate(pieces):
            win = _window(in_hw[ax], out_hw[ax], strides[ax], dil[ax], pads[ax], lo, hi)
            starts.append(win[0])
            ends.append(win[1])
            pad_b.append(win[2])
            pad_e.append(win[3])
        xs = x
        if tuple(starts) != (0, 0) or tuple(ends) != tuple(in_hw):
            xs = rw.add(
                "slice", [x], {"starts": tuple(starts), "ends": tuple(ends), "axes": (2, 3)},
                hint=f"{node.name}/taps{k}", origin=node.origin, before=node,
            )  # fmt: skip
        (h0, h1), (w0, w1) = pieces
        wk = rw.constant(weight[:, :, h0:h1, w0:w1], f"{w}/taps{k}")
        ins = [xs, wk] + ([bias] if bias and k == 0 else [])
        attrs = {**at, "strides": tuple(strides), "dilations": tuple(dil),
                 "pads": (pad_b[0], pad_b[1], pad_e[0], pad_e[1])}  # fmt: skip
        part = rw.add(
            "conv", ins, attrs, hint=f"{node.name}/part{k}", origin=node.origin, before=node
        )
        total = (
            part
            if total is None
            else rw.add(
                "add", [total, part], hint=f"{node.name}/sum{k}", origin=node.origin, before=node
            )
        )
    rw.replace_uses(node.output, total)
    count = math.prod(len(a) for a in axes)
    rw.ctx.event(
        node.origin, "split",
        f"kernel {list(weight.shape[2:])} > {cap} split into {count} convolutions summed",
    )  # fmt: skip
    rw.ctx.count("convolution kernels split")
    return True


def split_kernels(graph: Graph, ctx: PassContext) -> Graph:
    """Split every rank-4 convolution whose kernel exceeds the target's maximum."""
    rw = Rewriter(graph, ctx)
    cap = ctx.target.limits.max_kernel
    for node in graph.nodes:
        if node.op == "conv" and rw.has(node.name) and rw.value(node.inputs[0]).rank == 4:
            _split(rw, rw.node(node.name), cap)
    return rw.build()
