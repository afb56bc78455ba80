"""Local simplifications: constant folding, identities, neutral elements, casts, powers, selects."""

from __future__ import annotations

import numpy as np

from anekit.errors import ModelError
from anekit.ir.dtypes import DType
from anekit.ir.graph import Node, Value
from anekit.ir.interpret import run_node
from anekit.ir.registry import KernelError
from anekit.passes.rewrite import Rewriter, live_and_const, rule, scalar_value

# Ops never folded: engine layers are built from live values only.
_NO_FOLD = frozenset({"ane_layer"})
# Casts that keep every value exactly (a round trip through a wider type is exact).
_WIDENS = {
    DType.FP16: {DType.FP32},
    DType.INT8: {DType.INT32, DType.INT64, DType.FP32},
    DType.UINT8: {DType.INT32, DType.INT64, DType.FP32},
    DType.INT32: {DType.INT64},
    DType.BOOL: {DType.INT8, DType.UINT8, DType.INT32, DType.INT64, DType.FP16, DType.FP32},
}
# A select whose fill is at least this negative is a mask: x + fill rounds to fill for
# every |x| below 1e22 in fp32, so an additive mask gives exactly the same values.
MASK_FILL = -1e30


def _keeps_output(rw: Rewriter, node: Node, src: str) -> bool:
    """True when replacing node's output by ``src`` would turn a graph output into an input."""
    return rw.is_output(node.output) and rw.producer(src) is None


@rule("*")
def fold_constants(rw: Rewriter, node: Node) -> bool:
    """A node whose inputs are all constants becomes constants (bounded in size)."""
    if node.op in _NO_FOLD or not node.inputs or not all(rw.is_const(i) for i in node.inputs if i):
        return False
    if not any(node.inputs) or any(rw.is_output(o) for o in node.outputs):
        return False
    limit = rw.ctx.options.fold_limit
    in_size = sum(rw.value(i).numel for i in node.inputs if i)
    out_size = sum(rw.value(o).numel for o in node.outputs)
    if out_size > max(limit, in_size):
        rw.ctx.note(
            f"'{node.name}' ({node.op}) not folded: its {out_size:,}-element result exceeds "
            f"the folding limit ({limit:,}) and its inputs"
        )
        return False
    args = [rw.const(i) if i else None for i in node.inputs]
    try:
        outs = run_node(node, args, [rw.value(o) for o in node.outputs])
    except KernelError as exc:  # the model's constants break the op's rules
        names = ", ".join(f"'{o}'" for o in node.origin) or f"'{node.name}'"
        raise ModelError(f"{exc} (computing {node.op} on the model's constants)",
                         where=f"node {names}") from None  # fmt: skip
    rw.ctx.removing(node.origin, "folded into a constant at compile time")
    for o, arr in zip(node.outputs, outs, strict=True):
        rw.replace_uses(o, rw.constant(arr, o))
    return True


@rule("identity")
def remove_identity(rw: Rewriter, node: Node) -> bool:
    src = node.inputs[0]
    if _keeps_output(rw, node, src):
        return False
    rw.ctx.removing(node.origin, "an identity")
    rw.replace_uses(node.output, src)
    return True


@rule("expand", "tile", "slice", "concat", "pad")
def remove_noop_shape_op(rw: Rewriter, node: Node) -> bool:
    """expand/tile/slice/pad that change nothing, and a one-input concat, vanish."""
    src = node.inputs[0]
    if len(node.inputs) != 1 or rw.shape(src) != rw.shape(node.output):
        return False
    if node.op == "slice" and any(s < 0 for s in (node.attrs["steps"] or (1,))):
        return False  # a reversing slice keeps the shape
    if node.op == "pad" and any(node.attrs["pads"]):
        return False
    if _keeps_output(rw, node, src):
        return False
    rw.ctx.removing(node.origin, f"a {node.op} that changes nothing")
    rw.replace_uses(node.output, src)
    return True


