"""What an ONNX op converter sees: its node's attributes, typed inputs, and an emitter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import AttributeProto

from anekit import budget
from anekit.errors import ModelError
from anekit.frontend.onnx.loader import tensor_to_array
from anekit.ir.registry import REQUIRED, TensorType

if TYPE_CHECKING:
    from anekit.frontend.onnx.importer import Importer


def attribute_value(attr: AttributeProto) -> Any:
    """A Python value for an ONNX attribute (lists become tuples, tensors arrays)."""
    t = attr.type
    if t == AttributeProto.FLOAT:
        return attr.f
    if t == AttributeProto.INT:
        return attr.i
    if t == AttributeProto.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if t == AttributeProto.TENSOR:
        return tensor_to_array(attr.t, None)  # checked like an initializer
    if t == AttributeProto.FLOATS:
        return tuple(attr.floats)
    if t == AttributeProto.INTS:
        return tuple(attr.ints)
    if t == AttributeProto.STRINGS:
        return tuple(s.decode("utf-8", errors="replace") for s in attr.strings)
    if t in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        raise ModelError(
            f"attribute '{attr.name}' holds a sub-graph; control flow is not supported"
        )
    raise ModelError(f"attribute '{attr.name}' has an unsupported type {t}")


class NodeContext:
    """One ONNX node being converted. Converters call ``emit`` and return the output names."""

    def __init__(self, importer: Importer, node: onnx.NodeProto, name: str, opset: int):
        self._imp = importer
        self.node = node
        self.name = name
        self.op_type = node.op_type
        self.opset = opset
        self._attrs = {a.name: a for a in node.attribute}

    # --- attributes ----------------------------------------------------------------------

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    def attr(self, name: str, default: Any = REQUIRED) -> Any:
        if name in self._attrs:
            return attribute_value(self._attrs[name])
        if default is REQUIRED:
            raise ModelError(f"missing required attribute '{name}'")
        return default

    def subgraph(self, name: str) -> onnx.GraphProto:
        """The sub-graph held by attribute ``name`` (an If's branch)."""
        attr = self._attrs.get(name)
        if attr is None or attr.type != AttributeProto.GRAPH:
            raise ModelError(f"missing the sub-graph attribute '{name}'")
        return attr.g

    def inline(self, branch: onnx.GraphProto) -> list[str]:
        """Convert ``branch``'s nodes into the graph; the IR names of its outputs."""
        return self._imp.inline(branch, f"ONNX node '{self.name}' ({self.op_type})")

    def note(self, code: str, message: str, hint: str) -> None:
        """A warning about this node that compile reports as a diagnostic."""
        self._imp.notes.append((code, self.name, message, hint))

    def graph_inputs_feeding(self, i: int) -> list[str]:
        """The model inputs input i is computed from (for messages)."""
        return self._imp.inputs_feeding(self.input(i))

    # --- inputs --------------------------------------------------------------------------

    @property
    def n_inputs(self) -> int:
        """Number of inputs, not counting trailing absent optional ones."""
        names = list(self.node.input)
        while names and not names[-1]:
            names.pop()
        return len(names)

    def input(self, i: int) -> str | None:
        """The IR value name of input i, or None when absent."""
        if i >= len(self.node.input) or not self.node.input[i]:
            return None
        return self._imp.lookup(self.node.input[i])

    def inputs(self) -> list[str | None]:
        return [self.input(i) for i in range(self.n_inputs)]

    def type(self, i: int) -> TensorType:
        name = self.input(i)
        if name is None:
            raise ModelError(f"input {i} is required")
        return self._imp.values[name].type

    def shape(self, i: int) -> tuple[int, ...]:
        return self.type(i).shape

    def shape_of(self, value: str) -> tuple[int, ...]:
        """The static shape of an IR value (an input or one this converter emitted)."""
        return self._imp.values[value].shape

    def const(self, i: int) -> np.ndarray | None:
        """The value of input i if it is a constant (after folding), else None."""
        name = self.input(i)
        return None if name is None else self._imp.constants.get(name)

    def four_bit(self, i: int) -> bool:
        """Input i is a constant of int4/uint4 codes (held widened to int8/uint8)."""
        return self.input(i) in self._imp.four_bit

    def require_const(self, i: int, what: str) -> np.ndarray:
        value = self.const(i)
        if value is None:
            if self.input(i) is None:
                raise ModelError(f"input {i} ({what}) is required")
            raise ModelError(
                f"input '{self.node.input[i]}' ({what}) must be a constant once input shapes are fixed, "
                "but it is computed from the data",
                hint="anekit compiles static graphs; fix the input shapes with input_shapes= / --shape",
            )
        return value

    def ints_input(
        self, i: int, what: str, default: Sequence[int] | None = None, *, optional: bool = False
    ) -> tuple[int, ...] | None:
        """Input i's constant ints; ``default`` (or None when ``optional``) when it is absent,
        else a ModelError naming the missing input."""
        if self.input(i) is None:
            if default is None and not optional:
                raise ModelError(f"{self.node.op_type} needs its input {i} ({what})")
            return None if default is None else tuple(default)
        try:
            return tuple(int(v) for v in self.require_const(i, what).reshape(-1))
        except (OverflowError, ValueError):  # inf or nan where integers belong
            raise ModelError(f"input {i} ({what}) must hold integers") from None

    # --- emitting ------------------------------------------------------------------------

    def emit(
        self,
        op: str,
        inputs: Sequence[str | None],
        attrs: Mapping[str, Any] | None = None,
        *,
        final: bool = False,
    ) -> str | tuple[str, ...]:
        """Add an IR op (folded to a constant when every input is constant).

        ``final=True`` gives its outputs the ONNX node's output names.
        """
        names = tuple(self.node.output) if final else None
        outs = self._imp.emit(op, list(inputs), attrs, node=self, output_names=names)
        return outs[0] if len(outs) == 1 else outs

    def emit_as(self, k: int, op: str, inputs: Sequence[str | None]) -> str:
        """A one-output IR op whose output takes the node's ``k``-th output name."""
        names = (self.node.output[k],) if k < len(self.node.output) else None
        return self._imp.emit(op, list(inputs), None, node=self, output_names=names)[0]

    def reserve(self, shape: Sequence[int], dtype: Any, what: str) -> None:
        """Check a constant of ``shape`` the model asks for against the memory budget, before
        it is made (the node's name is added to the error by the importer)."""
        budget.check_array(tuple(shape), np.dtype(dtype).itemsize, f"{what} of shape {list(shape)}")

    def constant(self, array: np.ndarray, hint: str = "c") -> str:
        return self._imp.add_constant(np.asarray(array), f"{self.name}/{hint}")
