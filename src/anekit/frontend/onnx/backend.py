"""An `onnx.backend.base.Backend` on anekit's importer and reference backend (for ONNX's tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from anekit.frontend.onnx.importer import from_onnx

# Input positions that carry shapes, axes or sizes rather than data. anekit compiles
# static graphs, so when a model takes one of these as a graph input, this backend
# freezes it to the value it is given at run time (compile per distinct value).
SHAPE_ARGUMENTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 2, 3),
    "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "Trilu": (1,), "TopK": (1,),
    "Range": (0, 1, 2), "ConstantOfShape": (0,), "Resize": (1, 2, 3), "Upsample": (1,),
    "OneHot": (1,), "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
    "ReduceProd": (1,), "ReduceL1": (1,), "ReduceL2": (1,), "ReduceSumSquare": (1,),
    "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2),
    "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,), "DFT": (1, 2),
    "STFT": (1, 3), "MelWeightMatrix": (0, 1, 2, 3, 4), "CumSum": (1,), "CumProd": (1,),
    "MaxUnpool": (2,), "Compress": (1,), "AffineGrid": (1,), "If": (0,),
    # anekit takes these only on constants (their output shape is their input's values)
    "NonZero": (0,), "Unique": (0,),
}  # fmt: skip


# Inputs whose values an op never reads (only their shape or element type).
_VALUE_FREE: dict[str, tuple[int, ...]] = {
    "Shape": (0,),
    "Size": (0,),
    "EyeLike": (0,),
    "CastLike": (1,),
}


def _nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's nodes and those of its sub-graphs (an If's branches read outer values)."""
    found = []
    for node in graph.node:
        found.append(node)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found.extend(_nodes(attr.g))
    return found


def shape_argument_inputs(model: onnx.ModelProto) -> set[str]:
    """Graph inputs whose values reach a shape-argument position (an If's condition among
    them), directly or through other nodes (e.g. a window size cast and fed to Range), in
    sub-graphs too; value-free inputs stop the trace."""
    graph = model.graph
    graph_inputs = {vi.name for vi in graph.input} - {t.name for t in graph.initializer}
    nodes = _nodes(graph)
    producer = {out: node for node in nodes for out in node.output if out}
    pending = [
        node.input[pos]
        for node in nodes
        for pos in SHAPE_ARGUMENTS.get(node.op_type, ())
        if pos < len(node.input) and node.input[pos]
    ]
    seen: set[str] = set()
    found = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in graph_inputs:
            found.add(name)
        node = producer.get(name)
        if node is not None:
            skip = _VALUE_FREE.get(node.op_type, ())
            pending.extend(i for k, i in enumerate(node.input) if i and k not in skip)
            for attr in node.attribute:  # an If's outputs: what its branches read
                if attr.type == onnx.AttributeProto.GRAPH:
                    pending.extend(i for n in _nodes(attr.g) for i in n.input if i)
    return found


def _as_array(x: Any) -> np.ndarray:
    return onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x)


class AnekitRep(BackendRep):
    """A prepared model: imported on first run (with shape arguments frozen), then run."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.frozen = shape_argument_inputs(model)
        self._graphs: dict[bytes, Any] = {}
        if not self.frozen:
            self._graphs[b""] = from_onnx(model)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        names = [
            vi.name
            for vi in self.model.graph.input
            if vi.name not in {t.name for t in self.model.graph.initializer}
        ]
        if isinstance(inputs, dict):
            feeds = {k: _as_array(v) for k, v in inputs.items()}
        else:
            seq = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feeds = {n: _as_array(x) for n, x in zip(names, seq, strict=False)}
        consts = {n: feeds.pop(n) for n in sorted(self.frozen)}
        key = b"".join(n.encode() + v.tobytes() + str(v.shape).encode() for n, v in consts.items())
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = from_onnx(self.model, constant_inputs=consts)
        out = graph.run(feeds)
        return tuple(out[name] for name in graph.output_names)


class AnekitBackend(Backend):
    """`prepare` imports with `from_onnx`; `run` uses `Graph.run` (fp32 reference kernels)."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> AnekitRep:
        return AnekitRep(model)

    @classmethod
    def run_model(
        cls,
        model: onnx.ModelProto,
        inputs: Sequence[np.ndarray],
        device: str = "CPU",
        **kwargs: Any,
    ):
        return cls.prepare(model, device).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"
