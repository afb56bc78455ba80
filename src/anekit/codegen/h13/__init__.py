"""H13 (M1) code generation: anekit's engine layers as .hwx programs (`emit(graph) -> bytes`)."""

from anekit.codegen.h13.emit import EmitError, emit

__all__ = ["EmitError", "emit"]
