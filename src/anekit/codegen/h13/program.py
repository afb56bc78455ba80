"""A compiled model as a chain of programs: H13 .hwx programs for the runs of engine layers
that have an H13 form, netplists for the rest (run on the CPU), and `program.e5` naming the
order (an AneInference per .hwx, a CpuInference per netplist)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import anekit
from anekit.codegen.h13.emit import emit
from anekit.codegen.h13.lower import EmitError, is_alias, no_h13_form
from anekit.formats import dispatch
from anekit.formats.netplist.writer import dumps as netplist_dumps
from anekit.ir.graph import Graph, Node

SHAPE_KEY = "output_shape:"  # build-info key: a model output's shape (the chain's are engine-laid)


@dataclass(frozen=True)
class Part:
    """One program of the chain: its device, file, boundary values and the layers it holds."""

    device: str  # "ane" (.hwx) or "cpu" (netplist)
    program: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    layers: int
    reasons: tuple[str, ...]  # why its layers run on the CPU (cpu parts)


@dataclass(frozen=True)
class EmittedProgram:
    files: dict[str, bytes]  # file name -> bytes: part<i>.hwx, part<i>.plist/.weights, program.e5
    descriptor: dispatch.DispatchDescriptor
    parts: tuple[Part, ...]


def sub_graph(graph: Graph, nodes: list[Node], inputs, outputs, name: str) -> Graph:
    """`nodes` of `graph` as a graph of their own (the given boundary values as its I/O)."""
    names = set(inputs) | set(outputs)
    for node in nodes:
        names.update(n for n in (*node.inputs, *node.outputs) if n)
    return Graph(
        inputs=[graph.value(v) for v in inputs],
        outputs=list(outputs),
        nodes=nodes,
        values={n: graph.value(n) for n in names},
        constants={n: graph.constant(n) for n in names if graph.is_constant(n)},
        name=name,
    )


def _rank4(graph: Graph, part: Graph) -> Graph:
    """A CPU part as a netplist holds it: [1, C] values in the engine's [1, C, 1, 1] layout,
    so the layout-preserving reshapes between them become identities."""
    values = {}
    for name, value in part.values.items():
        if len(value.shape) == 2 and value.shape[0] == 1 and not part.is_constant(name):
            value = replace(value, shape=(1, value.shape[1], 1, 1))
        values[name] = value
    nodes = [Node("identity", n.name, n.inputs[:1], n.outputs) if is_alias(graph, n) else n
             for n in part.nodes]  # fmt: skip
    return Graph(inputs=[values[v.name] for v in part.inputs],
                 outputs=[v.name for v in part.outputs], nodes=nodes, values=values,
                 constants=dict(part.constants), name=part.name)  # fmt: skip


def _runs(graph: Graph, nodes: list[Node], device: str) -> list[tuple[str, list[Node], list[str]]]:
    """Consecutive nodes grouped by where they run: (device, nodes, CPU reasons)."""
    runs: list[tuple[str, list[Node], list[str]]] = []
    for node in nodes:
        if runs and is_alias(graph, node):  # moves no data: stays with the layer before it
            runs[-1][1].append(node)
            continue
        reason = no_h13_form(graph, node) if device == "ane" else "a CPU segment"
        where = "cpu" if reason else "ane"
        if runs and runs[-1][0] == where:
            runs[-1][1].append(node)
        else:
            runs.append((where, [node], []))
        if reason:
            runs[-1][2].append(f"{node.name}: {reason}")
    return runs


def _boundary(graph: Graph, nodes: list[Node], later: list[Node], wanted: set[str]):
    produced = {o for n in nodes for o in n.outputs if o}
    inputs = []
    for node in nodes:
        for name in node.inputs:
            if name and name not in produced and not graph.is_constant(name) and name not in inputs:
                inputs.append(name)
    used_later = {i for n in later for i in n.inputs} | wanted
    outputs = [o for n in nodes for o in n.outputs if o and o in used_later]
    return inputs, outputs


def emit_program(compiled: Any) -> EmittedProgram:
    """Every segment of `compiled` (a CompiledModel) as a chain of programs."""
    graph = compiled.graph
    wanted = {v.name for v in graph.outputs}
    ordered: list[tuple[str, list[Node], list[str]]] = []
    for segment in compiled.segments:
        nodes = [graph.node(name) for name in segment.nodes]
        ordered += _runs(graph, nodes, segment.device)
    files: dict[str, bytes] = {}
    parts: list[Part] = []
    for index, (device, nodes, reasons) in enumerate(ordered):
        later = [n for _, run, _ in ordered[index + 1 :] for n in run]
        inputs, outputs = _boundary(graph, nodes, later, wanted)
        if not outputs:
            continue
        if not inputs:
            raise EmitError(
                f"part {index} ({nodes[0].name} ...) computes only from constants; fold it "
                "before emission",
                where=graph.name,
            )
        part = sub_graph(graph, nodes, inputs, outputs, f"{graph.name}.part{index}")
        if device == "ane":
            name = f"part{index}.hwx"
            files[name] = emit(part, source=graph.name)
        else:
            name = f"part{index}.plist"
            plist, blob = netplist_dumps(
                _rank4(graph, part), network="net", weights_name=f"part{index}.weights"
            )
            files[name] = plist
            if blob:
                files[f"part{index}.weights"] = blob
        parts.append(Part(device, name, tuple(inputs), tuple(outputs), len(nodes), tuple(reasons)))
    if not parts:
        raise EmitError("the model has no layer to emit", where=graph.name)
    build = (("compiler", f"anekit {anekit.__version__}"), ("target", compiled.target.name),
             ("model", graph.name),
             *((f"{SHAPE_KEY}{v.name}", ",".join(map(str, v.shape))) for v in graph.outputs))  # fmt: skip
    descriptor = dispatch.program_for_segments(
        [(p.device, p.program, p.inputs, p.outputs) for p in parts], build
    )
    files["program.e5"] = dispatch.write(descriptor)
    return EmittedProgram(files, descriptor, tuple(parts))
