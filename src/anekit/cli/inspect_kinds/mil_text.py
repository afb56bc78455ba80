"""`anekit inspect` of MIL text: detection, a summary of each function, and its tree."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from anekit.cli.inspect_kinds.base import Kind, Node, add_limited, without_bom_or_space


def is_mil(path: Path, head: bytes) -> bool:
    return without_bom_or_space(head).startswith(b"program(")


def describe_mil(path: Path) -> dict[str, Any]:
    from anekit.formats import mil

    program = mil.parse_file(path)
    functions = []
    for function in program.functions:
        blobs = [
            {"path": value.path, "offset": value.offset, "type": str(value.type)}
            for op in function.operations
            for _, value in op.attributes
            if isinstance(value, mil.BlobFile)
        ]
        functions.append(
            {
                "name": function.name,
                "opset": function.opset,
                "inputs": [{"name": b.name, "type": str(b.type)} for b in function.inputs],
                "outputs": list(function.outputs),
                "operations": len(function.operations),
                "ops": dict(collections.Counter(op.op for op in function.operations).most_common()),
                "blobs": blobs,
            }
        )
    return {
        "kind": "mil",
        "version": program.version,
        "build_info": dict(program.build_info),
        "functions": functions,
    }


def render_mil(doc: dict[str, Any]) -> Node:
    root = Node(f"MIL program {doc['version']}")
    if doc["build_info"]:
        root.add("buildInfo: " + " · ".join(f"{k} {v}" for k, v in doc["build_info"].items()))
    for f in doc["functions"]:
        node = root.add(
            f"func {f['name']}"
            + (f"<{f['opset']}>" if f["opset"] else "")
            + f": {f['operations']} operations"
        )
        add_limited(node.add("inputs"), f["inputs"], lambda b: f"{b['name']}: {b['type']}")
        node.add("outputs: " + ", ".join(f["outputs"]))
        node.add("ops: " + ", ".join(f"{op} ×{n}" for op, n in f["ops"].items()))
        if f["blobs"]:
            add_limited(
                node.add(f"weights ({len(f['blobs'])} BLOBFILE)"),
                f["blobs"],
                lambda b: f"{b['path']} @ {b['offset']}: {b['type']}",
            )
    return root


KIND = Kind("MIL text", is_mil, describe_mil, render_mil, (".mil",))
