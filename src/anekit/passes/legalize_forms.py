"""Ops with no engine layer of their own, rewritten into exact engine forms instead of a CPU island.

- einsum: transposes, reshapes, plain reductions and one (batched) matmul;
- depth_to_space / space_to_depth: a strided transposed convolution (or convolution) with
  one-hot weights (each output is one input times 1.0 plus zeros: exact);
- tile: concats of the input with itself;
- cumsum (float): a matmul with a triangular 0/1 matrix along the scanned axis;
- pow with a constant fractional exponent: x**n * sqrt(x) for n + 1/2, else exp(c log x)
  (both give NaN for x < 0 as pow does, and 0 or inf at x = 0);
- a rank-3 (1-D) transposed convolution: a 2-D one on [N, C, 1, W];
- on chips without them (M1), strided slices and whole-factor nearest upsampling
  (`anekit.passes.legalize_texture`).
Every form is exact up to fp32 rounding (tests/passes/test_engine_forms.py checks each
against onnxruntime and torch).
"""

from __future__ import annotations

import math

import numpy as np

from anekit.ir.graph import Graph, Node
from anekit.passes.context import PassContext
from anekit.passes.decompose.emit import Emit
from anekit.passes.legalize_texture import strided_slice_as_blocks, upsample_as_deconv
from anekit.passes.rewrite import Rewriter, apply_rules, rule, scalar_value

# A cumsum longer than this keeps its CPU form: the triangular matrix grows as L^2.
MAX_SCAN_LENGTH = 2048
# x ** (n + 1/2) becomes n multiplies and a sqrt for |n| up to this; beyond, exp(c log x).
MAX_HALF_POWER_MULTIPLIES = 3


def _is_float(rw: Rewriter, node: Node) -> bool:
    return all(rw.value(v).dtype.is_float for v in (*node.inputs, *node.outputs) if v)


def _perm(e: Emit, x: str, perm: list[int], tag: str) -> str:
    if perm == sorted(perm):
        return x
    return e("transpose", [x], {"perm": tuple(perm)}, tag)


def _reshape(e: Emit, x: str, shape: tuple[int, ...], tag: str) -> str:
    if e.rw.shape(x) == tuple(shape):
        return x
    return e("reshape", [x], {"shape": tuple(shape)}, tag)


# --- einsum -------------------------------------------------------------------------------


def _sum_out(e: Emit, x: str, term: str, keep: set[str], tag: str) -> tuple[str, str]:
    """Sum away the letters of ``term`` not in ``keep`` (they appear nowhere else)."""
    axes = tuple(i for i, ch in enumerate(term) if ch not in keep)
    if not axes:
        return x, term
    y = e("reduce_sum", [x], {"axes": axes, "keepdims": False}, tag)
    return y, "".join(ch for ch in term if ch in keep)


