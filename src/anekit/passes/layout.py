"""Engine layout: rank <= 3 activations move to rank-4 tensors with channels on axis 1.

A sequence tensor [*lead, S, C] (channels last, as transformers write them) becomes
[prod(lead), C, 1, S], the engine's native [1, C, 1, S] form (FACTS 3); a channels-first
rank-3 tensor [N, C, W] (conv1d) becomes [N, C, 1, W]. Each op that has an engine form
is rewritten to run on these "twins"; a conversion back is added after it for readers
that are not converted, and a twin is made once per value, so consecutive engine ops
hand twins to each other and conversions appear only at the edges. Constant operands
are converted at compile time. Everything here moves data only: numerics are exact.

A constant-weight matmul becomes matmul(W^T, x) on [L, K, S], the form the
matmul-to-conv pass turns into a 1x1 convolution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from anekit.ir.engine import is_activation
from anekit.ir.graph import Graph, Node
from anekit.ir.registry import get_op
from anekit.passes.context import PassContext
from anekit.passes.rewrite import Rewriter


def layer_of(op: str) -> str:
    """The engine layer type the op record declares ("" for none)."""
    return get_op(op).layer_type


_NC_PRODUCERS = frozenset(
    {
        "conv",
        "conv_transpose",
        "max_pool",
        "avg_pool",
        "lp_pool",
        "instance_norm",
        "batch_norm",
        "group_norm",
        "lrn",
    }
)


@dataclass(frozen=True)
class Form:
    """How a tensor of one shape maps to its engine twin: 'seq' (channels last) or 'nc'."""

    kind: str
    shape: tuple[int, ...]

    @property
    def engine_shape(self) -> tuple[int, ...]:
        s = self.shape
        if self.kind == "nc":
            return (s[0], s[1], 1, s[2]) if len(s) == 3 else (s[0], s[1], 1, 1)
        if len(s) == 1:
            return (1, s[0], 1, 1)
        return (int(np.prod(s[:-2], dtype=np.int64)), s[-1], 1, s[-2])

    @property
    def transposes(self) -> bool:
        """A channels-last tensor needs a real transpose unless S or C is 1."""
        return (
            self.kind == "seq"
            and len(self.shape) >= 2
            and self.shape[-1] > 1
            and self.shape[-2] > 1
        )

    def axis(self, a: int) -> int | None:
        """The engine axis of axis ``a`` (None when it is merged away)."""
        r = len(self.shape)
        a %= r
        if self.kind == "nc":
            return (0, 1, 3)[a]
        if r == 1:
            return 1
        if a == r - 1:
            return 1
        if a == r - 2:
            return 3
        return 0 if r == 3 else None


class _Layout:
    def __init__(self, graph: Graph, ctx: PassContext):
        self.rw = Rewriter(graph, ctx)
        self.twins: dict[tuple[str, str, int], str] = {}

    # --- conversions ------------------------------------------------------------------------

    def twin(self, v: str, kind: str, rank: int, at: Node) -> str:
        """The engine form of ``v`` viewed at ``rank`` (unit axes prepended)."""
        key = (v, kind, rank)
        if key in self.twins:
            return self.twins[key]
        rw = self.rw
        shape = (1,) * (rank - rw.value(v).rank) + rw.shape(v)
        form = Form(kind, shape)
        c = rw.const(v)
        if c is not None:
            arr = c.reshape(shape)
            if form.transposes:
                arr = np.swapaxes(arr, -1, -2)
            out = rw.constant(arr.reshape(form.engine_shape), f"{v}/engine")
        else:
            x = v
            if form.transposes:
                perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
                x = rw.add("transpose", [x], {"perm": perm}, hint=f"{v}/to_engine_t", before=at)
            out = rw.add(
                "reshape", [x], {"shape": form.engine_shape}, hint=f"{v}/to_engine", before=at
            )
        self.twins[key] = out
        return out

    def back(self, y_e: str, form: Form, node: Node) -> str:
        """The original-layout value of twin ``y_e``, remembered as having that twin."""
        rw = self.rw
        s = form.shape
        if form.transposes:
            r = rw.add(
                "reshape",
                [y_e],
                {"shape": s[:-2] + (s[-1], s[-2])},
                hint=f"{node.name}/from_engine",
                origin=(),
                before=node,
            )
            perm = tuple(range(len(s) - 2)) + (len(s) - 1, len(s) - 2)
            out = rw.add(
                "transpose", [r], {"perm": perm}, hint=f"{node.name}/from_engine_t", before=node
            )
        else:
            out = rw.add(
                "reshape", [y_e], {"shape": s}, hint=f"{node.name}/from_engine", before=node
            )
        self.twins[(out, form.kind, len(s))] = y_e
        return out

    def kind_of(self, inputs: list[str]) -> str:
        for v in inputs:
            for kind in ("seq", "nc"):
                if (v, kind, self.rw.value(v).rank) in self.twins:
                    return kind
        for v in inputs:
            p = self.rw.producer(v)
            if p is not None and p.op in _NC_PRODUCERS:
                return "nc"
        return "seq"

    def operands_fit(self, inputs: list[str], out: tuple[int, ...], kind: str) -> bool:
        """Every operand's engine form broadcasts to the output's (lead axes all or nothing)."""
        r = len(out)
        for v in inputs:
            s = (1,) * (r - self.rw.value(v).rank) + self.rw.shape(v)
            if kind == "seq" and r >= 3 and s[:-2] not in (out[:-2], (1,) * (r - 2)):
                return False
            if kind == "nc" and s[0] not in (1, out[0]):
                return False
        return True

    # --- per op -------------------------------------------------------------------------------

    def convert(self, node: Node) -> bool:
        rw = self.rw
        if len(node.outputs) != 1 or not rw.value(node.output).dtype.is_float:
            return False
        out = rw.value(node.output)
        if node.op == "matmul":
            return self.matmul(node)
        if node.op == "conv" and out.rank == 3:
            return self.conv1d(node)
        live = [i for i in node.inputs if i and not rw.is_const(i)]
        if not live or out.rank == 0 or out.rank > 3:
            return False
        kind = self.kind_of(live)
        if kind == "nc" and out.rank < 2:
            kind = "seq"
        form = Form(kind, out.shape)
        attrs = dict(node.attrs)
        if is_activation(node.op) and len(node.inputs) == 1:
            ins = [self.twin(node.inputs[0], kind, out.rank, node)]
        elif layer_of(node.op) == "elementwise":
            if not self.operands_fit(list(node.inputs), out.shape, kind):
                return False
            ins = [self.twin(i, kind, out.rank, node) for i in node.inputs]
        elif layer_of(node.op) in ("reduction", "softmax"):
            return self.axis_op(node, form)
        elif node.op in ("concat", "slice"):
            return self.axis_op(node, form)
        else:
            return False
        y_e = rw.add(node.op, ins, attrs, hint=node.name, origin=node.origin, before=node)
        return self.finish(node, y_e, form)

    def finish(self, node: Node, y_e: str, form: Form) -> bool:
        rw = self.rw
        self.twins[(node.output, form.kind, len(form.shape))] = y_e
        out = self.back(y_e, form, node)
        rw.replace_uses(node.output, out)
        rw.ctx.count(f"{node.op} to engine layout")
        return True

    def axis_op(self, node: Node, form: Form) -> bool:
        rw = self.rw
        x = node.inputs[0]
        r = len(form.shape)
        attrs = dict(node.attrs)
        if layer_of(node.op) == "reduction":
            in_form = Form(form.kind, rw.shape(x))
            axes = attrs["axes"] or tuple(range(in_form.shape.__len__()))
            mapped = [in_form.axis(a) for a in axes]
            if None in mapped or attrs["noop_with_empty_axes"] or len(in_form.shape) > 3:
                return False
            keep_form = Form(
                form.kind,
                tuple(
                    1 if i in {a % len(in_form.shape) for a in axes} else d
                    for i, d in enumerate(in_form.shape)
                ),
            )
            y_e = rw.add(
                node.op,
                [self.twin(x, form.kind, len(in_form.shape), node)],
                {"axes": tuple(mapped), "keepdims": True},
                hint=node.name,
                origin=node.origin,
                before=node,
            )
            if attrs["keepdims"]:
                return self.finish(node, y_e, keep_form)
            kept = self.back(y_e, keep_form, node)
            out = rw.add(
                "reshape",
                [kept],
                {"shape": form.shape},
                hint=f"{node.name}/squeeze",
                origin=node.origin,
                before=node,
            )
            rw.replace_uses(node.output, out)
            rw.ctx.count(f"{node.op} to engine layout")
            return True
        if node.op == "softmax":
            a = form.axis(attrs["axis"])
            if a is None:
                return False
            y_e = rw.add(
                "softmax",
                [self.twin(x, form.kind, r, node)],
                {"axis": a},
                hint=node.name,
                origin=node.origin,
                before=node,
            )
            return self.finish(node, y_e, form)
        if node.op == "concat":
            a = form.axis(attrs["axis"])
            if a is None or any(rw.value(i).rank != r for i in node.inputs):
                return False
            ins = [self.twin(i, form.kind, r, node) for i in node.inputs]
            y_e = rw.add(
                "concat", ins, {"axis": a}, hint=node.name, origin=node.origin, before=node
            )
            return self.finish(node, y_e, form)
        # slice
        axes = attrs["axes"] or tuple(range(len(attrs["starts"])))
        mapped = [form.axis(a) for a in axes]
        if None in mapped or rw.value(x).rank != r:
            return False
        attrs["axes"] = tuple(mapped)
        y_e = rw.add(
            "slice",
            [self.twin(x, form.kind, r, node)],
            attrs,
            hint=node.name,
            origin=node.origin,
            before=node,
        )
        return self.finish(node, y_e, form)

    def matmul(self, node: Node) -> bool:
        """x @ W (W constant [K, N]) -> matmul(W^T, x on [L, K, S]) -> [L, N, 1, S]."""
        rw = self.rw
        a, b = node.inputs
        w = rw.const(b)
        if w is None or w.ndim != 2 or rw.is_const(a) or not rw.value(a).dtype.is_float:
            return False
        x_rank = rw.value(a).rank
        out = rw.value(node.output)
        in_form = Form("seq", rw.shape(a))
        out_form = Form("seq", out.shape)
        L, K, _, S = in_form.engine_shape
        x_e = self.twin(a, "seq", x_rank, node)
        x3 = rw.add(
            "reshape",
            [x_e],
            {"shape": (L, K, S)},
            hint=f"{node.name}/in",
            before=node,
        )
        wt = rw.constant(w.T, f"{b}/t")
        y3 = rw.add("matmul", [wt, x3], hint=node.name, origin=node.origin, before=node)
        y_e = rw.add(
            "reshape",
            [y3],
            {"shape": out_form.engine_shape},
            hint=f"{node.name}/out",
            before=node,
        )
        return self.finish(node, y_e, out_form)

    def conv1d(self, node: Node) -> bool:
        """A rank-3 conv [N, C, W] runs as a 2-D conv on [N, C, 1, W]."""
        rw = self.rw
        x, w = node.inputs[:2]
        weight = rw.const(w)
        if weight is None:
            return False
        at = node.attrs
        strides = at["strides"] or (1,)
        pads = at["pads"] or (0, 0)
        dil = at["dilations"] or (1,)
        attrs = {
            "strides": (1, strides[0]),
            "pads": (0, pads[0], 0, pads[1]),
            "dilations": (1, dil[0]),
            "group": at["group"],
        }
        ins = [
            self.twin(x, "nc", 3, node),
            rw.constant(weight.reshape(weight.shape[:2] + (1, weight.shape[2])), f"{w}/2d"),
        ]
        if len(node.inputs) > 2 and node.inputs[2]:
            ins.append(node.inputs[2])
        y_e = rw.add("conv", ins, attrs, hint=node.name, origin=node.origin, before=node)
        return self.finish(node, y_e, Form("nc", rw.value(node.output).shape))


def layout(graph: Graph, ctx: PassContext) -> Graph:
    """Rewrite engine-capable ops on rank <= 3 tensors to rank-4 channels-on-axis-1 twins."""
    state = _Layout(graph, ctx)
    for name in [n.name for n in graph.nodes]:
        if state.rw.has(name):
            state.convert(state.rw.node(name))
    return state.rw.build()
