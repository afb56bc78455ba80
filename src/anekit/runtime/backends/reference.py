"""``reference``: the IR graph in fp32, each op's numpy kernel (`anekit.ir.interpret`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from anekit.runtime.backends import Backend


class ReferenceBackend(Backend):
    name = "reference"
    summary = "the IR graph in fp32 with numpy"
    runs_graphs = True

    def run_graph(self, graph: Any, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return graph.run(feeds)


BACKEND = ReferenceBackend()
