"""Lower anekit's engine layers (``ane_layer`` nodes) to H13 engine passes.

One pass per task descriptor: a neural-engine multiply-accumulate (conv, with its bias and
a relu), a neural-engine pass-through (relu, sigmoid through the activation table, or a
concat part copied to its channel offset), or a planar-engine element-wise add/mul of two
live tensors. Layers the emitter has no form for are refused naming the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from anekit.errors import AnekitError
from anekit.ir.engine import Slot
from anekit.ir.graph import Graph, Node

MAX_LANES = 16
ACTIVATIONS = ("relu", "sigmoid")


class EmitError(AnekitError):
    """An engine layer the H13 emitter cannot lower."""


@dataclass(frozen=True)
class Buffer:
    """A DRAM tensor [C, H, W] fp16: a graph input, output or an intermediate."""

    name: str
    role: str  # "input", "output" or "scratch"
    channels: int
    height: int
    width: int

    @property
    def row_stride(self) -> int:
        return -(-self.width * 2 // 64) * 64

    @property
    def plane_stride(self) -> int:
        return self.height * self.row_stride

    @property
    def size(self) -> int:
        return self.channels * self.plane_stride


@dataclass
class Pass:
    kind: str  # "conv", "pass", "add", "mul"
    src1: str
    dst: str
    cin: int
    cout: int
    hin: int
    win: int
    hout: int
    wout: int
    src2: str | None = None
    dst_channel: int = 0  # first output channel written (concat parts)
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    groups: int = 1
    activation: str = "none"
    weights: np.ndarray | None = None  # [Cout, Cin/groups, Kh, Kw] fp16
    bias: np.ndarray | None = None  # [Cout] fp16
    origin: tuple[str, ...] = field(default_factory=tuple)


@dataclass
class Lowered:
    buffers: dict[str, Buffer]
    passes: list[Pass]
    inputs: list[str]
    outputs: dict[str, str]  # graph output name -> buffer name


def engine_shape(shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(C, H, W) of a tensor as the engine lays it out: [1, C, H, W], or [1, C] as C x 1 x 1."""
    if len(shape) == 4 and shape[0] == 1:
        return int(shape[1]), int(shape[2]), int(shape[3])
    if len(shape) == 2 and shape[0] == 1:
        return int(shape[1]), 1, 1
    return None


def _shape(graph: Graph, name: str, node: Node) -> tuple[int, int, int]:
    shape = engine_shape(graph.value(name).shape)
    if shape is None:
        raise EmitError(
            f"the H13 emitter lowers [1, C, H, W] and [1, C] tensors; '{name}' is "
            f"{list(graph.value(name).shape)}",
            where=f"node '{node.name}'",
        )
    return shape


def _is_layout_alias(graph: Graph, node: Node) -> bool:
    """A reshape layer that leaves the engine layout as it is ([1, K] <-> [1, K, 1, 1])."""
    if node.op != "ane_layer" or node.attrs["main"] != "reshape" or node.attrs["epilogue"]:
        return False
    before = engine_shape(graph.value(node.inputs[0]).shape)
    return before is not None and before == engine_shape(graph.value(node.outputs[0]).shape)


def lower(graph: Graph) -> Lowered:
    alias: dict[str, str] = {}
    for node in graph.nodes:
        if node.op == "identity" or _is_layout_alias(graph, node):
            alias[node.outputs[0]] = alias.get(node.inputs[0], node.inputs[0])
    outputs = {o.name: alias.get(o.name, o.name) for o in graph.outputs}
    buffers: dict[str, Buffer] = {}
    dummy = Node("identity", "graph", (), ())
    for value in graph.inputs:
        buffers[value.name] = Buffer(value.name, "input", *_shape(graph, value.name, dummy))
    for public, name in outputs.items():
        if name not in buffers:
            buffers[name] = Buffer(f"{public}@output", "output", *_shape(graph, name, dummy))
    passes: list[Pass] = []
    for node in graph.nodes:
        if node.op == "identity" or _is_layout_alias(graph, node):
            continue
        if node.op != "ane_layer":
            raise EmitError(
                f"op '{node.op}' is not an engine layer; the H13 emitter lowers ane_layer nodes",
                where=f"node '{node.name}'",
                hint="compile it for m1 first, so its ops fuse into engine layers: "
                "anekit.compile(model, 'm1').run(feeds, 'engine'), or anekit compile MODEL -t m1 "
                "--emit hwx -o DIR and anekit run DIR/segment0.hwx",
            )
        node = node.with_(inputs=tuple(alias.get(i, i) for i in node.inputs))
        out = node.outputs[0]
        if out not in buffers:
            buffers[out] = Buffer(f"{out}@scratch", "scratch", *_shape(graph, out, node))
        passes += _lower_layer(graph, node, buffers)
    return Lowered(buffers, passes, [v.name for v in graph.inputs], outputs)


