"""Netplist -> IR Graph: ports become inputs/outputs, each unit one `ane_layer` (see units.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import FormatError, ModelError
from anekit.formats.netplist.context import UnitContext
from anekit.formats.netplist.document import Network, Unit, parse_document
from anekit.formats.netplist.units import UNIT_READERS
from anekit.formats.netplist.vocab import (
    DATA_TYPES,
    DEPTH,
    MAX_ELEMENTS,
    OUTPUT_SUFFIX,
    UNSUPPORTED,
)
from anekit.formats.netplist.weights import WeightFiles
from anekit.ir import Graph, GraphEditor, Value
from anekit.ir.dtypes import DType
from anekit.ir.engine import EpilogueStep, Slot, layer_attrs
from anekit.ir.registry import InferError, infer_types


def network_rank(network: Network) -> int:
    """5 (NCDHW) when any tensor or parameter uses a depth other than 1, else 4 (NCHW)."""
    if any(port.dims.depth != 1 for port in network.inputs):
        return 5

    def deep(value: Any) -> bool:
        if isinstance(value, Mapping):
            if value.get("Dimension") == DEPTH and value.get("Size", 2) != 1:
                return True
            return any(
                ("Depth" in str(k) and isinstance(v, int) and v != 1) or deep(v)
                for k, v in value.items()
            )
        if isinstance(value, tuple):
            return DEPTH in value or any(deep(v) for v in value)
        return False

    return 5 if any(deep(unit.params) for unit in network.units) else 4


class GraphBuilder:
    """Builds the Graph of one network unit by unit through a GraphEditor."""

    def __init__(self, network: Network, weights: WeightFiles, where: str):
        self.network = network
        self.weights = weights
        self.where = where
        self.rank = network_rank(network)
        inputs = [
            Value(p.name, p.dims.ir_shape(self.rank), DATA_TYPES[p.type]) for p in network.inputs
        ]
        empty = Graph(
            inputs=inputs,
            outputs=[],
            nodes=[],
            values={v.name: v for v in inputs},
            constants={},
            name=network.name,
        )
        self.editor: GraphEditor = empty.edit()
        # netplist tensor name -> IR value name (they differ when a unit has an UnescapedName)
        self.produced: dict[str, str] = {p.name: p.name for p in network.inputs}
        self._wide: dict[str, str] = {}

    def value_of(self, name: str, where: str) -> str:
        if name not in self.produced:
            raise FormatError(
                f"reads '{name}', which is neither an input nor a unit listed before it",
                where=where,
            )
        return self.produced[name]

    def widened(self, value: str) -> str:
        """An fp16 copy of an integer tensor (shared by every unit that reads it)."""
        if self.editor.values[value].dtype.is_float:
            return value
        if value not in self._wide:
            (self._wide[value],) = self._add("cast", [value], {"to": DType.FP16}, f"{value}.fp16")
        return self._wide[value]

    def _add(
        self,
        op: str,
        inputs: list[str],
        attrs: Mapping[str, Any],
        name: str,
        *,
        where: str | None = None,
        **kw: Any,
    ) -> tuple[str, ...]:
        try:
            return self.editor.add(op, inputs, attrs, name=name, **kw)
        except ModelError as exc:  # ShapeError included: the file describes an impossible layer
            raise FormatError(exc.message, where=where or self.where) from None

    def add_unit(self, unit: Unit) -> None:
        where = f"{self.where}: network '{self.network.name}', unit '{unit.name}'"
        reader = UNIT_READERS.get(unit.type)
        if reader is None:
            known = ", ".join(sorted(UNIT_READERS))
            reason = UNSUPPORTED.get(unit.type)
            raise FormatError(
                f"unit type '{unit.type}' is not supported"
                + (f": {reason}" if reason else f" (anekit reads {known})"),
                where=where,
            )
        if unit.label in self.editor.values or unit.label in self.produced.values():
            raise FormatError(f"the name '{unit.label}' is used twice", where=where)
        cx = UnitContext(self, unit, where)
        spec = reader(cx)
        inputs = list(spec.inputs)
        steps = []
        for step in spec.epilogue:
            operands = []
            for name in step.operands:
                if name:
                    inputs.append(name)
                operands.append(len(inputs) - 1 if name else -1)
            steps.append(
                EpilogueStep(step.slot, step.op, step.attrs, tuple(operands), (unit.name,))
            )
        try:
            attrs = layer_attrs(spec.main, spec.attrs, len(spec.inputs), steps, spec.layer_type)
            types = [self.editor.values[i].type if i else None for i in inputs]
            _, (out,) = infer_types("ane_layer", types, attrs)
        except InferError as exc:
            raise FormatError(f"{unit.type} unit: {exc}", where=where) from None
        if unit.output_type is not None and DATA_TYPES[unit.output_type] != out.dtype:
            quant = EpilogueStep(
                Slot.QUANT, "cast", {"to": DATA_TYPES[unit.output_type]}, (), (unit.name,)
            )
            attrs = layer_attrs(
                spec.main, spec.attrs, len(spec.inputs), [*steps, quant], spec.layer_type
            )
        (value,) = self._add(
            "ane_layer",
            inputs,
            attrs,
            unit.label,
            outputs=[unit.label],
            origin=(unit.name,),
            where=where,
        )
        shape = self.editor.values[value].shape
        if unit.output_channels is not None and shape[1] != unit.output_channels:
            raise FormatError(
                f"OutputChannels is {unit.output_channels} but the layer computes {shape[1]} "
                f"channels (shape {list(shape)})",
                where=where,
            )
        if int(np.prod(shape, dtype=np.int64)) > MAX_ELEMENTS:
            raise FormatError(f"the output would have shape {list(shape)}, too large", where=where)
        self.produced[unit.name] = value

    def finish(self) -> Graph:
        outputs = []
        for port in self.network.outputs:
            where = f"{self.where}: network '{self.network.name}', output '{port.name}'"
            bottom = self.value_of(port.bottom, where)
            name = port.name.removesuffix(OUTPUT_SUFFIX) or port.name
            dtype = self.editor.values[bottom].dtype
            cast = port.type is not None and DATA_TYPES[port.type] != dtype
            if name == bottom and not cast:
                outputs.append(bottom)
                continue
            for candidate in (name, port.name):
                if candidate not in self.editor.values:
                    break
            else:
                raise FormatError(f"the output name '{name}' is already used", where=where)
            op, attrs = ("cast", {"to": DATA_TYPES[port.type]}) if cast else ("identity", {})
            (value,) = self._add(op, [bottom], attrs, candidate, outputs=[candidate], where=where)
            outputs.append(value)
        graph = self.editor.build(dce=False)
        values = dict(graph.values)
        return graph.replace(
            outputs=[values[o] for o in outputs],
            metadata={"netplist_network": self.network.name},
        )


def build_graph(network: Network, weights: WeightFiles, where: str) -> Graph:
    builder = GraphBuilder(network, weights, where)
    for unit in network.units:
        builder.add_unit(unit)
    return builder.finish()


def parse(
    data: bytes,
    *,
    directory: str | Path | None = None,
    files: Mapping[str, bytes] | None = None,
    network: str | None = None,
    where: str = "netplist",
) -> Graph:
    """A netplist's bytes as a Graph; weight files come from `files` (by their Weights name)
    or from disk under `directory` (see weights.py for the path policy)."""
    doc = parse_document(data, where)
    net = doc.network(network, where)
    source = WeightFiles(
        net.weights,
        Path(directory) if directory is not None else None,
        dict(files or {}),
        where=where,
    )
    return build_graph(net, source, where)


def read_file_bytes(path: Path) -> bytes:
    """The bytes of the netplist file at ``path``; FormatError naming it if it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FormatError(
            f"cannot read the netplist: {exc.strerror or exc}", where=str(path)
        ) from None


def read(path: str | Path, *, network: str | None = None) -> Graph:
    """Read a netplist file into a Graph of `ane_layer` nodes (one per unit)."""
    path = Path(path)
    data = read_file_bytes(path)
    return parse(data, directory=path.parent, network=network, where=str(path))
