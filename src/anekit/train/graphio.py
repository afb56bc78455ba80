"""A Graph as JSON plus named arrays, and back (checkpoints carry the model they train).

Reading is for untrusted files: every node is rebuilt through the op registry (attributes
normalised, unknown ops and attributes refused) and the graph is validated (types
re-inferred), so a checkpoint cannot smuggle in anything a Graph could not hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit.errors import FormatError
from anekit.ir.dtypes import DType
from anekit.ir.graph import Graph, Node, Value
from anekit.ir.registry import InferError, get_op


def _encode(value: Any, key: str, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, DType):
        return {"dtype": value.value}
    if isinstance(value, np.ndarray):
        arrays[key] = value
        return {"array": key}
    if isinstance(value, tuple | list):
        return [_encode(v, f"{key}.{i}", arrays) for i, v in enumerate(value)]
    if isinstance(value, Mapping | MappingProxyType):
        raise FormatError(f"attribute {key} is a mapping; engine graphs are not checkpointed")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decode(value: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if isinstance(value, dict):
        if "dtype" in value:
            return value["dtype"]
        if "array" in value:
            return arrays[value["array"]]
        raise FormatError(f"unknown attribute encoding {sorted(value)}")
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    return value


def to_json(graph: Graph, prefix: str = "model/") -> tuple[dict, dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {}
    nodes = []
    for n in graph.nodes:
        attrs = {k: _encode(v, f"{prefix}attr/{n.name}/{k}", arrays) for k, v in n.attrs.items()}
        nodes.append({"op": n.op, "name": n.name, "inputs": list(n.inputs),
                      "outputs": list(n.outputs), "attrs": attrs})  # fmt: skip
    for name, array in graph.constants.items():
        arrays[f"{prefix}const/{name}"] = np.asarray(array)
    doc = {
        "name": graph.name,
        "inputs": [[v.name, list(v.shape), v.dtype.value] for v in graph.inputs],
        "outputs": list(graph.output_names),
        "values": [[v.name, list(v.shape), v.dtype.value] for v in graph.values.values()],
        "constants": list(graph.constants),
        "nodes": nodes,
        "parameters": list(graph.metadata.get("parameters", ())),
    }
    return doc, arrays


def from_json(doc: Mapping, arrays: Mapping[str, np.ndarray], prefix: str = "model/") -> Graph:
    try:
        values = {n: Value(n, tuple(s), d) for n, s, d in doc["values"]}
        constants = {n: np.array(arrays[f"{prefix}const/{n}"]) for n in doc["constants"]}
        nodes = []
        for spec in doc["nodes"]:
            opdef = get_op(spec["op"])
            attrs = opdef.normalize_attrs({k: _decode(v, arrays) for k, v in spec["attrs"].items()})
            nodes.append(Node(spec["op"], spec["name"], spec["inputs"], spec["outputs"], attrs))
        names = [n.name for n in nodes] + list(values)
        if not all(isinstance(n, str) and n for n in names) or len({n.name for n in nodes}) < len(nodes):
            raise ValueError("node and value names must be distinct, non-empty strings")
        graph = Graph(
            inputs=[Value(n, tuple(s), d) for n, s, d in doc["inputs"]],
            outputs=[values[o] for o in doc["outputs"]],
            nodes=nodes,
            values=values,
            constants=constants,
            name=str(doc["name"]),
            metadata={"parameters": tuple(doc.get("parameters", ()))}
            if doc.get("parameters")
            else None,
        )
    except (KeyError, TypeError, ValueError, InferError) as exc:
        raise FormatError(f"the checkpoint's model is malformed: {exc}") from None
    graph.validate()
    return graph
