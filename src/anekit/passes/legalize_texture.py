"""Texture ops a chip's engine lacks, in exact forms it has (part of the engine_forms pass).

The M1 engine has no strided slice and no resize (chips.json: features ``dynamic_slice``
and ``resize``), so Swin's patch merging (``x[:, 0::2, 1::2, :]``) and a YOLO-style
nearest 2x upsample went to the CPU there, each costing two transitions and a dispatch:

- a strided slice is a contiguous slice of whole step-blocks, reshaped so each block is
  a row, and a width-1 slice taking the wanted member of every block (constant-padded
  first when the last block is partial);
- a nearest resize by whole factors is a transposed convolution with stride = kernel =
  the factors and all-ones depthwise weights: each output pixel is one input pixel times
  one, no two taps overlap.

Both move values without arithmetic, so they are exact in fp16 too. Chips that have the
feature keep the op as it is.
"""

from __future__ import annotations

import numpy as np

from anekit.ir.graph import Node
from anekit.ir.ops.shape import slice_bounds
from anekit.ir.registry import get_op
from anekit.passes.decompose.emit import Emit
from anekit.passes.rewrite import Rewriter, rule


@rule("slice")
def strided_slice_as_blocks(rw: Rewriter, node: Node) -> bool:
    target = rw.ctx.target
    if target.features.dynamic_slice:
        return False
    x = node.inputs[0]
    shape = list(rw.shape(x))
    rank = len(shape)
    attrs = node.attrs
    axes = attrs["axes"] or tuple(range(len(attrs["starts"])))
    steps = attrs["steps"] or (1,) * len(axes)
    if all(s == 1 for s in steps) or any(s < 1 for s in steps) or rank + 1 > target.limits.max_rank:
        return False
    e = Emit(rw, node)
    y = x
    plain = [(a % rank, st, en) for a, st, en, s in zip(axes, attrs["starts"], attrs["ends"], steps, strict=True) if s == 1]  # fmt: skip
    if plain:
        y = e("slice", [y], {"starts": tuple(p[1] for p in plain), "ends": tuple(p[2] for p in plain),
                             "axes": tuple(p[0] for p in plain)}, "unit_steps")  # fmt: skip
        shape = list(rw.shape(y))
    for axis, start, end, step in zip(axes, attrs["starts"], attrs["ends"], steps, strict=True):
        if step == 1:
            continue
        axis %= rank
        begin, _, length = slice_bounds(shape[axis], start, end, step)
        if length == 0:
            return False  # (an empty slice: nothing the engine should run)
        first, member = divmod(begin, step)  # wanted: step * (first + i) + member, i < length
        stop = step * (first + length)
        if stop > shape[axis]:  # the last block is partial: pad it to a whole block
            pads = [0] * (2 * rank)
            pads[rank + axis] = stop - shape[axis]
            y = e(
                "pad",
                [y],
                {"pads": tuple(pads), "mode": "constant", "value": 0.0},
                f"whole_blocks{axis}",
            )
        y = e(
            "slice",
            [y],
            {"starts": (step * first,), "ends": (stop,), "axes": (axis,)},
            f"blocks{axis}",
        )
        rows = (*shape[:axis], length, step, *shape[axis + 1 :])
        y = e("reshape", [y], {"shape": rows}, f"block_rows{axis}")
        y = e(
            "slice",
            [y],
            {"starts": (member,), "ends": (member + 1,), "axes": (axis + 1,)},
            f"member{axis}",
        )
        shape[axis] = length
        y = e("reshape", [y], {"shape": tuple(shape)}, f"strided{axis}")
    return e.done(y, "strided slice as whole blocks, a reshape and a width-1 slice")


@rule("resize")
def nearest_upsample_as_deconv(rw: Rewriter, node: Node) -> bool:
    if rw.ctx.target.supports("resize"):
        return False
    x = node.inputs[0]
    src, out = rw.shape(x), rw.shape(node.output)
    attrs = node.attrs
    if (
        attrs["mode"] != "nearest"
        or len(src) != 4
        or out[:2] != src[:2]
        or not rw.value(x).dtype.is_float
    ):
        return False
    fy, fx = out[2] // src[2], out[3] // src[3]
    if (fy, fx) == (1, 1) or out[2] != fy * src[2] or out[3] != fx * src[3]:
        return False
    if not _repeats_blocks(attrs, src, (fy, fx)):
        return False  # a coordinate mode whose nearest pixels are not whole blocks
    e = Emit(rw, node)
    ones = e.const(np.ones((src[1], 1, fy, fx)), "ones")
    geometry = {"strides": (fy, fx), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": src[1]}
    y = e("conv_transpose", [x, ones], geometry, "deconv")
    return e.done(
        y, f"nearest resize by {fy}x{fx} as a transposed convolution with all-ones weights"
    )


def _repeats_blocks(attrs, src: tuple[int, ...], factors: tuple[int, int]) -> bool:
    """Whether the op's own kernel, on a one-channel map of pixel numbers, gives each input
    pixel's number to exactly its fy x fx output block (the coordinate and rounding modes
    decide; checked, not assumed)."""
    h, w = src[2], src[3]
    fy, fx = factors
    numbers = np.arange(h * w, dtype=np.float32).reshape(1, 1, h, w)
    got = get_op("resize").call([numbers], {**attrs, "sizes": (1, 1, h * fy, w * fx)})
    return bool(np.array_equal(got, numbers.repeat(fy, 2).repeat(fx, 3)))
