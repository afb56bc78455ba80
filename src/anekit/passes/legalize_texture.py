"""Texture ops a chip's engine lacks, in exact forms it has (part of the engine_forms pass).

The M1 engine has no strided slice and no resize (chips.json: features ``dynamic_slice``
and ``resize``), so Swin's patch merging (``x[:, 0::2, 1::2, :]``) and a YOLO-style
nearest 2x upsample went to the CPU there, each costing two transitions and a dispatch:

- a strided slice is a contiguous slice of whole step-blocks, reshaped so each block is
  a row, and a width-1 slice taking the wanted member of every block (constant-padded
  first when the last block is partial);
- a nearest resize by whole factors is a transposed convolution with stride = kernel =
  the factors and all-ones depthwise weights: each output pixel is one input pixel times
  one, no two taps overlap;
- a bilinear upsample by whole factors (half-pixel centres, as torch's
  ``align_corners=False``) is the input with its edge rows and columns repeated once, a
  depthwise transposed convolution whose taps are the interpolation's tent (0.25, 0.75,
  0.75, 0.25 for 2x), and a crop. Where the crop starts is found, not assumed: the form is
  compared with the op's own kernel on a random line per axis and then a random map, and
  the op stays when they differ (align_corners, asymmetric).

The first two move values without arithmetic, so they are exact in fp16 too; the third is
exact to fp32 rounding (in fp16 its taps are exact for power-of-two factors). Chips that
have the feature keep the op as it is.
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
def upsample_as_deconv(rw: Rewriter, node: Node) -> bool:
    if rw.ctx.target.supports("resize"):
        return False
    x = node.inputs[0]
    src, out = rw.shape(x), rw.shape(node.output)
    attrs = node.attrs
    if len(src) != 4 or out[:2] != src[:2] or not rw.value(x).dtype.is_float or attrs["antialias"]:
        return False
    fy, fx = out[2] // src[2], out[3] // src[3]
    if (fy, fx) == (1, 1) or out[2] != fy * src[2] or out[3] != fx * src[3]:
        return False
    if attrs["mode"] == "linear":
        return fy > 1 and fx > 1 and _bilinear_as_deconv(rw, node, src, (fy, fx))
    if attrs["mode"] != "nearest" or not _repeats_blocks(attrs, src, (fy, fx)):
        return False  # cubic, or a coordinate mode whose nearest pixels are not whole blocks
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


def _tent(f: int) -> np.ndarray:
    """Linear interpolation's taps for a whole factor f, 2f of them: 1 - |d| / f at the
    offsets d of the output pixels from the input pixel's centre, half-integers for an even
    f (0.25, 0.75, 0.75, 0.25 for 2) and integers for an odd one (1/3, 2/3, 1, 2/3, 1/3
    and a zero for 3)."""
    d = np.arange(2 * f) + 0.5 - f + 0.5 * (f % 2)
    return np.maximum(0.0, 1.0 - np.abs(d) / f)


def _uncropped(x: np.ndarray, factors: tuple[int, int]) -> np.ndarray:
    """What the emitted form computes before its crop, in numpy: edges repeated once, a
    depthwise transposed convolution with stride f and tent taps."""
    fy, fx = factors
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge")
    _, _, h, w = xp.shape
    out = np.zeros((*x.shape[:2], (h + 1) * fy, (w + 1) * fx))
    k = np.outer(_tent(fy), _tent(fx))
    for a in range(2 * fy):
        for b in range(2 * fx):
            out[:, :, a : a + h * fy : fy, b : b + w * fx : fx] += xp * k[a, b]
    return out


def _crop_start(attrs, src: tuple[int, ...], factors: tuple[int, int]) -> tuple[int, int] | None:
    """Where the op's output starts inside the uncropped form's, found by comparing both on
    a random map of the input's size; None when no start reproduces the op (a coordinate
    mode whose interpolation is not the same tent at every pixel)."""
    probe = np.random.default_rng(0).standard_normal((1, 1, src[2], src[3]))
    n_h, n_w = src[2] * factors[0], src[3] * factors[1]
    want = get_op("resize").call([probe.astype(np.float32)], {**attrs, "sizes": (1, 1, n_h, n_w)})
    full = _uncropped(probe, factors)
    for cy in range(full.shape[2] - n_h + 1):
        for cx in range(full.shape[3] - n_w + 1):
            if np.allclose(full[:, :, cy : cy + n_h, cx : cx + n_w], want, rtol=1e-5, atol=1e-6):
                return cy, cx
    return None


def _bilinear_as_deconv(
    rw: Rewriter, node: Node, src: tuple[int, ...], factors: tuple[int, int]
) -> bool:
    crops = _crop_start(node.attrs, src, factors)
    if crops is None:
        return False
    e = Emit(rw, node)
    y = node.inputs[0]
    for axis in (2, 3):  # the edge rows, then columns, once more on each side (exact copies)
        n = src[axis]
        first = e(
            "slice", [y], {"starts": (0,), "ends": (1,), "axes": (axis,)}, f"edge{axis}_first"
        )
        last = e(
            "slice", [y], {"starts": (n - 1,), "ends": (n,), "axes": (axis,)}, f"edge{axis}_last"
        )
        y = e("concat", [first, y, last], {"axis": axis}, f"edges{axis}")
    taps = np.outer(_tent(factors[0]), _tent(factors[1]))
    weights = e.const(np.broadcast_to(taps, (src[1], 1, *taps.shape)).copy(), "tent")
    geometry = {"strides": factors, "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": src[1]}
    y = e("conv_transpose", [y, weights], geometry, "deconv")
    out = rw.shape(node.output)
    ends = (crops[0] + out[2], crops[1] + out[3])
    y = e("slice", [y], {"starts": crops, "ends": ends, "axes": (2, 3)}, "crop")
    fy, fx = factors
    return e.done(
        y,
        f"bilinear upsample by {fy}x{fx} as edge copies, a depthwise transposed "
        "convolution with tent taps, and a crop",
    )
