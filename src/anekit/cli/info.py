"""`anekit info MODEL`: inputs, outputs, parameter count and op histogram of a model."""

from __future__ import annotations

import argparse

from anekit.cli.common import (
    add_command,
    add_shape_option,
    load_model_graph,
    parse_shapes,
    print_json,
)
from anekit.ir.graph import Graph


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "info",
        help="show a model's inputs, outputs, parameters and ops",
        description="Read an ONNX model and show its inputs and outputs with their shapes, its "
        "parameter count and how many nodes of each op it has.",
        examples=["anekit info examples/digits_cnn.onnx",
                  "anekit info model.onnx --shape input_ids=1x64 --json"],  # fmt: skip
    )
    p.add_argument("model", help="an ONNX model file")
    add_shape_option(p)
    p.set_defaults(func=run)


def summarize(graph: Graph) -> dict:
    return {
        "name": graph.name,
        "inputs": [
            {"name": v.name, "shape": list(v.shape), "dtype": str(v.dtype)} for v in graph.inputs
        ],
        "outputs": [
            {"name": v.name, "shape": list(v.shape), "dtype": str(v.dtype)} for v in graph.outputs
        ],
        "parameters": graph.parameter_count(),
        "parameter_bytes": graph.parameter_bytes(),
        "nodes": len(graph.nodes),
        "ops": graph.op_histogram(),
    }


def _declared(model: str, shapes: dict) -> dict | None:
    """A dynamic model's declared signature and the --shape hint, when the dimensions the
    user left open keep it from importing; None for a model that imports as given."""
    from anekit.cli.common import regular_file
    from anekit.errors import DynamicShapeError, ModelError
    from anekit.frontend.onnx.loader import load_model
    from anekit.frontend.onnx.signature import declared_inputs, declared_outputs

    proto, _ = load_model(regular_file(model, "model file", error=ModelError))
    inputs = declared_inputs(proto)
    if not any((d.dims is None or d.dynamic()) and d.name not in shapes for d in inputs):
        return None
    try:
        load_model_graph(model, shapes)
    except DynamicShapeError as exc:
        problem, hint = exc.message, exc.hint
    else:
        return None

    def row(d: object) -> dict:
        return {"name": d.name, "dtype": d.dtype, "dims": list(d.dims) if d.dims else None,
                "shape": d.shape_text()}  # fmt: skip

    ops: dict[str, int] = {}
    for node in proto.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        ops[key] = ops.get(key, 0) + 1
    return {
        "name": proto.graph.name,
        "dynamic": True,
        "inputs": [row(d) for d in inputs],
        "outputs": [row(d) for d in declared_outputs(proto)],
        "problem": problem,
        "hint": hint,
        "nodes": len(proto.graph.node),
        "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1])),
    }


def _print_declared(model: str, info: dict) -> None:
    print(f"model {model}  ({info['nodes']} ONNX nodes; dynamic shapes: not imported)")
    for title in ("inputs", "outputs"):
        print(f"{title} (as declared):")
        for v in info[title]:
            print(f"  {v['name']}: {v['shape']}")
    print(f"dynamic: {info['problem']}")
    print(f"  hint: {info['hint']}")
    print("ONNX ops:")
    width = max((len(k) for k in info["ops"]), default=0)
    for op, n in info["ops"].items():
        print(f"  {op:<{width}}  {n}")


def run(args: argparse.Namespace) -> int:
    shapes = parse_shapes(args.shape)
    declared = _declared(args.model, shapes)
    if declared is not None:
        if args.json:
            print_json(declared)
        else:
            _print_declared(args.model, declared)
        return 0
    graph = load_model_graph(args.model, shapes)
    info = summarize(graph)
    if args.json:
        print_json(info)
        return 0
    print(
        f"model {args.model}  ({info['nodes']} ops, {info['parameters']:,} parameters, "
        f"{info['parameter_bytes'] / 1e6:.2f} MB)"
    )
    print("inputs:")
    for v in info["inputs"]:
        print(f"  {v['name']}: {v['dtype']}[{'x'.join(map(str, v['shape']))}]")
    print("outputs:")
    for v in info["outputs"]:
        print(f"  {v['name']}: {v['dtype']}[{'x'.join(map(str, v['shape']))}]")
    print("ops:")
    width = max((len(k) for k in info["ops"]), default=0)
    for op, n in info["ops"].items():
        print(f"  {op:<{width}}  {n}")
    return 0
