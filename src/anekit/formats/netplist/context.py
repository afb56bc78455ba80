"""What a unit reader works with: `UnitContext` (the unit, its Params, inputs, weights) and `LayerSpec`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.errors import FormatError
from anekit.formats.netplist.document import Fields, Unit
from anekit.formats.netplist.vocab import MAX_ELEMENTS
from anekit.formats.netplist.weights import WeightRef
from anekit.ir import TensorType
from anekit.ir.dtypes import DType
from anekit.ir.engine import Slot

if TYPE_CHECKING:
    from anekit.formats.netplist.reader import GraphBuilder


@dataclass(frozen=True)
class Step:
    """An epilogue slot a unit fills; operands are value names ('' for an absent one)."""

    slot: Slot
    op: str
    attrs: Mapping[str, Any]
    operands: tuple[str, ...] = ()


@dataclass(frozen=True)
class LayerSpec:
    """What a unit reader returns: the engine layer's main op, its inputs and its epilogue."""

    main: str
    inputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    layer_type: str
    epilogue: tuple[Step, ...] = ()


class UnitContext:
    """What a unit reader sees: the unit, its Params, its input values, weights and constants."""

    def __init__(self, builder: GraphBuilder, unit: Unit, where: str):
        self.builder = builder
        self.unit = unit
        self.where = where
        self.params = Fields(unit.params, f"{where}.Params", "Params")

    @property
    def rank(self) -> int:
        return self.builder.rank

    def fail(self, message: str, hint: str | None = None) -> FormatError:
        return FormatError(f"{self.unit.type} unit: {message}", where=self.where, hint=hint)

    def inputs(self, count: int | None = None, *, numeric: bool = True) -> tuple[str, ...]:
        """The Bottom values; numeric units compute in fp16, so integer tensors are widened."""
        bottoms = self.unit.bottoms
        if count is not None and len(bottoms) != count:
            raise self.fail(f"takes {count} Bottom tensor(s), got {len(bottoms)}")
        values = tuple(self.builder.value_of(b, self.where) for b in bottoms)
        return tuple(self.builder.widened(v) for v in values) if numeric else values

    def type(self, value: str) -> TensorType:
        return self.builder.editor.values[value].type

    def weights(self, role: str, index: int, offset: int, dtype: DType, count: int) -> np.ndarray:
        if count > MAX_ELEMENTS:
            raise self.fail(f"the {role} would have {count} elements, too many")
        ref = WeightRef(self.unit.name, role, index, offset, dtype, count)
        return self.builder.weights.load(ref, self.where)

    def constant(self, array: np.ndarray, role: str) -> str:
        return self.builder.editor.add_constant(
            np.ascontiguousarray(array), f"{self.unit.label}.{role}"
        )