@rule("add", "sub", "mul", "div")
def remove_neutral(rw: Rewriter, node: Node) -> bool:
    """x + 0, x - 0, x * 1, x / 1 (the constant must not broadcast x to a larger shape)."""
    found = live_and_const(rw, node)
    if found is None:
        return False
    live, c, ci = found
    v = scalar_value(c)
    neutral = {"add": 0.0, "sub": 0.0, "mul": 1.0, "div": 1.0}[node.op]
    if v != neutral or (node.op in ("sub", "div") and ci == 0):
        return False
    if rw.value(live).type != rw.value(node.output).type or _keeps_output(rw, node, live):
        return False
    rw.ctx.removing(node.origin, f"{node.op} by its neutral element")
    rw.replace_uses(node.output, live)
    return True


@rule("cast")
def simplify_cast(rw: Rewriter, node: Node) -> bool:
    """cast to the same dtype vanishes; cast(cast(x, wider), t) is cast(x, t)."""
    src = node.inputs[0]
    to = node.attrs["to"]
    prev = rw.producer(src)
    if rw.value(src).dtype == to:
        if _keeps_output(rw, node, src):
            return False
        rw.ctx.removing(node.origin, "a cast to the type it already has")
        rw.replace_uses(node.output, src)
        return True
    if prev is None or prev.op != "cast":
        return False
    inner = prev.inputs[0]
    if prev.attrs["to"] not in _WIDENS.get(rw.value(inner).dtype, ()):
        return False  # the first cast may round: the pair is not a round trip
    rw.ctx.removing(prev.origin, "a cast round trip through a wider type")
    if rw.value(inner).dtype == to:
        if _keeps_output(rw, node, inner):
            return False
        rw.ctx.removing(node.origin, "a cast round trip through a wider type")
        rw.replace_uses(node.output, inner)
        return True
    y = rw.add(
        "cast", [inner], {"to": to}, hint=node.name, origin=node.origin + prev.origin, before=node
    )
    rw.replace_uses(node.output, y)
    return True


@rule("pow")
def expand_pow(rw: Rewriter, node: Node) -> bool:
    """x ** c for c in {2, 3, 0.5, -0.5, -1} as multiplies, sqrt and reciprocal."""
    x, e = node.inputs
    c = scalar_value(rw.const(e))
    if rw.is_const(x) or c is None or not rw.value(x).dtype.is_float:
        return False
    if rw.value(node.output).shape != rw.shape(x):
        return False
    o, at = node.origin, node
    if c == 2.0:
        y = rw.add("mul", [x, x], hint=f"{node.name}/sq", origin=o, before=at)
    elif c == 3.0:
        sq = rw.add("mul", [x, x], hint=f"{node.name}/sq", origin=o, before=at)
        y = rw.add("mul", [sq, x], hint=f"{node.name}/cube", origin=o, before=at)
    elif c == 0.5:
        y = rw.add("sqrt", [x], hint=f"{node.name}/sqrt", origin=o, before=at)
    elif c == -0.5:
        s = rw.add("sqrt", [x], hint=f"{node.name}/sqrt", origin=o, before=at)
        y = rw.add("reciprocal", [s], hint=f"{node.name}/rsqrt", origin=o, before=at)
    elif c == -1.0:
        y = rw.add("reciprocal", [x], hint=f"{node.name}/recip", origin=o, before=at)
    elif c == 1.0:
        y = x
    else:
        return False
    if y == x and _keeps_output(rw, node, x):
        return False
    rw.replace_uses(node.output, y)
    return True