@rule("einsum")
def einsum_as_matmul(rw: Rewriter, node: Node) -> bool:
    """One or two operands, no ellipsis, no repeated letter in a term."""
    eq = node.attrs["equation"].replace(" ", "")
    if "->" not in eq or "." in eq or not _is_float(rw, node):
        return False
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) not in (1, 2) or any(len(set(t)) != len(t) for t in (*terms, out)):
        return False
    sizes: dict[str, int] = {}
    for term, v in zip(terms, node.inputs, strict=True):
        for ch, d in zip(term, rw.shape(v), strict=True):
            if sizes.setdefault(ch, d) != d:
                return False  # broadcasting a unit letter: leave it to the CPU
    e = Emit(rw, node)
    if len(terms) == 1:
        y, t = _sum_out(e, node.inputs[0], terms[0], set(out), "sum")
        y = _perm(e, y, [t.index(ch) for ch in out], "order")
        return e.done(
            _reshape(e, y, rw.shape(node.output), "shape"), "einsum as a reduction and a transpose"
        )
    (ta, tb), (a, b) = terms, node.inputs
    if rw.is_const(a) and not rw.is_const(b):  # the engine matmul takes a constant on the right
        (ta, tb), (a, b) = (tb, ta), (b, a)
    a, ta = _sum_out(e, a, ta, set(tb) | set(out), "sum_a")
    b, tb = _sum_out(e, b, tb, set(ta) | set(out), "sum_b")
    batch = [ch for ch in out if ch in ta and ch in tb]
    contract = [ch for ch in ta if ch in tb and ch not in out]
    left = [ch for ch in ta if ch not in tb]
    right = [ch for ch in tb if ch not in ta]
    if len(batch) + 2 > 5:
        return False

    def size(letters: list[str]) -> int:
        return math.prod(sizes[ch] for ch in letters)

    bdims = tuple(sizes[ch] for ch in batch)
    a = _perm(e, a, [ta.index(ch) for ch in batch + left + contract], "a_order")
    a = _reshape(e, a, (*bdims, size(left), size(contract)), "a_matrix")
    b = _perm(e, b, [tb.index(ch) for ch in batch + contract + right], "b_order")
    b = _reshape(e, b, (*bdims, size(contract), size(right)), "b_matrix")
    y = e("matmul", [a, b], tag="matmul")
    order = batch + left + right
    y = _reshape(e, y, tuple(sizes[ch] for ch in order), "split")
    y = _perm(e, y, [order.index(ch) for ch in out], "order")
    return e.done(y, f"einsum '{eq}' as transposes and a matmul")


# --- depth_to_space / space_to_depth -----------------------------------------------------


