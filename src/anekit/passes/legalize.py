"""Legalization: split layers that exceed the target's envelope into layers that fit.

- A conv or constant-weight matmul with more output channels than the target's per-layer
  limit (a 50,257-wide vocabulary head), or with more weight bytes than the kernel-memory
  cap, becomes several layers over balanced channel ranges joined by a channel concat.
- A conv with more groups than the group field holds becomes several grouped convs over
  slices of its input channels, joined the same way.
The pieces keep the layer's gain/offset (cut per channel) and activations; an output
transpose or quantization step moves to the joining concat. Numerics are exact.
"""

from __future__ import annotations

import math

from anekit.ir.engine import EpilogueStep, LayerView, Slot, layer_attrs
from anekit.ir.graph import Graph, Node
from anekit.ir.registry import infer_types
from anekit.passes.context import PassContext
from anekit.passes.rewrite import Rewriter

FP16_BYTES = 2


def _weight(view: LayerView, rw: Rewriter) -> tuple[int, int, int] | None:
    """(main input index of the weight, its output-channel axis, the output's channel axis)."""
    ins = view.main_inputs
    if view.main == "conv" and rw.is_const(ins[1]):
        return 1, 0, 1
    if view.main == "matmul" and len(ins) == 2:
        a, b = rw.const(ins[0]), rw.const(ins[1])
        out_rank = rw.value(view.node.output).rank
        if a is not None and b is None and a.ndim == 2:
            return 0, 0, _main_rank(rw, view) - 2
        if b is not None and a is None and b.ndim == 2 and out_rank >= 1:
            return 1, 1, _main_rank(rw, view) - 1
    return None


def _main_rank(rw: Rewriter, view: LayerView) -> int:
    types = [rw.value(i).type if i else None for i in view.main_inputs]
    return infer_types(view.main, types, view.main_attrs)[1][0].rank


def _cut_operand(rw: Rewriter, name: str, axis: int, rank: int, lo: int, hi: int, full: int) -> str:
    c = rw.const(name)
    if c is None:
        return name
    a = c.reshape((1,) * (rank - c.ndim) + c.shape)
    if a.shape[axis] != full:
        return name
    return rw.constant(a[(slice(None),) * axis + (slice(lo, hi),)], f"{name}/{lo}")


def _pieces(
    rw: Rewriter, node: Node, ranges: list[tuple[int, int]], make_main, attrs_for=None
) -> list[str]:
    """One layer per channel range: main inputs from ``make_main(lo, hi, k)``, main attrs from
    ``attrs_for(k)`` (default: the layer's), the epilogue up to POST_ACT cut per channel."""
    view = LayerView(node)
    rank = _main_rank(rw, view)
    out_axis = 1 if view.main == "conv" else _weight(view, rw)[2]
    full = sum(h - l for l, h in ranges)
    outs = []
    for k, (lo, hi) in enumerate(ranges):
        main_inputs = make_main(lo, hi, k)
        inputs = list(main_inputs)
        steps = []
        for s in view.epilogue:
            if s.slot >= Slot.TRANSPOSE:
                continue
            operands = []
            for i in s.operands:
                if i < 0:
                    operands.append(-1)
                    continue
                operands.append(len(inputs))
                inputs.append(_cut_operand(rw, node.inputs[i], out_axis, rank, lo, hi, full))
            steps.append(EpilogueStep(s.slot, s.op, s.attrs, tuple(operands), s.origin))
        main_attrs = attrs_for(k) if attrs_for is not None else view.main_attrs
        attrs = layer_attrs(
            view.main, main_attrs, len(main_inputs), steps, view.layer_type, view.main_origin
        )
        outs.append(
            rw.add(
                "ane_layer",
                inputs,
                attrs,
                hint=f"{node.name}/part{k}",
                origin=node.origin,
                before=node,
            )
        )
    return outs


