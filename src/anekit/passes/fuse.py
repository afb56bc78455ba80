"""Epilogue fusion: each engine op becomes an ``ane_layer`` absorbing what follows it, slot by slot.

The guards of ane-compiler table 22.3:
- an elementwise op with one live and one constant operand folds into the gain/offset
  unit (GOC) when the constant is per-channel (axis 1) or a scalar; consecutive affine
  ops merge into one gain and offset ("Must have 2 inputs when convert EW to GOC");
- activations fill the pre- or post-GOC activation slot, in the order they come;
- a following transpose or reshape fills the output-transpose slot, a float cast the
  quantization slot;
- a value read by several nodes (or a graph output) ends the layer: it cannot be fused away;
- a two-live-input elementwise op is a layer of its own (its slots still take what follows);
- concat is a barrier unless it qualifies (see `concat_qualifies`); attention is its own
  layer and a segment cut (the segment pass).
Only conv, matmul, pool, elementwise (including GOC and activation) and a qualifying
concat host an epilogue; the texture and broadcast slots are never filled (no pattern of
table 22.3 targets them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from anekit.ir.engine import (
    EpilogueStep,
    Slot,
    has_engine_form,
    is_activation,
    layer_attrs,
    layer_type_of,
)
from anekit.ir.graph import Graph, Node
from anekit.ir.registry import get_op, infer_types
from anekit.passes.context import PassContext
from anekit.passes.rewrite import Rewriter, live_and_const

EPILOGUE_HOSTS = frozenset({"conv", "deconv", "matmul", "pool", "elementwise", "goc", "neuron"})


def engine_capable(rw: Rewriter, node: Node) -> bool:
    """The op has an engine layer form and all its tensors are floating point."""
    if node.op == "ane_layer" or len(node.outputs) != 1:
        return False
    if not has_engine_form(node.op):
        return False
    present = [bool(i) for i in node.inputs]
    if False in present and True in present[present.index(False) :]:
        return False  # an absent optional input before a present one: no positional form
    tensors = [i for i in node.inputs if i] + [node.output]
    return all(rw.value(t).dtype.is_float for t in tensors) and any(
        not rw.is_const(i) for i in node.inputs if i
    )


def goc_compatible(c: np.ndarray, out_shape: tuple[int, ...]) -> bool:
    """A constant the GOC can apply: a scalar or a per-channel (axis 1) vector for ``out_shape``."""
    if c.ndim > len(out_shape) or c.dtype.kind != "f":
        return False
    a = c.reshape((1,) * (len(out_shape) - c.ndim) + c.shape)
    return all(d == 1 or (i == 1 and d == out_shape[1]) for i, d in enumerate(a.shape))


def _aligned(c: np.ndarray, rank: int) -> np.ndarray:
    # astype without a copy: an fp32 constant stays a view of its source weight, which is
    # how the weight map finds it (anekit.codegen.weight_map)
    return c.reshape((1,) * (rank - c.ndim) + c.shape).astype(np.float32, copy=False)


@dataclass
class _Affine:
    """y * gain + offset accumulated from consecutive constant elementwise ops."""

    gain: np.ndarray | None = None
    offset: np.ndarray | None = None
    origin: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.gain is None and self.offset is None

    def merge(self, op: str, c: np.ndarray, const_first: bool) -> bool:
        """Compose y = op(y, c) (or op(c, y)); False if that is not affine in y."""
        g, o = self.gain, self.offset
        if op == "mul":
            g, o = (c if g is None else g * c), (None if o is None else o * c)
        elif op == "add":
            o = c if o is None else o + c
        elif op == "sub" and not const_first:
            o = -c if o is None else o - c
        elif op == "sub":
            g = -np.ones((1,) * c.ndim, np.float32) if g is None else -g
            o = c if o is None else c - o
        elif op == "div" and not const_first:
            g, o = (np.float32(1.0) / c if g is None else g / c), (None if o is None else o / c)
        else:
            return False
        self.gain, self.offset = g, o
        return True


@dataclass
class _Layer:
    """A layer being assembled: the main op, its affine (when the main is a GOC), the slots."""

    main: Node
    main_op: str
    main_inputs: list[str]
    main_attrs: dict
    out: str
    rank: int
    main_affine: _Affine | None = None  # set when the main op itself is a gain/offset
    goc: _Affine = field(default_factory=_Affine)  # the GOC slot
    steps: dict[Slot, tuple[str, dict, list[str]]] = field(default_factory=dict)
    absorbed: list[Node] = field(default_factory=list)

    def affine_target(self) -> _Affine | None:
        """Where a constant elementwise op goes: the main GOC, the GOC slot, or nowhere."""
        if self.main_affine is not None and not self.steps and self.goc.empty:
            return self.main_affine
        if any(s > Slot.GOC for s in self.steps):
            return None
        return self.goc

    def activation_slot(self) -> Slot | None:
        if any(s >= Slot.POST_ACT for s in self.steps):
            return None
        if not self.goc.empty or Slot.PRE_ACT in self.steps:
            return Slot.POST_ACT
        return Slot.PRE_ACT


def _start(rw: Rewriter, node: Node) -> _Layer:
    rank = rw.value(node.output).rank
    inputs = list(node.inputs)
    while inputs and not inputs[-1]:  # absent trailing optional inputs
        inputs.pop()
    layer = _Layer(node, node.op, inputs, dict(node.attrs), node.output, rank)
    found = live_and_const(rw, node) if get_op(node.op).affine else None
    if found is not None and goc_compatible(found[1], rw.shape(node.output)):
        live, c, ci = found
        affine = _Affine(origin=list(node.origin))
        if rw.shape(live) == rw.shape(node.output) and affine.merge(
            node.op, _aligned(c, rank), ci == 0
        ):
            layer.main_op, layer.main_inputs, layer.main_attrs = "goc", [live], {}
            layer.main_affine = affine
    if (
        node.op == "conv"
        and len(node.inputs) > 2
        and node.inputs[2]
        and rw.is_const(node.inputs[2])
    ):
        # the conv bias is the GOC offset (ane-compiler: "the bias becomes the gain-offset control")
        layer.main_inputs = list(node.inputs[:2])
        layer.goc.merge(
            "add",
            _aligned(rw.const(node.inputs[2]).reshape((1, -1) + (1,) * (rank - 2)), rank),
            False,
        )
        layer.goc.origin += [o for o in node.origin if o in rw.ctx.absorbed]
    return layer


def _absorb(rw: Rewriter, layer: _Layer, c: Node) -> Slot | None:
    """Take consumer ``c`` into the layer; return the slot it went to (None: not fusable)."""
    if not engine_capable(rw, c):
        return None
    if get_op(c.op).affine:
        found = live_and_const(rw, c)
        if found is None or found[0] != layer.out or rw.shape(c.output) != rw.shape(layer.out):
            return None
        target = layer.affine_target()
        if target is None or not goc_compatible(found[1], rw.shape(c.output)):
            return None
        if not target.merge(c.op, _aligned(found[1], layer.rank), found[2] == 0):
            return None
        target.origin += list(c.origin)
        return Slot.GOC
    if is_activation(c.op) and len(c.inputs) == 1:
        slot = layer.activation_slot()
        if slot is not None:
            layer.steps[slot] = (c.op, dict(c.attrs), list(c.origin))
        return slot
    if c.op in ("transpose", "reshape") and not any(s >= Slot.TRANSPOSE for s in layer.steps):
        if rw.value(c.output).rank > rw.ctx.target.limits.max_rank:
            return None
        layer.steps[Slot.TRANSPOSE] = (c.op, dict(c.attrs), list(c.origin))
        return Slot.TRANSPOSE
    if c.op == "cast" and Slot.QUANT not in layer.steps:
        layer.steps[Slot.QUANT] = (c.op, dict(c.attrs), list(c.origin))
        return Slot.QUANT
    return None


def concat_qualifies(rw: Rewriter, node: Node) -> bool:
    """IsFusableConcat, as anekit defines it: the target compiles concat, it joins rank-4
    tensors on the channel axis, and every input is an engine layer read only by it (the
    producers can write straight into the joined buffer)."""
    if not rw.ctx.target.features.concat or rw.value(node.output).rank != 4:
        return False
    if node.attrs["axis"] % 4 != 1:
        return False
    for i in node.inputs:
        p = rw.producer(i)
        if p is None or p.op != "ane_layer" or not rw.single_use(i):
            return False
    return True


def _constants(rw: Rewriter, name: str, affine: _Affine, dtype: np.dtype) -> list[str]:
    """The gain and offset as constants of the layer's float type (composed in fp32; an fp16
    layer takes them in fp16, like its other operands)."""
    return [
        "" if c is None else rw.constant(np.asarray(c, dtype=dtype), f"{name}/{part}")
        for part, c in (("gain", affine.gain), ("offset", affine.offset))
    ]


def _emit(rw: Rewriter, layer: _Layer) -> Node:
    """Replace the main node and the absorbed ones by one ane_layer node."""
    main = layer.main
    # an activation with no gain/offset after it is a post activation (canonical form)
    if Slot.PRE_ACT in layer.steps and Slot.POST_ACT not in layer.steps and layer.goc.empty:
        layer.steps[Slot.POST_ACT] = layer.steps.pop(Slot.PRE_ACT)
    inputs = list(layer.main_inputs)
    dtype = rw.value(layer.out).dtype.numpy
    if layer.main_affine is not None:
        affine = layer.main_affine
        if affine.gain is None:  # the layer op's inputs are positional: a unit gain (exact)
            affine.gain = np.ones((1,) * layer.rank, np.float32)
        inputs += [c for c in _constants(rw, main.name, affine, dtype) if c]
    n_main = len(inputs)
    steps = []
    if not layer.goc.empty:
        operands = []
        for c in _constants(rw, f"{main.name}/goc", layer.goc, dtype):
            operands.append(len(inputs) if c else -1)
            if c:
                inputs.append(c)
        steps.append(
            EpilogueStep(
                Slot.GOC, "goc", {}, tuple(operands), tuple(dict.fromkeys(layer.goc.origin))
            )
        )
    for slot, (op, attrs, origin) in layer.steps.items():
        steps.append(EpilogueStep(slot, op, attrs, (), tuple(origin)))
    main_origin = [o for o in main.origin if o not in rw.ctx.absorbed]
    if layer.main_affine is not None:
        main_origin = list(
            dict.fromkeys(
                [*main_origin, *(o for o in layer.main_affine.origin if o not in rw.ctx.absorbed)]
            )
        )
    attrs = layer_attrs(
        layer.main_op, layer.main_attrs, n_main, steps, layer_type_of(layer.main_op), main_origin
    )
    origin = tuple(dict.fromkeys([*main.origin, *(o for n in layer.absorbed for o in n.origin)]))
    types = [rw.value(i).type if i else None for i in inputs]
    norm, (out_t,) = infer_types("ane_layer", types, attrs)
    if out_t != rw.value(layer.out).type:
        raise AssertionError(
            f"layer {main.name} infers {out_t}, expected {rw.value(layer.out).type}"
        )
    for n in reversed(layer.absorbed):
        rw.detach(n)
    # the layer is named after the original node of its main op when that name is free
    name = main_origin[0] if main_origin and not rw.has(main_origin[0]) else main.name
    new = Node("ane_layer", name, tuple(inputs), (layer.out,), norm, origin)
    if name == main.name:
        rw.put(new)
    else:
        rw.insert(new, before=main)
        rw.detach(main)
    return new


def _log(rw: Rewriter, layer: _Layer, node: Node) -> None:
    for step in node.attrs["epilogue"]:
        rw.ctx.event(
            step.origin,
            "folded",
            f"{step.slot.name.lower()} slot of layer '{node.name}'",
            layer=node.name,
        )
    rw.ctx.count(f"{node.attrs['layer_type']} layers")
    if layer.absorbed:
        rw.ctx.count("ops folded into epilogues", len(layer.absorbed))


def fuse_epilogues(graph: Graph, ctx: PassContext) -> Graph:
    """Turn every engine-capable op into an ane_layer with its fusable followers absorbed."""
    rw = Rewriter(graph, ctx)
    for name in [n.name for n in graph.nodes]:
        if not rw.has(name):
            continue
        node = rw.node(name)
        if not engine_capable(rw, node):
            continue
        layer = _start(rw, node)
        host = layer_type_of(layer.main_op) in EPILOGUE_HOSTS or (
            node.op == "concat" and concat_qualifies(rw, node)
        )
        while host and not rw.is_output(layer.out):
            c = rw.sole_user(layer.out)
            if c is None:
                break
            if _absorb(rw, layer, c) is None:
                break
            layer.absorbed.append(c)
            layer.out = c.output
        _log(rw, layer, _emit(rw, layer))
    return rw.build()
