"""anekit: a toolchain for the Apple Neural Engine."""

from __future__ import annotations

from typing import Any

from anekit.errors import (
    AnekitError,
    FormatError,
    InputError,
    ModelError,
    ShapeError,
    TargetError,
    UnsupportedModelError,
)
from anekit.frontend.builder import Tensor, constant, graph, input, ops, parameter
from anekit.ir import DType, Graph, Node, Value

__version__ = "0.1.0"


def from_onnx(model: Any, input_shapes: dict[str, Any] | None = None) -> Graph:
    """Import an ONNX model (path, bytes or onnx.ModelProto) as a Graph with static shapes."""
    from anekit.frontend.onnx import from_onnx as _from_onnx

    return _from_onnx(model, input_shapes)


def from_torch(
    module: Any, example_inputs: Any, input_names: list[str] | None = None, **kwargs: Any
) -> Graph:
    """Export a torch.nn.Module to ONNX in memory and import it (needs the `torch` extra)."""
    from anekit.frontend.torch import from_torch as _from_torch

    return _from_torch(module, example_inputs, input_names, **kwargs)


def compile(model: Any, target: Any = "m4", **options: Any) -> Any:  # noqa: A001
    """Compile a model (Graph, ONNX path or ModelProto) for a chip: an `anekit.compiler.CompiledModel`."""
    from anekit.compiler import compile as _compile

    return _compile(model, target, **options)


def __getattr__(name: str) -> Any:
    """`anekit.CompiledModel`, imported on first use (the compiler pulls in every pass)."""
    if name == "CompiledModel":
        from anekit.compiler import CompiledModel

        return CompiledModel
    raise AttributeError(f"module 'anekit' has no attribute '{name}'")


def load(path: Any, **options: Any) -> Any:
    """Load a compiled bundle (``NAME.anekit``) or a MIL file as a runnable `anekit.runtime.Program`."""
    from anekit.runtime import load as _load

    return _load(path, **options)


__all__ = [
    "AnekitError",
    "CompiledModel",
    "DType",
    "FormatError",
    "Graph",
    "InputError",
    "ModelError",
    "Node",
    "ShapeError",
    "TargetError",
    "Tensor",
    "UnsupportedModelError",
    "Value",
    "__version__",
    "compile",
    "constant",
    "from_onnx",
    "from_torch",
    "graph",
    "input",
    "load",
    "ops",
    "parameter",
]
