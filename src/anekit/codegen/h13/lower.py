"""Lower anekit's engine layers (``ane_layer`` nodes) to H13 engine passes.

One pass per task descriptor: a neural-engine multiply-accumulate (conv, with its bias, a
relu or an activation table), a neural-engine pass-through (a copy, a relu or an
activation table; a concat part copied to its channel offset), or a planar-engine
element-wise add/mul/max/min of two live tensors. Layers built from these:

- grouped, depthwise, strided and dilated convolutions (a dilated kernel is written out
  with zeros between its taps), matmuls the middle-end made 1x1 convolutions;
- a gain/offset folded into the convolution before it, or a depthwise 1x1 convolution;
- average pooling (global or windowed) as a depthwise convolution of 1/(window), max
  pooling as one one-hot depthwise convolution per window position and a planar max;
- tanh and sigmoid through the activation table, GELU as x * Phi(x) (table, then a mul);
- layers wider than one pass: output channels in groups of at most 2048 (OCGSize's three
  bits), element-wise passes in row bands that fit the 2 MiB L2.

A layer with no H13 form raises `NoH13Form` (the program chain runs it on the CPU); a
layer that has a form but exceeds a register field raises `EmitError` naming the limit.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import numpy as np

from anekit.errors import AnekitError
from anekit.formats.hwx.h13 import L2_BYTES, L2_UNIT, MAX_LANES, field_limit
from anekit.ir.engine import Slot
from anekit.ir.graph import Graph, Node

TABLE_ACTIVATIONS = ("sigmoid", "tanh")
MAX_LANE_GROUP = 1 << field_limit("Common.ConvCfg.OCGSize")  # output channels per lane
MAX_CONV_COUT = MAX_LANES * MAX_LANE_GROUP
PLANAR = {"add": "add", "mul": "mul", "maximum": "max", "minimum": "min"}


class EmitError(AnekitError):
    """An engine layer the H13 emitter cannot lower."""


class NoH13Form(EmitError):
    """An engine layer with no H13 form: a program chain runs it on the CPU."""


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
    kind: str  # "conv", "pass", or a planar op: "add", "mul", "max", "min"
    src1: str
    dst: str
    cin: int
    cout: int
    hin: int
    win: int
    hout: int
    wout: int
    src2: str | None = None
    dst_channel: int = 0  # first output channel written (concat parts, channel groups)
    src_channel: int = 0  # first input channel read (a later part of a grouped conv)
    row0: int = 0  # first row of a row band (sources and destination)
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    groups: int = 1
    activation: str = "none"  # "none", "relu" or "lut"
    table: str | None = None  # the activation table's function when activation is "lut"
    weights: np.ndarray | None = None  # [Cout, Cin/groups, Kh, Kw] fp16
    bias: np.ndarray | None = None  # [Cout] fp16
    node: str = ""
    origin: tuple[str, ...] = field(default_factory=tuple)

    @property
    def planar(self) -> bool:
        return self.kind not in ("conv", "pass")


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
        raise NoH13Form(
            f"the H13 emitter lowers [1, C, H, W] and [1, C] tensors; '{name}' is "
            f"{list(graph.value(name).shape)}",
            where=f"node '{node.name}'",
        )
    if 0 in shape:
        raise EmitError(
            f"tensor '{name}' has no elements ({list(graph.value(name).shape)}); an engine "
            "program moves at least one element",
            where=f"node '{node.name}'",
            hint="give the model's inputs non-zero sizes (--shape NAME=1,C,H,W)",
        )
    return shape


def _is_layout_alias(graph: Graph, node: Node) -> bool:
    """A reshape layer that leaves the engine layout as it is ([1, K] <-> [1, K, 1, 1])."""
    if node.op != "ane_layer" or node.attrs["main"] != "reshape" or node.attrs["epilogue"]:
        return False
    before = engine_shape(graph.value(node.inputs[0]).shape)
    return before is not None and before == engine_shape(graph.value(node.outputs[0]).shape)


def is_alias(graph: Graph, node: Node) -> bool:
    """A node that moves no data on the engine (an identity, a layout-preserving reshape)."""
    return node.op == "identity" or _is_layout_alias(graph, node)


def lower(graph: Graph) -> Lowered:
    alias: dict[str, str] = {}
    for node in graph.nodes:
        if is_alias(graph, node):
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
    flattened: dict[str, tuple[int, int, int]] = {}  # values kept unflattened: their (C, H, W)
    for node in graph.nodes:
        if is_alias(graph, node):
            continue
        if node.op != "ane_layer":
            raise NoH13Form(
                f"op '{node.op}' is not an engine layer; the H13 emitter lowers ane_layer nodes",
                where=f"node '{node.name}'",
                hint="compile it for m1 first, so its ops fuse into engine layers: "
                "anekit.compile(model, 'm1').run(feeds, 'engine'), or anekit compile MODEL -t m1 "
                "--emit hwx -o DIR and anekit run DIR",
            )
        node = node.with_(inputs=tuple(alias.get(i, i) for i in node.inputs))
        out = node.outputs[0]
        if out not in buffers:
            buffers[out] = Buffer(f"{out}@scratch", "scratch", *_shape(graph, out, node))
        layer = _Layer(graph, node, buffers, flattened)
        passes += [replace(p, node=node.name, origin=node.origin) for p in layer.lower()]
    return Lowered(buffers, passes, [v.name for v in graph.inputs], outputs)


def _reads_flat(graph: Graph, node: Node, value: str) -> bool:
    """`node` reads `value` only as the input of an ungrouped, unpadded 1x1 convolution."""
    if node.op != "ane_layer" or node.attrs["main"] != "conv" or node.inputs[0] != value:
        return False
    if value in node.inputs[1:]:
        return False
    attrs = node.attrs["main_attrs"]
    weights = graph.constant(node.inputs[1])
    return (int(attrs["group"]) == 1 and not any(attrs["pads"] or ())
            and all(s == 1 for s in attrs["strides"] or ())
            and weights is not None and weights.ndim == 4 and weights.shape[2:] == (1, 1))  # fmt: skip


def no_h13_form(graph: Graph, node: Node) -> str | None:
    """Why `node` has no H13 form (it runs on the CPU in a program chain), or None.

    A layer that has a form but exceeds a register field raises EmitError instead."""
    if is_alias(graph, node):
        return None
    if node.op != "ane_layer":
        return f"op '{node.op}' is not an engine layer"
    buffers: dict[str, Buffer] = {}
    try:
        for name in (*node.inputs, *node.outputs):
            if name and not graph.is_constant(name):
                buffers[name] = Buffer(name, "scratch", *_shape(graph, name, node))
        _Layer(graph, node, buffers).lower()
    except NoH13Form as exc:
        return exc.message
    return None


class _Layer:
    """One engine layer's passes: its main op, then its epilogue steps in slot order."""

    def __init__(self, graph: Graph, node: Node, buffers: dict[str, Buffer],
                 flattened: dict[str, tuple[int, int, int]] | None = None):  # fmt: skip
        self.graph, self.node, self.buffers = graph, node, buffers
        self.flattened = {} if flattened is None else flattened
        self.where = f"node '{node.name}'"
        self.scratch = itertools.count()

    def fail(self, message: str) -> NoH13Form:
        return NoH13Form(f"{message} has no H13 form", where=self.where)

    def shape(self, name: str) -> tuple[int, int, int]:
        if name in self.buffers:
            b = self.buffers[name]
            return b.channels, b.height, b.width
        return _shape(self.graph, name, self.node)

    def fresh(self, c: int, h: int, w: int) -> str:
        name = f"{self.node.outputs[0]}.{next(self.scratch)}"
        self.buffers[name] = Buffer(f"{name}@scratch", "scratch", c, h, w)
        return name

    def constant(self, index: int, what: str) -> np.ndarray:
        value = self.graph.constant(self.node.inputs[index])
        if value is None:
            raise self.fail(f"a {what} that is not a constant")
        return np.asarray(value, np.float32)

    def per_channel(self, index: int, what: str, channels: int) -> np.ndarray:
        """A constant operand broadcast along channels only ([C], [1, C, 1, 1] or a scalar)."""
        value = self.constant(index, what)
        squeezed = value.reshape(-1) if value.size in (1, channels) else None
        if squeezed is None or (value.ndim == 4 and value.shape[2:] != (1, 1)):
            raise self.fail(f"a {what} of shape {list(value.shape)} (not per channel)")
        return np.broadcast_to(squeezed, (channels,)).astype(np.float32)

    # --- the layer ------------------------------------------------------------------------

    def lower(self) -> list[Pass]:
        node = self.node
        out = node.outputs[0]
        steps = list(node.attrs["epilogue"])
        passes, value = self.main(steps)
        for step in steps:
            passes, value = self.step(step, passes, value)
        if value == out:
            return passes
        if out in self.flattened:  # the layer's output is held as its unflattened value
            role = self.buffers[out].role
            self.buffers[out] = Buffer(self.buffers[out].name, role, *self.flattened[out])
        if not any(p.dst == value for p in passes):  # the layer only renames: copy it
            c, h, w = self.shape(value)
            return passes + [Pass("pass", value, out, c, c, h, w, h, w)]
        for p in passes:
            if p.dst == value:
                p.dst = out
        del self.buffers[value]
        return passes

    def main(self, steps: list) -> tuple[list[Pass], str]:
        """The main op's passes and the buffer holding its result (the input if none)."""
        node, main = self.node, self.node.attrs["main"]
        attrs = node.attrs["main_attrs"]
        src = node.inputs[0]
        if main == "identity":
            return [], src
        if main in TABLE_ACTIVATIONS + ("relu", "gelu"):
            return self.activation(main, dict(attrs), [], src)
        if main == "conv":
            return self.conv(attrs, steps)
        if main in PLANAR and node.attrs["n_main"] == 2:
            return self.binary(PLANAR[main])
        if main == "concat" and int(attrs["axis"]) == 1:
            return self.concat()
        if main == "max_pool" and not attrs.get("return_indices"):
            return self.max_pool(attrs)
        if main == "avg_pool":
            return self.avg_pool(attrs)
        if main in ("reduce_mean", "reduce_sum", "reduce_max"):
            return self.global_pool(main, attrs)
        raise self.fail(f"engine layer '{main}'")

    def step(self, step, passes: list[Pass], value: str) -> tuple[list[Pass], str]:
        if step.slot == Slot.GOC and step.op == "goc":
            gain_at, offset_at = (step.operands + (-1, -1))[:2]
            c = self.shape(value)[0]
            gain = self.per_channel(gain_at, "gain", c) if gain_at >= 0 else None
            offset = self.per_channel(offset_at, "offset", c) if offset_at >= 0 else None
            return self.gain_offset(gain, offset, passes, value)
        if step.slot == Slot.TRANSPOSE and step.op == "reshape" and self.same_layout(step, value):
            return passes, value  # [1, C, 1, 1] <-> [1, C]: the engine layout does not change
        if (
            step.slot == Slot.TRANSPOSE
            and step.op == "reshape"
            and self.flattens_into_convs(step, value)
        ):
            self.flattened[self.node.outputs[0]] = self.shape(value)
            return passes, value
        if step.slot in (Slot.PRE_ACT, Slot.POST_ACT):
            return self.activation(step.op, dict(step.attrs), passes, value)
        raise self.fail(f"epilogue step {step.describe()}")

    def flattens_into_convs(self, step, value: str) -> bool:
        """A flatten [C, H, W] -> [C*H*W] read only by 1x1 convolutions (Linear layers),
        which can read the unflattened value with an H x W kernel instead."""
        c, h, w = self.shape(value)
        target = engine_shape(tuple(step.attrs.get("shape", ())))
        out = self.node.outputs[0]
        limit = field_limit("Common.ConvCfg.Kh")
        if target != (c * h * w, 1, 1) or max(h, w) > limit:
            return False
        if out in {v.name for v in self.graph.outputs}:
            return False
        consumers = self.graph.consumers(out)
        return bool(consumers) and all(
            _reads_flat(self.graph, n, out) and no_h13_form(self.graph, n) is None
            for n in consumers
        )

    def same_layout(self, step, value: str) -> bool:
        """A reshape of `value` that leaves the engine layout as it is."""
        target = engine_shape(tuple(step.attrs.get("shape", ())))
        return target is not None and target == self.shape(value)

    # --- main ops -------------------------------------------------------------------------

    def conv(self, attrs, steps: list) -> tuple[list[Pass], str]:
        src = self.node.inputs[0]
        cin, hin, win = self.shape(src)
        weights = self.constant(1, "convolution kernel")
        has_bias = self.node.attrs["n_main"] > 2 and self.node.inputs[2]
        bias = self.constant(2, "convolution bias").reshape(-1) if has_bias else None
        groups = int(attrs["group"])
        strides = tuple(attrs["strides"]) or (1, 1)
        pads = tuple(attrs["pads"]) or (0, 0, 0, 0)
        dilations = tuple(attrs.get("dilations") or ()) or (1, 1)
        if weights.ndim != 4:
            raise self.fail(f"a {weights.ndim}-d convolution kernel")
        if src in self.flattened:  # a Linear layer over an unflattened [C, H, W] value
            cin, hin, win = self.flattened[src]
            weights = weights.reshape(weights.shape[0], cin, hin, win)
        if dilations != (1, 1):  # the same convolution with zeros between the taps
            cout, cin_g, kh, kw = weights.shape
            dilated = np.zeros((cout, cin_g, (kh - 1) * dilations[0] + 1,
                                (kw - 1) * dilations[1] + 1), np.float32)  # fmt: skip
            dilated[:, :, :: dilations[0], :: dilations[1]] = weights
            weights = dilated
        if len(pads) != 4 or pads[0] != pads[2] or pads[1] != pads[3]:
            raise self.fail(f"asymmetric padding {list(pads)}")
        # a gain/offset straight after the convolution folds into its kernel and bias
        while steps and steps[0].slot == Slot.GOC and steps[0].op == "goc":
            gain_at, offset_at = (steps[0].operands + (-1, -1))[:2]
            cout = weights.shape[0]
            if gain_at >= 0:
                gain = self.per_channel(gain_at, "gain", cout)
                weights = weights * gain[:, None, None, None]
                bias = None if bias is None else bias * gain
            if offset_at >= 0:
                offset = self.per_channel(offset_at, "offset", cout)
                bias = offset if bias is None else bias + offset
            steps.pop(0)
        kh, kw = weights.shape[2:]
        target = self.fresh(weights.shape[0], (hin + 2 * pads[0] - kh) // strides[0] + 1,
                            (win + 2 * pads[1] - kw) // strides[1] + 1)  # fmt: skip
        return self.conv_passes(src, target, (cin, hin, win), weights, bias, groups,
                                (strides[0], strides[1]), (pads[0], pads[1])), target  # fmt: skip

    def conv_passes(self, src, dst, in_shape, weights, bias, groups, stride, padding) -> list[Pass]:
        """One conv pass per group of at most MAX_CONV_COUT output channels."""
        cin, hin, win = in_shape
        cout, _, kh, kw = weights.shape
        _, hout, wout = (
            self.buffers[dst].channels,
            self.buffers[dst].height,
            self.buffers[dst].width,
        )
        per_pass = MAX_CONV_COUT
        if groups > 1 and groups != cout:  # a group's channels stay in one pass
            per_pass = max(cout // groups, (MAX_CONV_COUT // (cout // groups)) * (cout // groups))
        if groups > 1 and cout // groups > MAX_CONV_COUT:
            raise EmitError(
                f"a group of {cout // groups} output channels exceeds one pass "
                f"({MAX_CONV_COUT}: {MAX_LANES} lanes of {MAX_LANE_GROUP})",
                where=self.where,
            )
        passes = []
        for first in range(0, cout, per_pass):
            last = min(cout, first + per_pass)
            part_groups = groups if groups == 1 else groups * (last - first) // cout
            part_cin = cin if groups == 1 else cin * (last - first) // cout
            passes.append(Pass(
                "conv", src, dst, part_cin, last - first, hin, win, hout, wout,
                dst_channel=first, src_channel=0 if groups == 1 else first * cin // cout,
                kernel=(kh, kw), stride=stride, padding=padding,
                groups=part_groups, weights=weights[first:last].astype(np.float16),
                bias=None if bias is None else bias[first:last].astype(np.float16),
            ))  # fmt: skip
        return passes

    def binary(self, op: str) -> tuple[list[Pass], str]:
        a, b = self.node.inputs[0], self.node.inputs[1]
        if self.graph.is_constant(a) and op in ("add", "mul"):
            a, b = b, a
        if self.graph.is_constant(b):
            if op not in ("add", "mul"):
                raise self.fail(f"'{op}' with a constant operand")
            c = self.shape(a)[0]
            value = self.per_channel(1 if b == self.node.inputs[1] else 0, "constant operand", c)
            gain, offset = (value, None) if op == "mul" else (None, value)
            return self.gain_offset(gain, offset, [], a)
        if self.shape(a) != self.shape(b):
            raise self.fail(f"'{op}' of shapes {self.shape(a)} and {self.shape(b)} (broadcast)")
        c, h, w = self.shape(a)
        target = self.fresh(c, h, w)
        return [Pass(op, a, target, c, c, h, w, h, w, src2=b)], target

    def concat(self) -> tuple[list[Pass], str]:
        target = self.fresh(*self.shape(self.node.outputs[0]))
        passes, offset = [], 0
        for part in self.node.inputs[: self.node.attrs["n_main"]]:
            c, h, w = self.shape(part)
            passes.append(Pass("pass", part, target, c, c, h, w, h, w, dst_channel=offset))
            offset += c
        return passes, target

    def window(self, attrs) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        kernel = tuple(attrs["kernel"])
        strides = tuple(attrs["strides"]) or (1, 1)
        pads = tuple(attrs["pads"]) or (0, 0, 0, 0)
        if len(kernel) != 2 or any(d != 1 for d in attrs.get("dilations") or ()):
            raise self.fail(f"a {len(kernel)}-d or dilated pooling window")
        if pads[0] != pads[2] or pads[1] != pads[3]:
            raise self.fail(f"pooling with asymmetric padding {list(pads)}")
        _, h, w = self.shape(self.node.inputs[0])
        spans = [
            (n + 2 * p - k, s) for n, p, k, s in zip((h, w), pads[:2], kernel, strides, strict=True)
        ]
        if attrs.get("ceil_mode") and any(span % s for span, s in spans):
            raise self.fail("a pooling window that overhangs the input (ceil_mode)")
        return (kernel[0], kernel[1]), (strides[0], strides[1]), (pads[0], pads[1])

    def avg_pool(self, attrs) -> tuple[list[Pass], str]:
        kernel, stride, pads = self.window(attrs)
        if any(pads) and not attrs.get("count_include_pad"):
            raise self.fail("an average pool that leaves the padding out of its count")
        return self.depthwise_window(kernel, stride, pads, 1.0 / (kernel[0] * kernel[1]))

    def window_shape(self, kernel, stride, pads) -> tuple[int, int, int]:
        c, h, w = self.shape(self.node.inputs[0])
        return (c, (h + 2 * pads[0] - kernel[0]) // stride[0] + 1,
                (w + 2 * pads[1] - kernel[1]) // stride[1] + 1)  # fmt: skip

    def depthwise_window(self, kernel, stride, pads, scale: float) -> tuple[list[Pass], str]:
        src = self.node.inputs[0]
        c, h, w = self.shape(src)
        weights = np.full((c, 1, kernel[0], kernel[1]), scale, np.float32)
        target = self.fresh(*self.window_shape(kernel, stride, pads))
        return self.conv_passes(src, target, (c, h, w), weights, None, c, stride, pads), target

    def max_pool(self, attrs) -> tuple[list[Pass], str]:
        kernel, stride, pads = self.window(attrs)
        if any(pads):  # the engine pads with zeros, and a zero would win over negatives
            raise self.fail("a padded max pool")
        return self.max_window(kernel, stride)

    def max_window(self, kernel, stride) -> tuple[list[Pass], str]:
        """max over a window: one one-hot depthwise conv per tap, folded by planar maxes."""
        src = self.node.inputs[0]
        c, h, w = self.shape(src)
        shape = self.window_shape(kernel, stride, (0, 0))
        taps = [(i, j) for i in range(kernel[0]) for j in range(kernel[1])]
        if len(taps) > 64:
            raise self.fail(f"a max over a {kernel[0]}x{kernel[1]} window (more than 64 taps)")
        passes: list[Pass] = []
        running = None
        for i, j in taps:
            weights = np.zeros((c, 1, kernel[0], kernel[1]), np.float32)
            weights[:, :, i, j] = 1.0
            tap = self.fresh(*shape)
            passes += self.conv_passes(src, tap, (c, h, w), weights, None, c, stride, (0, 0))
            if running is not None:
                folded = self.fresh(*shape)
                passes.append(Pass("max", running, folded, shape[0], shape[0], shape[1],
                                   shape[2], shape[1], shape[2], src2=tap))  # fmt: skip
                tap = folded
            running = tap
        assert running is not None
        return passes, running

    def global_pool(self, main: str, attrs) -> tuple[list[Pass], str]:
        axes = sorted(int(a) % 4 for a in attrs.get("axes") or ())
        if axes != [2, 3] or not attrs.get("keepdims", True):
            raise self.fail(f"'{main}' over axes {axes}")
        _, h, w = self.shape(self.node.inputs[0])
        limit = field_limit("Common.ConvCfg.Kh")
        if max(h, w) > limit:
            raise self.fail(f"'{main}' over a {h}x{w} plane (kernel fields hold {limit})")
        if main == "reduce_max":
            return self.max_window((h, w), (1, 1))
        scale = 1.0 / (h * w) if main == "reduce_mean" else 1.0
        return self.depthwise_window((h, w), (1, 1), (0, 0), scale)

    # --- epilogue steps -------------------------------------------------------------------

    def gain_offset(self, gain, offset, passes, value) -> tuple[list[Pass], str]:
        """x * gain + offset per channel: a depthwise 1x1 conv."""
        c, h, w = self.shape(value)
        weights = (np.ones(c, np.float32) if gain is None else gain).reshape(c, 1, 1, 1)
        target = self.fresh(c, h, w)
        return passes + self.conv_passes(value, target, (c, h, w), weights, offset, c, (1, 1),
                                         (0, 0)), target  # fmt: skip

    def activation(self, name: str, attrs, passes, value) -> tuple[list[Pass], str]:
        producers = [p for p in passes if p.dst == value]
        if name == "relu":
            if producers and all(p.activation == "none" for p in producers):
                for p in producers:
                    p.activation = "relu"
                return passes, value
            return self.table_pass(value, passes, "relu", None)
        if name in TABLE_ACTIVATIONS:
            if producers and all(p.kind == "pass" and p.activation == "none" for p in producers):
                for p in producers:
                    p.activation, p.table = "lut", name
                return passes, value
            return self.table_pass(value, passes, "lut", name)
        if name == "gelu":
            table = "gelu_gate_tanh" if attrs.get("approximate") == "tanh" else "gelu_gate"
            passes, gate = self.table_pass(value, passes, "lut", table)
            c, h, w = self.shape(value)
            target = self.fresh(c, h, w)
            return passes + [Pass("mul", value, target, c, c, h, w, h, w, src2=gate)], target
        raise self.fail(f"activation '{name}'")

    def table_pass(self, value, passes, activation, table) -> tuple[list[Pass], str]:
        c, h, w = self.shape(value)
        target = self.fresh(c, h, w)
        return passes + [Pass("pass", value, target, c, c, h, w, h, w, activation=activation,
                              table=table)], target  # fmt: skip


def lanes_per_group(cout: int) -> int:
    """Output channels per kernel lane: the least power of two that fits Cout in 16 lanes."""
    per_lane = 1
    while -(-cout // per_lane) > MAX_LANES:
        per_lane *= 2
    return per_lane


def l2_footprint(p: Pass) -> int:
    """Bytes of L2 a pass stages: its source(s), then its result (as emit lays them out)."""
    in_row = -(-p.win // 8) * p.cin * L2_UNIT
    staged = -(-in_row * p.hin // 64) * 64 * (2 if p.planar else 1)
    out_row = -(-p.wout // 8) * p.cout * L2_UNIT if p.kind == "conv" else in_row
    return staged + out_row * p.hout


def split_rows(p: Pass) -> list[Pass]:
    """An element-wise pass too large for the L2, as row bands that each fit."""
    if l2_footprint(p) <= L2_BYTES:
        return [p]
    if p.kind == "conv":
        raise EmitError(
            f"a convolution pass of {p.cin}x{p.hin}x{p.win} -> {p.cout}x{p.hout}x{p.wout} needs "
            f"{l2_footprint(p)} bytes of L2 (the engine has {L2_BYTES})",
            where=f"node '{p.node}'",
            hint="split the layer's input into smaller tiles before compiling",
        )
    per_row = l2_footprint(replace(p, hin=1, hout=1))
    rows = L2_BYTES // per_row
    if rows == 0:
        raise EmitError(
            f"one row of {p.cin}x{p.win} needs {per_row} bytes of L2 (the engine has {L2_BYTES})",
            where=f"node '{p.node}'",
        )
    return [replace(p, hin=min(rows, p.hin - r), hout=min(rows, p.hin - r), row0=p.row0 + r)
            for r in range(0, p.hin, rows)]  # fmt: skip