def _shuffle_weight(c: int, b: int, mode: str, dtype) -> tuple[np.ndarray, int]:
    """One-hot [C, C/b^2 (or 1), b, b] weights and the group count moving channel blocks
    of C channels to b x b tiles (as a transposed conv) or back (as a conv, same array)."""
    cp = c // (b * b)
    if mode == "CRD":  # channel o*b*b + i*b + j <-> tile (i, j) of channel o: grouped
        w = np.zeros((c, 1, b, b), dtype)
        for ch in range(c):
            w[ch, 0, (ch % (b * b)) // b, ch % b] = 1
        return w, cp
    w = np.zeros((c, cp, b, b), dtype)  # DCR: channel i*b*C' + j*C' + o
    for ch in range(c):
        w[ch, ch % cp, ch // (b * cp), (ch // cp) % b] = 1
    return w, 1


@rule("depth_to_space", "space_to_depth")
def shuffle_as_conv(rw: Rewriter, node: Node) -> bool:
    x = node.inputs[0]
    if not _is_float(rw, node):
        return False
    b, mode = node.attrs["block_size"], node.attrs["mode"]
    e = Emit(rw, node)
    geometry = {"strides": (b, b), "pads": (0, 0, 0, 0), "dilations": (1, 1)}
    if node.op == "depth_to_space":
        w, group = _shuffle_weight(rw.shape(x)[1], b, mode, e.dtype)
        y = e("conv_transpose", [x, e.const(w, "one_hot")], {**geometry, "group": group}, "deconv")
    else:
        w, group = _shuffle_weight(rw.shape(node.output)[1], b, mode, e.dtype)
        if group > 1:  # CRD: one group per input channel, its b*b outputs one-hot
            group = rw.shape(x)[1]
        y = e("conv", [x, e.const(w, "one_hot")], {**geometry, "group": group}, "conv")
    return e.done(
        y,
        f"{node.op} ({mode}) as a strided {'transposed ' if node.op == 'depth_to_space' else ''}convolution with one-hot weights",
    )


# --- tile, cumsum, pow, 1-D transposed conv ---------------------------------------------


# One concat input per copy: past this many copies in all the rewrite would build a graph as
# large as the repeat count (a hostile Tile asks for 1e9), so such a tile stays as it is and
# reaches the size check.
MAX_TILE_COPIES = 64


@rule("tile")
def tile_as_concat(rw: Rewriter, node: Node) -> bool:
    x = node.inputs[0]
    if not _is_float(rw, node) or rw.is_const(x):
        return False
    if sum(r for r in node.attrs["repeats"] if r > 1) > MAX_TILE_COPIES:
        return False
    e = Emit(rw, node)
    y = x
    for axis, r in enumerate(node.attrs["repeats"]):
        if r > 1:
            y = e("concat", [y] * r, {"axis": axis}, f"repeat{axis}")
    return e.done(y, "tile as concats")


@rule("cumsum")
def cumsum_as_matmul(rw: Rewriter, node: Node) -> bool:
    x = node.inputs[0]
    shape = rw.shape(x)
    if not _is_float(rw, node) or not shape:
        return False
    axis = node.attrs["axis"] % len(shape)
    n = shape[axis]
    if n > MAX_SCAN_LENGTH:
        return False
    k, j = np.indices((n, n))  # y[..., j] = sum_k x[..., k] * tri[k, j]
    if node.attrs["reverse"]:
        keep = k > j if node.attrs["exclusive"] else k >= j
    else:
        keep = k < j if node.attrs["exclusive"] else k <= j
    e = Emit(rw, node)
    last = len(shape) - 1
    swap = list(range(len(shape)))
    swap[axis], swap[last] = last, axis
    y = _perm(e, x, swap, "to_last")
    y = e("matmul", [y, e.const(keep.astype(e.dtype), "triangle")], tag="scan")
    y = _perm(e, y, swap, "back")
    return e.done(y, "cumsum as a matmul with a triangular 0/1 matrix")


@rule("pow")
def fractional_pow(rw: Rewriter, node: Node) -> bool:
    x, p = node.inputs
    c = scalar_value(rw.const(p))
    if c is None or rw.is_const(x) or float(c).is_integer() or not _is_float(rw, node):
        return False
    if rw.shape(node.output) != rw.shape(x):
        return False
    e = Emit(rw, node)
    n = c - 0.5
    if n.is_integer() and 0 < abs(n) <= MAX_HALF_POWER_MULTIPLIES:
        y = e("sqrt", [x])
        for _ in range(int(abs(n))):
            y = e("mul", [y, x], tag="times_x") if n > 0 else e("div", [y, x], tag="over_x")
        return e.done(y, f"pow(x, {c:g}) as a sqrt and {int(abs(n))} multiplies")
    scaled = e("mul", [e("log", [x]), e.const(c, "exponent")], tag="scaled_log")
    return e.done(e("exp", [scaled]), f"pow(x, {c:g}) as exp({c:g} * log(x))")


@rule("conv_transpose")
def conv_transpose_1d_as_2d(rw: Rewriter, node: Node) -> bool:
    x, w = node.inputs[:2]
    weight = rw.const(w)
    if rw.value(x).rank != 3 or weight is None or not _is_float(rw, node):
        return False
    at = node.attrs
    n, c, width = rw.shape(x)
    pads = at["pads"] or (0, 0)
    e = Emit(rw, node)
    attrs = {
        "strides": (1, (at["strides"] or (1,))[0]),
        "pads": (0, pads[0], 0, pads[1]),
        "dilations": (1, (at["dilations"] or (1,))[0]),
        "output_padding": (0, (at["output_padding"] or (0,))[0]),
        "group": at["group"],
    }
    ins = [_reshape(e, x, (n, c, 1, width), "as_2d"), e.const(weight[:, :, None, :], "weight_2d")]
    if len(node.inputs) > 2 and node.inputs[2]:
        ins.append(node.inputs[2])
    y = e("conv_transpose", ins, attrs, "deconv2d")
    return e.done(
        _reshape(e, y, rw.shape(node.output), "as_1d"),
        "1-D transposed conv as a 2-D one on [N, C, 1, W]",
    )


ENGINE_FORM_RULES = (
    einsum_as_matmul,
    shuffle_as_conv,
    tile_as_concat,
    cumsum_as_matmul,
    fractional_pow,
    conv_transpose_1d_as_2d,
    strided_slice_as_blocks,
    upsample_as_deconv,
)


def engine_forms(graph: Graph, ctx: PassContext) -> Graph:
    """Rewrite ops with no engine layer into exact engine forms (the list in this module's doc)."""
    return apply_rules(graph, ctx, ENGINE_FORM_RULES)
