"""`anekit inspect` of ONNX models: detection of a ModelProto, its inputs, outputs and op counts."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from anekit.cli.inspect_kinds.base import Kind, Node, add_limited
from anekit.errors import FormatError


def is_onnx(path: Path, head: bytes) -> bool:
    # ModelProto starts with ir_version (field 1, varint), then a string or opset_import field.
    return (
        len(head) > 3
        and head[0] == 0x08
        and 1 <= head[1] <= 20
        and head[2] in (0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A, 0x42)
    )


def describe_onnx(path: Path) -> dict[str, Any]:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises several unrelated types
        raise FormatError(
            f"not a readable ONNX model: {type(exc).__name__}: {exc}", where=str(path)
        ) from None

    def value_info(info: Any) -> dict[str, Any]:
        tensor = info.type.tensor_type
        dims = [
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor.shape.dim
        ]
        dtype = (
            onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
            if tensor.elem_type
            else None
        )
        return {"name": info.name, "dtype": dtype, "shape": dims}

    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    parameters = 0
    for tensor in graph.initializer:
        count = 1
        for dim in tensor.dims:
            count *= dim
        parameters += count
    return {
        "kind": "onnx",
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip() or None,
        "opsets": {entry.domain or "ai.onnx": entry.version for entry in model.opset_import},
        "inputs": [value_info(i) for i in graph.input if i.name not in initializers],
        "outputs": [value_info(o) for o in graph.output],
        "initializers": len(initializers),
        "parameters": parameters,
        "nodes": len(graph.node),
        "ops": dict(collections.Counter(node.op_type for node in graph.node).most_common()),
    }


def render_onnx(doc: dict[str, Any]) -> Node:
    opsets = ", ".join(f"{d} {v}" for d, v in doc["opsets"].items())
    root = Node(
        f"ONNX model, IR version {doc['ir_version']}, opsets {opsets}"
        + (f", from {doc['producer']}" if doc["producer"] else "")
    )
    for role in ("inputs", "outputs"):
        add_limited(root.add(role), doc[role], lambda v: f"{v['name']}: {v['dtype']} {v['shape']}")
    root.add(
        f"{doc['nodes']} nodes · {doc['initializers']} initializers · {doc['parameters']} parameters"
    )
    add_limited(root.add("ops"), list(doc["ops"].items()), lambda item: f"{item[0]} ×{item[1]}")
    return root


KIND = Kind("ONNX", is_onnx, describe_onnx, render_onnx, (".onnx",))
