"""`anekit inspect` of dispatch descriptors (the E5Program FlatBuffer): the operation chain."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from anekit.cli.inspect_kinds.base import Kind, Node, add_limited


def _detect(path: Path, head: bytes) -> bool:
    from anekit.formats.dispatch import is_dispatch

    return is_dispatch(head)


def describe_dispatch(path: Path) -> dict[str, Any]:
    from anekit.formats import dispatch

    descriptor = dispatch.read(path)
    return {
        "kind": "dispatch",
        "format_version": descriptor.format_version,
        "build_info": dict(descriptor.build_info),
        "operations": [asdict(op) for op in descriptor.operations],
        "symbol_names": list(descriptor.symbol_names),
    }


def render_dispatch(doc: dict[str, Any]) -> Node:
    ops = doc["operations"]
    engine = sum(op["op_type"] == "AneInference" for op in ops)
    root = Node(
        f"dispatch descriptor (E5Program, format_version {doc['format_version']}), "
        f"{len(ops)} operations, {engine} engine dispatch(es)"
    )
    build = root.add("build info")
    for key, value in doc["build_info"].items():
        build.add(f"{key}: {value}")

    def label(op: dict[str, Any]) -> str:
        text = (
            f"{op['op_type']} {op['name']}: {', '.join(op['inputs'])} -> {', '.join(op['outputs'])}"
        )
        if op["program"]:
            text += f" [{op['program']}]"
        if op["src_type"]:
            text += f" ({op['src_type']} -> {op['dst_type']})"
        return text

    add_limited(root.add("operations"), ops, label)
    return root


KIND = Kind("dispatch", _detect, describe_dispatch, render_dispatch, (".e5",))
