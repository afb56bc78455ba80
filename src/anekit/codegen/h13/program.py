"""A compiled model as H13 programs: one .hwx per engine segment and the dispatch descriptor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anekit
from anekit.codegen.h13.emit import emit
from anekit.formats import dispatch
from anekit.ir.graph import Graph


@dataclass(frozen=True)
class EmittedProgram:
    files: dict[str, bytes]  # file name -> bytes: segment<i>.hwx ..., program.e5
    descriptor: dispatch.DispatchDescriptor


def segment_graph(graph: Graph, segment: Any) -> Graph:
    """The nodes of one segment as a graph of their own (its boundary values as I/O)."""
    nodes = [graph.node(name) for name in segment.nodes]
    names = set(segment.inputs) | set(segment.outputs)
    for node in nodes:
        names.update(n for n in (*node.inputs, *node.outputs) if n)
    constants = {n: graph.constant(n) for n in names if graph.is_constant(n)}
    return Graph(
        inputs=[graph.value(v) for v in segment.inputs],
        outputs=list(segment.outputs),
        nodes=nodes,
        values={n: graph.value(n) for n in names},
        constants=constants,
        name=f"{graph.name}.segment{segment.index}",
    )


def emit_program(compiled: Any) -> EmittedProgram:
    """Every engine segment of `compiled` (a CompiledModel) as a .hwx; CPU segments are named
    in the descriptor as CpuInference operations (they run as MIL, not on the engine)."""
    files: dict[str, bytes] = {}
    chain = []
    for segment in compiled.segments:
        if segment.device == "ane":
            name = f"segment{segment.index}.hwx"
            files[name] = emit(segment_graph(compiled.graph, segment), source=compiled.graph.name)
            chain.append(("ane", name, segment.inputs, segment.outputs))
        else:
            chain.append(("cpu", f"segment{segment.index} (MIL, CPU)", segment.inputs,
                          segment.outputs))  # fmt: skip
    build = (("compiler", f"anekit {anekit.__version__}"), ("target", compiled.target.name),
             ("model", compiled.graph.name))  # fmt: skip
    descriptor = dispatch.program_for_segments(chain, build)
    files["program.e5"] = dispatch.write(descriptor)
    return EmittedProgram(files, descriptor)
