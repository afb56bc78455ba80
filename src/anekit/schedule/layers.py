"""The scheduler's view of a segment: one LayerInfo per engine layer, derived from an engine graph."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from anekit.errors import InternalError
from anekit.ir.dtypes import DType
from anekit.ir.engine import UNITS, LayerView, layer_type_of
from anekit.ir.graph import Graph, Node

if TYPE_CHECKING:  # passes/ is not importable from schedule/ at run time (package boundary)
    from anekit.passes.results import Segment

Unit = Literal["mac", "planar", "dma"]
ACTIVATION_BYTES = 2  # the engine stores activations in fp16
QUANTIZED = frozenset({DType.INT8, DType.UINT8})


@dataclass(frozen=True)
class Operand:
    """One activation input of a layer, as the layer reads it.

    ``row_geometry`` is the (channels, width) of one row of the tensor as the consumer
    iterates it; None when the consumer needs the whole tensor at once (a matmul's B
    operand, a reduction over rows, a layout change, a broadcast operand). ``first_rows``
    is how many rows of it the consumer needs before it can emit its first output row.
    """

    tensor: str
    nbytes: int
    producer: str | None  # the layer of this segment that writes it; None: read from memory
    row_geometry: tuple[int, int] | None = None
    first_rows: int = 1
    weight_operand: bool = False  # a matmul's B operand: resident for the whole matmul


@dataclass(frozen=True)
class LayerInfo:
    """One engine layer as the scheduler and the cost model see it (bytes are fp16 sizes).

    ``flops`` counts 2 x multiply-accumulates for mac layers and element operations for
    planar layers (the two engines are rated in those units); dma layers do no arithmetic.
    ``out_shape`` is the output as [N, C, H, W]: the engine emits it in tiles of rows (H).
    """

    name: str
    unit: Unit
    layer_type: str
    main: str
    flops: int
    operands: tuple[Operand, ...]
    output: str
    output_bytes: int
    out_shape: tuple[int, int, int, int]
    weights: tuple[tuple[str, int], ...] = ()  # constant operands: (name, bytes)
    consumers: tuple[str, ...] = ()  # layers of the segment that read the output
    segment_output: bool = False  # the output leaves the segment (written to memory)
    in_place: bool = False  # may write its output over its first operand (same shape)

    @property
    def weight_bytes(self) -> int:
        return sum(b for _, b in self.weights)

    @property
    def input_bytes(self) -> int:
        return sum(o.nbytes for o in self.operands)

    @property
    def producers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o.producer for o in self.operands if o.producer))

    @property
    def row_geometry(self) -> tuple[int, int]:
        """(channels, width) of one emitted output row."""
        n, c, _, w = self.out_shape
        return (n * c, w)

    @property
    def row_bytes(self) -> int:
        n, c, _, w = self.out_shape
        return n * c * w * ACTIVATION_BYTES

    def operand_of(self, tensor: str) -> Operand | None:
        return next((o for o in self.operands if o.tensor == tensor), None)


def link_layers(layers: Iterable[LayerInfo]) -> tuple[LayerInfo, ...]:
    """Fill every layer's ``consumers`` from the operands; check names and topological order.

    Layers must be listed producers first (an engine graph's node order is); an operand's
    producer must be an earlier layer of the list.
    """
    layers = list(layers)
    seen: dict[str, int] = {}
    outputs: dict[str, str] = {}
    readers: dict[str, dict[str, None]] = {lay.name: {} for lay in layers}  # ordered sets
    for i, lay in enumerate(layers):
        if lay.name in seen:
            raise InternalError(f"layer name '{lay.name}' is used twice")
        for op in lay.operands:
            if op.producer is None:
                continue
            if op.producer not in seen:
                raise InternalError(
                    f"layer '{lay.name}' reads '{op.tensor}' from '{op.producer}', "
                    "which is not an earlier layer"
                )
            if outputs[op.producer] != op.tensor:
                raise InternalError(
                    f"layer '{lay.name}': '{op.producer}' writes '{outputs[op.producer]}', "
                    f"not '{op.tensor}'"
                )
            readers[op.producer][lay.name] = None
        seen[lay.name] = i
        outputs[lay.name] = lay.output
    return tuple(replace(lay, consumers=tuple(readers[lay.name])) for lay in layers)


# --- from an engine graph --------------------------------------------------------------


def as_nchw(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """A shape as [N, C, H, W]: lower ranks padded in front, leading axes of rank 5 merged."""
    dims = tuple(int(d) for d in shape)
    if len(dims) < 4:
        dims = (1,) * (4 - len(dims)) + dims
    lead = math.prod(dims[:-3])
    return (lead, dims[-3], dims[-2], dims[-1])


def numel(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def layers_of(
    graph: Graph, segment: Segment | None = None, weight_bytes: Mapping[str, int] | None = None
) -> tuple[LayerInfo, ...]:
    """The layers of one ANE segment of an engine graph (the whole graph when ``segment`` is None).

    Activations are counted in fp16 (2 bytes/element); constant operands are weights,
    counted in fp16 unless they are int8/uint8 (quantized weights, 1 byte/element) or
    ``weight_bytes`` gives their stored size (compressed weights).
    """
    names = set(segment.nodes) if segment is not None else {n.name for n in graph.nodes}
    nodes = [n for n in graph.nodes if n.name in names]
    leaving = set(segment.outputs) if segment is not None else set(graph.output_names)
    producer_of = {o: n.name for n in nodes for o in n.outputs}
    for n in nodes:  # values read by later segments also leave this one
        for o in n.outputs:
            if any(c.name not in names for c in graph.consumers(o)):
                leaving.add(o)
    leaving |= set(graph.output_names) & set(producer_of)
    layers = [_layer_of(graph, n, producer_of, leaving, weight_bytes or {}) for n in nodes]
    return link_layers(layers)


def _layer_of(
    graph: Graph, node: Node, producer_of: dict[str, str], leaving: set[str],
    weight_bytes: Mapping[str, int],
) -> LayerInfo:  # fmt: skip
    if len(node.outputs) != 1:
        raise InternalError(
            f"engine node '{node.name}' ({node.op}) has {len(node.outputs)} outputs"
        )
    out = graph.value(node.output)
    if node.op == "ane_layer":
        view = LayerView(node)
        main, main_attrs, layer_type = view.main, dict(view.main_attrs), view.layer_type
        main_inputs = view.main_inputs
    else:  # a plain op left in an ANE segment: rated as the layer it would become
        main, main_attrs, main_inputs = node.op, dict(node.attrs), node.inputs
        try:
            layer_type = layer_type_of(node.op)
        except KeyError:
            layer_type = "neuron"
    unit: Unit = UNITS.get(layer_type, "planar")  # type: ignore[assignment]
    out_shape = as_nchw(out.shape)
    kernel_h = 1
    if main == "conv" and len(main_inputs) > 1 and len(graph.value(main_inputs[1]).shape) == 4:
        kernel_h = graph.value(main_inputs[1]).shape[2]
    elif main in ("max_pool", "avg_pool"):
        kernel_h = int(main_attrs["kernel"][0])
    weights: list[tuple[str, int]] = []
    operands: list[Operand] = []
    for pos, name in enumerate(node.inputs):
        if not name or any(o.tensor == name for o in operands) or name in dict(weights):
            continue
        v = graph.value(name)
        if graph.is_constant(name):
            per = 1 if v.dtype in QUANTIZED else ACTIVATION_BYTES
            weights.append((name, weight_bytes.get(name, v.numel * per)))
            continue
        is_main = pos < len(main_inputs)
        geometry, first = _read_pattern(
            layer_type, main, main_attrs, pos if is_main else -1, v.shape, out.shape, kernel_h
        )
        operands.append(
            Operand(
                tensor=name,
                nbytes=v.numel * ACTIVATION_BYTES,
                producer=producer_of.get(name),
                row_geometry=geometry,
                first_rows=first,
                weight_operand=(main == "matmul" and pos == 1)
                or (main == "attention" and pos in (1, 2)),
            )
        )
    in_shapes = [graph.value(i).shape for i in main_inputs if i]
    flops = _flops(node, main, main_attrs, in_shapes, out.shape, unit)
    first = operands[0] if operands else None
    in_place = (
        layer_type in ("elementwise", "neuron", "goc")
        and first is not None
        and first.nbytes == numel(out.shape) * ACTIVATION_BYTES
    )
    return LayerInfo(
        name=node.name,
        unit=unit,
        layer_type=layer_type,
        main=main,
        flops=flops,
        operands=tuple(operands),
        output=node.output,
        output_bytes=numel(out.shape) * ACTIVATION_BYTES,
        out_shape=out_shape,
        weights=tuple(weights),
        segment_output=node.output in leaving,
        in_place=in_place,
    )


# layer types that read row r of each operand to write output row r
_ROW_LOCAL = frozenset({"elementwise", "neuron", "goc"})


def _read_pattern(
    layer_type: str,
    main: str,
    attrs: dict,
    pos: int,
    in_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    kernel_h: int,
) -> tuple[tuple[int, int] | None, int]:
    """(row geometry, rows needed for the first output row) of one operand; see Operand."""
    n, c, h, w = as_nchw(in_shape)
    rows = (n * c, w)
    if pos < 0:  # an epilogue operand (gain/offset, fused add): broadcast over the output
        return (rows if tuple(in_shape) == tuple(out_shape) else None), 1
    if layer_type in ("conv", "pool"):
        if len(in_shape) != 4:
            return None, h  # 1-D/3-D windows are not row-tiled here
        dil = (attrs.get("dilations") or (1, 1))[0]
        pad = (attrs.get("pads") or (0, 0, 0, 0))[0]
        return rows, max(1, min(h, (kernel_h - 1) * dil + 1 - pad))
    if main == "matmul":
        if pos == 1 or len(in_shape) < 2:
            return None, h  # the B operand is consumed whole
        return rows, 1
    if main == "attention":  # fused attention: query rows stream, keys/values/mask are whole
        return (rows, 1) if pos == 0 else (None, h)
    if layer_type in ("softmax", "reduction"):
        rank = len(in_shape)
        axes = attrs.get("axes") if layer_type == "reduction" else (attrs.get("axis", -1),)
        axes = tuple(a % rank for a in (axes or range(rank)))
        row_axis = rank - 2
        return (None, h) if row_axis in axes or rank < 2 else (rows, 1)
    if layer_type in _ROW_LOCAL:
        return (rows if tuple(in_shape) == tuple(out_shape) else None), 1
    return None, h  # dma (reshape, transpose, concat) and texture remaps: whole tensor


# --- arithmetic ------------------------------------------------------------------------


def _flops(
    node: Node,
    main: str,
    attrs: dict,
    in_shapes: list[tuple[int, ...]],
    out_shape: tuple[int, ...],
    unit: str,
) -> int:
    out_elems = numel(out_shape)
    if unit == "dma":
        return 0
    if main == "conv":
        w = in_shapes[1]
        return 2 * out_elems * numel(w[1:])  # (C/group) x kernel per output element
    if main == "matmul":
        a = in_shapes[0]
        return 2 * out_elems * (a[-1] if a else 1)
    if main == "conv_transpose":  # each input element scatters into (C_out/group) x kernel
        return 2 * numel(in_shapes[0]) * numel(in_shapes[1][1:])
    if main == "attention":  # q k^T and p v: 2 x 2 x (batch x Sq) x Sk x D
        q, k = in_shapes[0], in_shapes[1]
        return 4 * numel(q[:-1]) * k[-2] * q[-1]
    if main in ("max_pool", "avg_pool"):
        return out_elems * numel(attrs["kernel"])
    epilogue = len(node.attrs.get("epilogue", ())) if node.op == "ane_layer" else 0
    main_elems = max([out_elems, *(numel(s) for s in in_shapes)])
    return main_elems + epilogue * out_elems


def node_flops(graph: Graph, node: Node) -> int:
    """Arithmetic of any IR node (2 x MACs for conv/matmul/attention, else one per element).

    Used for CPU segments, whose ops are not engine layers.
    """
    outs = [graph.value(o) for o in node.outputs if o]
    out_elems = sum(v.numel for v in outs)
    ins = [graph.value(i).shape if i else () for i in node.inputs]
    if node.op == "ane_layer":
        view = LayerView(node)
        unit = UNITS.get(view.layer_type, "planar")
        main_in = [graph.value(i).shape for i in view.main_inputs if i]
        return _flops(node, view.main, dict(view.main_attrs), main_in, outs[0].shape, unit)
    if node.op == "conv" and len(ins) > 1:
        return 2 * out_elems * numel(ins[1][1:])
    if node.op in ("matmul", "einsum") and ins and ins[0]:
        return 2 * out_elems * ins[0][-1]
    if node.op == "attention" and len(ins) >= 3:
        q, k = ins[0], ins[1]
        return 4 * numel(q[:-1]) * k[-2] * q[-1]
    if node.op == "conv_transpose" and len(ins) > 1:
        return 2 * numel(ins[0]) * numel(ins[1][1:])
    return max([out_elems, *(numel(s) for s in ins if s)])
