"""``engine``: H13 .hwx programs on the register-level engine emulator (`anekit.emulator`).

The module is named for what runs the programs; the backend keeps its user-facing name.

It runs .hwx files, and graphs of engine layers (a compiled model's engine graph, a
netplist) by emitting them as an H13 program first (`anekit.codegen.h13`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from anekit.runtime.backends import Backend


class EngineBackend(Backend):
    name = "engine"
    summary = "H13 programs on the register-level engine emulator (.hwx, or a graph emitted as one)"
    runs_hwx = True
    runs_graphs = True

    def run_graph(self, graph: Any, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        from anekit.codegen.h13 import emit

        outputs = self.run_hwx(emit(graph, source=graph.name), feeds)
        # the engine holds [1, C] as [1, C, 1, 1]: hand back the graph's own shapes
        return {v.name: outputs[v.name].reshape(v.shape) for v in graph.outputs}

    def run_hwx(
        self, program: str | os.PathLike[str] | bytes, feeds: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        """Run one .hwx program (a path or its bytes), or a folder of emitted programs in its
        program.e5's order; outputs as float32 arrays."""
        from anekit.emulator import EngineProgram
        from anekit.runtime.hwx_chain import is_chain, run_chain

        if isinstance(program, bytes):
            return EngineProgram(program).run(feeds)
        if is_chain(program):
            return run_chain(program, feeds)
        return EngineProgram.load(program).run(feeds)


BACKEND = EngineBackend()