@rule("where")
def select_as_mask(rw: Rewriter, node: Node) -> bool:
    """where(const cond, x, very negative const) -> x + additive mask (exact in fp32)."""
    cond, a, b = node.inputs
    c = rw.const(cond)
    if c is None or rw.value(node.output).shape != rw.shape(a if not rw.is_const(a) else b):
        return False
    if rw.is_const(b) and not rw.is_const(a):
        live, fill, keep = a, rw.const(b), c
    elif rw.is_const(a) and not rw.is_const(b):
        live, fill, keep = b, rw.const(a), ~c
    else:
        return False
    if not rw.value(live).dtype.is_float or fill.size == 0 or not np.all(fill <= MASK_FILL):
        return False
    additive = np.where(keep, np.float32(0), fill).astype(rw.value(live).dtype.numpy)
    m = rw.constant(additive, f"{node.name}/mask")
    y = rw.add("add", [live, m], hint=node.name, origin=node.origin, before=node)
    rw.replace_uses(node.output, y)
    return True


@rule("where")
def remove_nan_guard(rw: Rewriter, node: Node) -> bool:
    """where(isnan(s), c, s) with s a softmax whose every row has a finite entry -> s.

    Exporters guard fully-masked attention rows this way; a row can only be NaN when all
    its scores are -inf, which a constant mask with a finite entry in every row rules out
    (for finite activations).
    """
    cond, a, b = node.inputs
    test = rw.producer(cond)
    if test is None or test.op != "isnan" or b != test.inputs[0] or not rw.is_const(a):
        return False
    soft = rw.producer(b)
    if soft is None or soft.op != "softmax" or rw.value(node.output).type != rw.value(b).type:
        return False
    if not _rows_finite(rw, soft.inputs[0], soft.attrs["axis"]):
        return False
    rw.ctx.removing(node.origin + test.origin, "a NaN guard that cannot fire (finite softmax rows)")
    rw.replace_uses(node.output, b)
    return True


def _rows_finite(rw: Rewriter, x: str, axis: int) -> bool:
    """Every softmax row of ``x`` has a finite entry, assuming finite live activations."""
    prod = rw.producer(x)
    if prod is None:
        return not rw.is_const(x) or bool(np.isfinite(rw.const(x)).all())
    consts = [rw.const(i) for i in prod.inputs if rw.is_const(i)]
    if prod.op == "add" and len(consts) == 1:
        m = consts[0]
        rank = rw.value(x).rank
        m = m.reshape((1,) * (rank - m.ndim) + m.shape)
        return bool(np.isfinite(m).any(axis=axis % rank).all())
    return all(np.isfinite(c).all() for c in consts if c.dtype.kind == "f")


@rule("gather")
def gather_as_slice(rw: Rewriter, node: Node) -> bool:
    """gather with a constant index array whose entries, in order, are a contiguous ascending
    run is a slice, reshaped to the gather's shape (the index array's axes take the place
    of the gathered one, in C order, so any index shape reshapes: ConvNeXt's exported
    ``as_strided`` gathers a [1, 768, 1, 1] arange from a 768-vector)."""
    x, idx = node.inputs
    ind = rw.const(idx)
    if ind is None or rw.is_const(x) or ind.size == 0:
        return False
    axis = node.attrs["axis"] % rw.value(x).rank
    dim = rw.shape(x)[axis]
    flat = np.where(ind < 0, ind + dim, ind).reshape(-1)
    if not np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
        return False
    start = int(flat[0])
    sl = rw.add(
        "slice", [x], {"starts": (start,), "ends": (start + flat.size,), "axes": (axis,)},
        hint=node.name, origin=node.origin, before=node,
    )  # fmt: skip
    out: Value = rw.value(node.output)
    if rw.shape(sl) != out.shape:
        sl = rw.add(
            "reshape",
            [sl],
            {"shape": out.shape},
            hint=f"{node.name}/squeeze",
            origin=node.origin,
            before=node,
        )
    rw.replace_uses(node.output, sl)
    return True


SIMPLIFY_RULES = (
    fold_constants,
    remove_identity,
    remove_noop_shape_op,
    remove_neutral,
    simplify_cast,
    expand_pow,
    select_as_mask,
    remove_nan_guard,
    gather_as_slice,
)
