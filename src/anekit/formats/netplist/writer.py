"""Engine graph -> netplist (version 1.0.10 keys) plus its weight file; atomic, deterministic writes.

Each `ane_layer` becomes a chain of units: its main op, then one unit per filled epilogue
slot (the format has separate GOC and Neuron units, as Apple's converter's own output
`probs_tmp_0` Conv + `probs` GOC shows); an output-quantisation cast becomes the last
unit's OutputType. Plain op nodes are written as one-op layers; plain `identity` and
integer-to-float `cast` nodes are no units at all (the reader widens integer tensors
itself), and a `cast` that only feeds a graph output becomes the port's OutputType.
"""

from __future__ import annotations

import plistlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from anekit import atomic
from anekit.errors import AnekitError, UnsupportedModelError
from anekit.formats.netplist.chain import Chain, Operand, Unsupported, dtype_name
from anekit.formats.netplist.emit import ELEMENTWISE_NAMES, EMITTERS, elementwise
from anekit.formats.netplist.vocab import (
    BLOB_ALIGN,
    NETWORK_KEYS,
    OUTPUT_SUFFIX,
    ROW_ALIGN,
    TOP_KEYS,
    WRITE_VERSION,
)
from anekit.ir import Graph, Node, TensorType
from anekit.ir.engine import EpilogueStep, LayerView, Slot
from anekit.naming import fresh_name

PLACEHOLDER = "\0unsupported"