def _epilogue(node: Node, graph: Graph) -> tuple[np.ndarray | None, str]:
    """(per-channel bias or None, activation) from the layer's filled slots."""
    bias, activation = None, "none"
    for step in node.attrs["epilogue"]:
        if step.slot == Slot.GOC and step.op == "goc":
            gain_at, offset_at = (step.operands + (-1, -1))[:2]
            if gain_at >= 0:
                raise EmitError(
                    "a gain/offset with a gain (scale) has no H13 form in the emitter",
                    where=f"node '{node.name}'",
                )
            if offset_at >= 0:
                const = graph.constant(node.inputs[offset_at])
                if const is None:
                    raise EmitError("the bias must be a constant", where=f"node '{node.name}'")
                bias = np.asarray(const, np.float32).reshape(-1)
        elif (
            step.slot == Slot.TRANSPOSE and step.op == "reshape" and _same_layout(node, graph, step)
        ):
            continue  # [1, C, 1, 1] -> [1, C]: the engine layout does not change
        elif step.slot in (Slot.PRE_ACT, Slot.POST_ACT) and step.op in ACTIVATIONS:
            if activation != "none":
                raise EmitError("two activations in one layer", where=f"node '{node.name}'")
            activation = step.op
        else:
            raise EmitError(
                f"epilogue step {step.describe()} has no H13 form in the emitter",
                where=f"node '{node.name}'",
            )
    return bias, activation


def _same_layout(node: Node, graph: Graph, step) -> bool:
    target = engine_shape(tuple(step.attrs.get("shape", ())))
    return target is not None and target == engine_shape(graph.value(node.outputs[0]).shape)


def _lower_layer(graph: Graph, node: Node, buffers: dict[str, Buffer]) -> list[Pass]:
    main, attrs = node.attrs["main"], node.attrs["main_attrs"]
    bias, activation = _epilogue(node, graph)
    out = node.outputs[0]
    cout, hout, wout = _shape(graph, out, node)
    where = f"node '{node.name}'"
    src = node.inputs[0]
    if main in ("conv", "identity") and (main == "conv" or bias is not None):
        cin, hin, win = _shape(graph, src, node)
        if main == "identity":  # a bias-only gain/offset: a depthwise 1x1 conv of ones
            weights = np.ones((cout, 1, 1, 1), np.float32)
            groups, strides, pads = cout, (1, 1), (0, 0, 0, 0)
        else:
            weights = graph.constant(node.inputs[1])
            if weights is None:
                raise EmitError("the kernel must be a constant", where=where)
            groups = int(attrs["group"])
            strides, pads = tuple(attrs["strides"]) or (1, 1), tuple(attrs["pads"]) or (0,) * 4
            if any(d != 1 for d in attrs.get("dilations") or ()):
                raise EmitError("dilated convolution has no H13 form in the emitter", where=where)
        if len(pads) != 4 or pads[0] != pads[2] or pads[1] != pads[3]:
            raise EmitError(f"asymmetric padding {list(pads)} has no H13 form", where=where)
        lut_after = activation == "sigmoid"
        target = out
        if lut_after:  # the activation table needs its own pass after the conv
            target = f"{out}.conv"
            buffers[target] = Buffer(f"{target}@scratch", "scratch", cout, hout, wout)
        passes = [
            Pass("conv", src, target, cin, cout, hin, win, hout, wout,
                 kernel=(weights.shape[2], weights.shape[3]), stride=(strides[0], strides[1]),
                 padding=(pads[0], pads[1]), groups=groups,
                 activation="none" if lut_after else activation,
                 weights=np.asarray(weights, np.float32).astype(np.float16),
                 bias=None if bias is None else bias.astype(np.float16), origin=node.origin)
        ]  # fmt: skip
        if lut_after:
            passes.append(Pass("pass", target, out, cout, cout, hout, wout, hout, wout,
                               activation="sigmoid", origin=node.origin))  # fmt: skip
        return passes
    if bias is not None:
        raise EmitError(f"a bias after '{main}' has no H13 form in the emitter", where=where)
    if main in ACTIVATIONS:
        c, h, w = _shape(graph, src, node)
        return [Pass("pass", src, out, c, c, h, w, h, w, activation=main, origin=node.origin)]
    if main in ("add", "mul"):
        a, b = node.inputs[0], node.inputs[1]
        if _shape(graph, a, node) != _shape(graph, b, node) or graph.is_constant(b):
            raise EmitError(
                f"'{main}' lowers to the planar engine for two live tensors of one shape",
                where=where,
            )
        if activation not in ("none", "relu"):
            raise EmitError(f"'{main}' followed by {activation} has no H13 form", where=where)
        c, h, w = _shape(graph, a, node)
        return [Pass(main, a, out, c, c, h, w, h, w, src2=b, activation=activation,
                     origin=node.origin)]  # fmt: skip
    if main == "concat" and int(attrs["axis"]) == 1 and activation == "none":
        passes, offset = [], 0
        for part in node.inputs:
            c, h, w = _shape(graph, part, node)
            passes.append(Pass("pass", part, out, c, c, h, w, h, w, dst_channel=offset,
                               origin=node.origin))  # fmt: skip
            offset += c
        return passes
    raise EmitError(
        f"engine layer '{main}'"
        + (f" with {activation}" if activation != "none" else "")
        + " has no H13 form in the emitter (it lowers conv with bias and relu/sigmoid, "
        "relu, sigmoid, add, mul and channel concat)",
        where=where,
    )


def lanes_per_group(cout: int) -> int:
    """Output channels per kernel lane: the least power of two that fits Cout in 16 lanes."""
    per_lane = 1
    while -(-cout // per_lane) > MAX_LANES:
        per_lane *= 2
    return per_lane
