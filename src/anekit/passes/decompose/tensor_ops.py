"""Split, the composite reductions, expand and wrap padding decomposed into slices, plain
reductions, broadcasts and concats."""

from __future__ import annotations

import numpy as np

from anekit.ir.graph import Node
from anekit.passes.decompose.emit import Emit
from anekit.passes.decompose.norms import peak_scaled
from anekit.passes.rewrite import Rewriter, rule


@rule("split")
def split_as_slices(rw: Rewriter, node: Node) -> bool:
    x = node.inputs[0]
    axis = node.attrs["axis"] % rw.value(x).rank
    start = 0
    for out, size in zip(node.outputs, node.attrs["sizes"], strict=True):
        part = rw.add(
            "slice",
            [x],
            {"starts": (start,), "ends": (start + size,), "axes": (axis,)},
            hint=out,
            origin=node.origin,
            before=node,
        )
        start += size
        rw.replace_uses(out, part)
    rw.ctx.event(node.origin, "decomposed", f"split as {len(node.outputs)} slices")
    return True


@rule("reduce_l1", "reduce_l2", "reduce_sum_square", "reduce_log_sum", "reduce_log_sum_exp")
def decompose_reduction(rw: Rewriter, node: Node) -> bool:
    x = node.inputs[0]
    if not rw.value(x).dtype.is_float:
        return False
    e = Emit(rw, node)
    attrs = dict(node.attrs)
    op = node.op
    if op == "reduce_l1":
        y = e("reduce_sum", [e("abs", [x])], attrs, "sum")
    elif op == "reduce_l2":  # peak * sqrt(sum((x / peak)^2)): no square exceeds 1 (fp16-safe)
        keep = {**attrs, "keepdims": True}
        u, _, peak = peak_scaled(e, x, keep)
        y = e("mul", [e("sqrt", [e("reduce_sum", [e("mul", [u, u], tag="square")], keep, "sum")]),
                      peak], tag="l2")  # fmt: skip
        if not attrs["keepdims"]:
            y = e("reshape", [y], {"shape": rw.shape(node.output)}, "squeeze")
    elif op == "reduce_sum_square":
        y = e("reduce_sum", [e("mul", [x, x], tag="square")], attrs, "sum")
    elif op == "reduce_log_sum":
        y = e("log", [e("reduce_sum", [x], attrs, "sum")])
    else:
        keep = {**attrs, "keepdims": True}
        m = e("reduce_max", [x], keep, "max")
        s = e("reduce_sum", [e("exp", [e("sub", [x, m], tag="shifted")])], keep, "sum")
        y = e("add", [e("log", [s]), m], tag="lse")
        if not attrs["keepdims"]:
            y = e("reshape", [y], {"shape": rw.shape(node.output)}, "squeeze")
    return e.done(y, f"{op} as elementwise ops and a plain reduction")


@rule("expand")
def expand_as_broadcast(rw: Rewriter, node: Node) -> bool:
    """An expand that only prepends unit axes is a reshape; a float one that broadcasts is
    a multiply by ones (the engine broadcasts elementwise operands; x * 1 is exact)."""
    x = node.inputs[0]
    src, dst = rw.shape(x), rw.shape(node.output)
    out = rw.value(node.output)
    if rw.value(x).numel == out.numel and dst[len(dst) - len(src) :] == src:
        y = rw.add("reshape", [x], {"shape": dst}, hint=node.name, origin=node.origin, before=node)
        what = "a reshape"
    elif out.dtype.is_float and out.numel <= rw.ctx.options.fold_limit:
        ones = rw.constant(np.ones(dst, out.dtype.numpy), f"{node.name}/ones")
        y = rw.add("mul", [x, ones], hint=node.name, origin=node.origin, before=node)
        what = "a broadcast multiply by ones"
    else:
        return False
    rw.ctx.event(node.origin, "decomposed", f"expand as {what}")
    rw.replace_uses(node.output, y)
    return True


# One concat input per run of source rows: a wrap pad wider than its axis repeats the axis,
# and past this many pieces in all it stays a pad (and is refused by the lowering) rather
# than growing the graph with the pad width.
MAX_WRAP_PIECES = 64


@rule("pad")
def wrap_pad_as_concat(rw: Rewriter, node: Node) -> bool:
    """A ``wrap`` pad (circular, ONNX's torus; MIL has no such mode) as slices and concats:
    along each padded axis, output row j is input row (j - begin) mod size. Negative pads
    crop first, as the op's kernel does."""
    if node.attrs["mode"] != "wrap":
        return False
    x = node.inputs[0]
    shape = rw.shape(x)
    r = len(shape)
    pads = node.attrs["pads"]
    begins, ends = pads[:r], pads[r:]
    crop = [(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(begins, ends, shape, strict=True)]
    sizes = [stop - start for start, stop in crop]
    if any(n <= 0 for n in sizes):
        return False
    runs = {a: _wrap_runs(max(begins[a], 0), sizes[a], max(ends[a], 0)) for a in range(r)}
    if sum(len(v) for v in runs.values() if len(v) > 1) > MAX_WRAP_PIECES:
        return False
    e = Emit(rw, node)
    y = x
    if any(c != (0, d) for c, d in zip(crop, shape, strict=True)):
        y = e("slice", [y], {"starts": tuple(c[0] for c in crop), "ends": tuple(c[1] for c in crop),
                             "axes": tuple(range(r))}, "crop")  # fmt: skip
    for axis, pieces in runs.items():
        if len(pieces) == 1:  # nothing added on this axis
            continue
        parts = [
            y if (start, stop) == (0, sizes[axis])
            else e("slice", [y], {"starts": (start,), "ends": (stop,), "axes": (axis,)}, f"wrap{axis}")
            for start, stop in pieces
        ]  # fmt: skip
        y = e("concat", parts, {"axis": axis}, f"wrap{axis}")
    return e.done(y, "wrap pad as slices and concats")


def _wrap_runs(before: int, size: int, after: int) -> list[tuple[int, int]]:
    """The output rows of one wrap-padded axis as runs [start, stop) of consecutive input rows."""
    runs, j, total = [], 0, before + size + after
    while j < total and len(runs) <= MAX_WRAP_PIECES:
        start = (j - before) % size
        stop = min(size, start + total - j)
        runs.append((start, stop))
        j += stop - start
    return runs
