"""anekit: a toolchain for the Apple Neural Engine."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from anekit.budget import max_memory
from anekit.errors import (
    AnekitError,
    FormatError,
    InputError,
    MemoryBudgetError,
    ModelError,
    ShapeError,
    TargetError,
    UnsupportedModelError,
)
from anekit.targets import DEFAULT_TARGET
from anekit.version import __version__

if TYPE_CHECKING:
    from anekit.compiler import CompiledModel
    from anekit.frontend.builder import Tensor, constant, graph, input, ops, parameter
    from anekit.ir import DType, Graph, Node, Value

# Names imported on first use, so that `import anekit.formats` (or any other subpackage,
# whose import runs this file first) does not load the builder, the IR or the compiler.
_LAZY = {
    "Tensor": "anekit.frontend.builder",
    "constant": "anekit.frontend.builder",
    "graph": "anekit.frontend.builder",
    "input": "anekit.frontend.builder",
    "ops": "anekit.frontend.builder",
    "parameter": "anekit.frontend.builder",
    "DType": "anekit.ir",
    "Graph": "anekit.ir",
    "Node": "anekit.ir",
    "Value": "anekit.ir",
    "CompiledModel": "anekit.compiler",  # the compiler pulls in every pass
    "LoRA": "anekit.lora",
}


def from_onnx(
    model: Any, input_shapes: dict[str, Any] | None = None, constants: dict[str, Any] | None = None
) -> Graph:
    """Import an ONNX model (path, bytes or onnx.ModelProto) as a Graph with static shapes;
    ``constants`` fixes inputs to values so that shape logic and ``If`` branches fold."""
    from anekit.frontend.onnx import from_onnx as _from_onnx

    return _from_onnx(model, input_shapes, constants=constants)


def from_torch(
    module: Any, example_inputs: Any, input_names: list[str] | None = None, **kwargs: Any
) -> Graph:
    """Export a torch.nn.Module to ONNX in memory and import it (needs the `torch` extra)."""
    from anekit.frontend.torch import from_torch as _from_torch

    return _from_torch(module, example_inputs, input_names, **kwargs)


def compile(model: Any, target: Any = DEFAULT_TARGET, **options: Any) -> Any:  # noqa: A001
    """Compile a model (Graph, ONNX path or ModelProto) for a chip: an `anekit.compiler.CompiledModel`."""
    from anekit.compiler import compile as _compile

    return _compile(model, target, **options)


def load_or_compile(model: Any, target: Any = DEFAULT_TARGET, **options: Any) -> Any:
    """The compiled program of ``model`` from the program cache, compiling it on a miss
    (`anekit.compiler.load_or_compile`; ``ANEKIT_CACHE_DIR``)."""
    from anekit.compiler import load_or_compile as _load_or_compile

    return _load_or_compile(model, target, **options)


def __getattr__(name: str) -> Any:
    """The builder, IR and compiler names, imported on first use (see _LAZY)."""
    if name in ("lora", "train", "llm"):  # subpackages named as attributes
        return import_module(f"anekit.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'anekit' has no attribute '{name}'")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


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
    "MemoryBudgetError",
    "LoRA",
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
    "max_memory",
    "load_or_compile",
    "ops",
    "parameter",
]
