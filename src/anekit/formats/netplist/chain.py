"""The writer's building blocks: `Operand`, the `Chain` of units one layer becomes, `Unsupported`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from anekit.formats.netplist.vocab import TYPE_NAMES
from anekit.ir import TensorType
from anekit.ir.dtypes import DType


class Unsupported(Exception):
    """This op (with these attributes/operands) has no netplist form; the message says why."""


@dataclass(frozen=True)
class Operand:
    """A live tensor (`name` set) or a constant (`const` set); `type` is its IR type."""

    type: TensorType
    name: str | None = None
    const: np.ndarray | None = None


class Weights(Protocol):
    """Where a chain stores arrays: returns (Weights index, byte offset)."""

    def add(self, array: np.ndarray) -> tuple[int, int]: ...


@dataclass
class Chain:
    """The units one engine layer becomes, in order (names are assigned by the writer)."""

    rank: int
    weights: Weights
    fresh: Callable[[], str]
    units: list[dict[str, Any]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    def unit(
        self,
        unit_type: str,
        bottoms: Sequence[Operand],
        params: Mapping[str, Any],
        out: TensorType,
        *,
        channels: bool = False,
    ) -> Operand:
        names = []
        for b in bottoms:
            if b.name is None:
                raise Unsupported("netplists have no constant tensors: an operand must be computed")
            names.append(b.name)
        name = self.fresh()
        entry: dict[str, Any] = {
            "Bottom": names[0] if len(names) == 1 else names,
            "Name": name,
            "Type": unit_type,
            "OutputType": dtype_name(out.dtype),
        }
        if params:
            entry["Params"] = dict(params)
        if channels:
            entry["OutputChannels"] = int(out.shape[1])
        self.units.append(entry)
        self.names.append(name)
        return Operand(out, name)

    def set_output_type(self, dtype: DType) -> None:
        if not self.units:
            raise Unsupported("an output conversion needs a unit to convert")
        self.units[-1]["OutputType"] = dtype_name(dtype)


def dtype_name(dtype: DType) -> str:
    if dtype not in TYPE_NAMES:
        raise Unsupported(
            f"{dtype} tensors have no netplist type (they are {', '.join(TYPE_NAMES.values())})"
        )
    return TYPE_NAMES[dtype]


def half_bits(value: float) -> int:
    return int(np.array(value, dtype=np.float16).view(np.uint16))
