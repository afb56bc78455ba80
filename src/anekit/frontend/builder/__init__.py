"""The Python builder API: symbolic tensors, functional ops and graph assembly."""

from anekit.frontend.builder import ops
from anekit.frontend.builder.tensor import Tensor, constant, graph, input, parameter

__all__ = ["Tensor", "constant", "graph", "input", "ops", "parameter"]