def _join(rw: Rewriter, node: Node, parts: list[str], axis: int) -> None:
    """Replace ``node`` by a concat layer over ``parts`` carrying its late epilogue steps."""
    view = LayerView(node)
    late = [
        EpilogueStep(s.slot, s.op, s.attrs, (), s.origin)
        for s in view.epilogue
        if s.slot >= Slot.TRANSPOSE
    ]
    attrs = layer_attrs("concat", {"axis": axis}, len(parts), late, "concat", ())
    types = [rw.value(p).type for p in parts]
    norm, _ = infer_types("ane_layer", types, attrs)
    origin = tuple(dict.fromkeys(o for step in late for o in step.origin))
    rw.put(Node("ane_layer", node.name, tuple(parts), node.outputs, norm, origin))


def _balanced(total: int, pieces: int) -> list[tuple[int, int]]:
    size = math.ceil(total / pieces)
    return [(lo, min(lo + size, total)) for lo in range(0, total, size)]


def _split_channels(rw: Rewriter, node: Node) -> bool:
    view = LayerView(node)
    found = _weight(view, rw)
    if found is None:
        return False
    wi, w_axis, out_axis = found
    w = rw.const(view.main_inputs[wi])
    channels = w.shape[w_axis]
    lim = rw.ctx.target.limits.max_channels
    group = view.main_attrs.get("group", 1) if view.main == "conv" else 1
    nbytes = w.size * FP16_BYTES
    pieces = max(math.ceil(channels / lim), math.ceil(nbytes / rw.ctx.target.kmem_cap_bytes))
    if pieces <= 1 or group != 1:
        return False
    ranges = _balanced(channels, pieces)

    def make_main(lo: int, hi: int, k: int) -> list[str]:
        ins = list(view.main_inputs)
        part = w[(slice(None),) * w_axis + (slice(lo, hi),)]
        ins[wi] = rw.constant(part, f"{view.main_inputs[wi]}/part{k}")
        return ins

    parts = _pieces(rw, node, ranges, make_main)
    _join(rw, node, parts, out_axis)
    why = (
        f"{channels} output channels > {lim}"
        if channels > lim
        else f"{nbytes / 2**20:.0f} MiB of weights > the kernel-memory cap"
    )
    rw.ctx.event(
        node.origin, "split",
        f"split into {len(ranges)} layers of <= {ranges[0][1]} output channels ({why} on {rw.ctx.target.name})",
        layer=node.name,
    )  # fmt: skip
    rw.ctx.count("layers split along output channels")
    return True


def _split_groups(rw: Rewriter, node: Node) -> bool:
    view = LayerView(node)
    if view.main != "conv" or not rw.is_const(view.main_inputs[1]):
        return False
    group = view.main_attrs["group"]
    cap = rw.ctx.target.limits.max_groups
    if group <= cap:
        return False
    x = view.main_inputs[0]
    w = rw.const(view.main_inputs[1])
    cin, mg = rw.shape(x)[1] // group, w.shape[0] // group
    spans = _balanced(group, math.ceil(group / cap))
    ranges = [(g0 * mg, g1 * mg) for g0, g1 in spans]

    def make_main(lo: int, hi: int, k: int) -> list[str]:
        g0, g1 = spans[k]
        sl = layer_attrs(
            "slice",
            {"starts": (g0 * cin,), "ends": (g1 * cin,), "axes": (1,)},
            1,
            (),
            "texture",
            (),
        )
        xs = rw.add(
            "ane_layer", [x], sl, hint=f"{node.name}/in{k}", origin=node.origin, before=node
        )
        wk = rw.constant(w[lo:hi], f"{view.main_inputs[1]}/g{k}")
        return [xs, wk]

    parts = _pieces(
        rw,
        node,
        ranges,
        make_main,
        lambda k: {**view.main_attrs, "group": spans[k][1] - spans[k][0]},
    )
    _join(rw, node, parts, 1)
    rw.ctx.event(
        node.origin,
        "split",
        f"split into {len(parts)} convs of <= {cap} groups ({group} > {cap})",
        layer=node.name,
    )
    rw.ctx.count("convs split by groups")
    return True


def legalize(graph: Graph, ctx: PassContext) -> Graph:
    """Split engine layers over the target's channel, kernel-memory and group limits."""
    rw = Rewriter(graph, ctx)
    for node in graph.nodes:
        if node.op == "ane_layer" and rw.has(node.name):
            _split_channels(rw, rw.node(node.name)) or _split_groups(rw, rw.node(node.name))
    return rw.build()