class BlobWriter:
    """The weight file: arrays appended little-endian on 64-byte boundaries, identical ones shared."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._seen: dict[tuple[str, bytes], int] = {}

    def add(self, array: np.ndarray) -> tuple[int, int]:
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
        key = (array.dtype.str, data)
        if key not in self._seen:
            pad = -self._size % BLOB_ALIGN
            self._parts.append(b"\0" * pad + data)
            self._seen[key] = self._size + pad
            self._size += pad + len(data)
        return 0, self._seen[key]

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class Names:
    """Unit and port names: each IR value keeps its name when it can; helpers get fresh ones."""

    def __init__(self, reserved: set[str]):
        self._reserved = reserved
        self._used: set[str] = set()

    def own(self, want: str) -> str:
        if want and want not in NETWORK_KEYS and want not in self._used:
            self._used.add(want)
            return want
        return self.fresh(want or "unit")

    def fresh(self, hint: str) -> str:
        name = fresh_name(hint, self._reserved, self._used, NETWORK_KEYS, bare=False, start=0)
        self._used.add(name)
        return name


def _layout(prefix: str, t: TensorType, rank: int) -> dict[str, int]:
    """Interleave 1 and the byte strides of the engine's layout (64-byte rows; depth outermost)."""
    n, c = t.shape[0], t.shape[1]
    h, w = t.shape[-2], t.shape[-1]
    row = -(-w * t.dtype.itemsize // ROW_ALIGN) * ROW_ALIGN
    out = {f"{prefix}Interleave": 1, f"{prefix}RowStride": row, f"{prefix}PlaneStride": row * h}
    if rank == 5:
        out[f"{prefix}BatchStride"] = row * h * c
        out[f"{prefix}DepthStride"] = row * h * c * n
    return out


class NetplistWriter:
    """Turns one engine graph into the network dictionary and the weight bytes."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.blobs = BlobWriter()
        self.names = Names(set(graph.values))
        self.problems: list[str] = []
        self.tensors: dict[str, Operand] = {
            name: Operand(graph.values[name].type, const=array)
            for name, array in graph.constants.items()
        }
        self.units: list[dict[str, Any]] = []
        self.ports: dict[str, dict[str, Any]] = {}
        ranks = {v.rank for v in graph.inputs}
        if len(ranks) != 1 or not ranks <= {4, 5}:
            raise UnsupportedModelError(
                "a netplist's inputs are all NCHW (rank 4) or all NCDHW (rank 5); "
                f"this graph's inputs have rank(s) {sorted(ranks) or 'none'}"
            )
        self.rank = ranks.pop()

    def network(self) -> dict[str, Any]:
        inputs = []
        for v in self.graph.inputs:
            name = self.names.own(v.name)
            self.tensors[v.name] = Operand(v.type, name)
            self._problem(lambda v=v, name=name: self._input_port(v, name), f"input '{v.name}'")
            inputs.append(name)
        for node in self.graph.nodes:
            self._node(node)
        outputs = [self._output_port(v.name) for v in self.graph.outputs]
        if self.problems:
            raise UnsupportedModelError(
                f"the graph cannot be written as a netplist ({len(self.problems)} problem(s)):\n  "
                + "\n  ".join(self.problems)
            )
        unit_names = [u["Name"] for u in self.units]
        net: dict[str, Any] = {
            "InputList": inputs,
            "OutputList": outputs,
            "Units": unit_names,
            "OperationList": unit_names,
        }
        net.update(self.ports)
        net.update({u["Name"]: u for u in self.units})
        return net

    # ---- ports --------------------------------------------------------------------------

    def _input_port(self, v: Any, name: str) -> None:
        shape = v.shape
        port: dict[str, Any] = {
            "BatchSize": shape[0],
            "InputChannels": shape[1],
            "InputHeight": shape[-2],
            "InputWidth": shape[-1],
            "InputType": dtype_name(v.dtype),
            **_layout("Input", v.type, self.rank),
        }
        if self.rank == 5:
            port["InputDepth"] = shape[2]
        self.ports[name] = {k: int(x) if not isinstance(x, str) else x for k, x in port.items()}

    def _output_port(self, value: str) -> str:
        source = self.tensors.get(value)
        t = self.graph.values[value].type
        name = self.names.own(value if value.endswith(OUTPUT_SUFFIX) else value + OUTPUT_SUFFIX)
        if source is None or source.name is None:
            self.problems.append(f"output '{value}': a constant cannot be a netplist output")
            return name
        try:
            port = {"Bottom": source.name, "OutputType": dtype_name(t.dtype)}
        except Unsupported as exc:
            self.problems.append(f"output '{value}': {exc}")
            return name
        if t.rank != self.rank:
            self.problems.append(f"output '{value}' has rank {t.rank}, not {self.rank}")
            return name
        port.update(_layout("Output", t, self.rank))
        self.ports[name] = port
        return name

    # ---- nodes --------------------------------------------------------------------------

    def _problem(self, action: Callable[[], None], what: str) -> None:
        try:
            action()
        except Unsupported as exc:
            self.problems.append(f"{what}: {exc}")

    def _node(self, node: Node) -> None:
        out = node.outputs[0]
        what = f"node '{node.name}' ({node.op})"
        try:
            if len(node.outputs) != 1:
                raise Unsupported("a netplist unit has one output")
            self.tensors[out] = self._emit(node)
        except Unsupported as exc:
            self.problems.append(f"{what}: {exc}")
            for o in node.outputs:
                self.tensors[o] = Operand(self.graph.values[o].type, PLACEHOLDER)

    def _operand(self, value: str) -> Operand | None:
        return self.tensors[value] if value else None

    def _emit(self, node: Node) -> Operand:
        out_type = self.graph.values[node.outputs[0]].type
        if node.op == "identity":
            return Operand(out_type, self._operand(node.inputs[0]).name)
        if node.op == "cast":
            return self._plain_cast(node, out_type)
        if node.op == "ane_layer":
            view = LayerView(node)
            main, attrs, steps = view.main, view.main_attrs, view.epilogue
            n_main = node.attrs["n_main"]
        elif node.op in EMITTERS:
            main, attrs, steps, n_main = node.op, node.attrs, (), len(node.inputs)
        else:
            raise Unsupported(f"IR op '{node.op}' has no netplist unit")
        chain = Chain(self.rank, self.blobs, lambda: self.names.fresh(f"{node.outputs[0]}_tmp"))
        operands = [self._operand(i) for i in node.inputs]
        cur = self._layer(chain, main, attrs, operands[:n_main], list(steps), operands)
        if cur.type != out_type:
            raise Unsupported(f"writes {cur.type} but the graph declares {out_type}")
        if chain.units and cur.name == chain.names[-1]:
            final = self.names.own(node.outputs[0])
            chain.units[-1]["Name"] = final
            cur = Operand(cur.type, final)
        self.units += chain.units
        return cur

    def _layer(
        self,
        chain: Chain,
        main: str,
        attrs: Any,
        main_ops: list[Operand | None],
        steps: list[EpilogueStep],
        operands: list[Operand | None],
    ) -> Operand:
        if main == "identity":
            cur = main_ops[0]
        elif main in ELEMENTWISE_NAMES and steps and _scale_only(steps[0], operands):
            scale = operands[steps[0].operands[0]].const  # folded into ScaledElementWise.Scale
            cur = elementwise(chain, main, main_ops, float(scale.reshape(())))
            steps = steps[1:]
        elif main in EMITTERS:
            cur = EMITTERS[main](chain, attrs, main_ops)
        else:
            raise Unsupported(f"IR op '{main}' has no netplist unit")
        for step in steps:
            if step.slot == Slot.QUANT and step.op == "cast":
                to = step.attrs["to"]
                chain.set_output_type(to)
                cur = Operand(TensorType(cur.type.shape, to), cur.name)
                continue
            if step.op not in EMITTERS:
                raise Unsupported(f"epilogue {step.describe()} has no netplist unit")
            step_ops = [cur, *(operands[i] if i >= 0 else None for i in step.operands)]
            cur = EMITTERS[step.op](chain, step.attrs, step_ops)
        return cur

    def _plain_cast(self, node: Node, out_type: TensorType) -> Operand:
        source = self._operand(node.inputs[0])
        if source.name is None:
            raise Unsupported("a cast of a constant has no netplist form")
        widening = not source.type.dtype.is_float and out_type.dtype.is_float
        only_output = node.outputs[0] in self.graph.output_names and not self.graph.consumers(
            node.outputs[0]
        )
        if not (widening or only_output):
            raise Unsupported("a standalone cast has no netplist unit (cast in the QUANT slot)")
        return Operand(out_type, source.name)


def _scale_only(step: EpilogueStep, operands: list[Operand | None]) -> bool:
    """A GOC step that is one fp16 scalar gain (ScaledElementWise's Scale)."""
    if step.slot != Slot.GOC or step.op != "goc" or len(step.operands) < 1:
        return False
    gain = operands[step.operands[0]] if step.operands[0] >= 0 else None
    no_offset = len(step.operands) < 2 or step.operands[1] < 0
    return (
        no_offset
        and gain is not None
        and gain.const is not None
        and gain.const.size == 1
        and gain.const.dtype == np.float16
    )


def to_netplist(graph: Graph, *, network: str = "net", weights_name: str) -> tuple[dict, bytes]:
    """The plist dictionary and the weight-file bytes for `graph` (no files are touched)."""
    if not network or network in TOP_KEYS:
        raise AnekitError(f"'{network}' cannot name a network")
    writer = NetplistWriter(graph)
    net = writer.network()
    blob = writer.blobs.getvalue()
    if blob:
        net["Weights"] = [weights_name]
    doc = {
        "Version": WRITE_VERSION,
        "Networks": [network],
        "ProcedureList": [network],
        network: net,
    }
    return doc, blob


def _atomic_write(path: Path, data: bytes) -> None:
    if not path.parent.is_dir():
        raise AnekitError(f"directory '{path.parent}' does not exist", where=str(path))
    atomic.replace_file(path, lambda handle: handle.write(data))


def dumps(
    graph: Graph, *, network: str = "net", weights_name: str = "net.weights"
) -> tuple[bytes, bytes]:
    """(plist bytes, weight-file bytes): deterministic, keys sorted, XML as Apple's tools write."""
    doc, blob = to_netplist(graph, network=network, weights_name=weights_name)
    return plistlib.dumps(doc, fmt=plistlib.FMT_XML, sort_keys=True), blob


def write(graph: Graph, path: str | Path, *, network: str = "net") -> Path | None:
    """Write `graph` as a netplist at `path` and its weights as `<stem>.weights` beside it.

    Returns the weight file's path (None when the graph has no weights). The weight file
    is replaced first, then the plist, each through a temporary file and a rename.
    """
    path = Path(path)
    weights = path.with_name(f"{path.stem}.weights")
    data, blob = dumps(graph, network=network, weights_name=weights.name)
    if blob:
        _atomic_write(weights, blob)
    _atomic_write(path, data)
    return weights if blob else None
