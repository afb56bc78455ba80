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


def run(args: argparse.Namespace) -> int:
    graph = load_model_graph(args.model, parse_shapes(args.shape))
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
