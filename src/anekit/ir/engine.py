"""Engine layers: one ANE operation plus the seven epilogue slots of ane-compiler (listing 22.3).

A layer is the IR op ``ane_layer``. Its inputs are the main op's inputs followed by the
epilogue operands (e.g. GOC gain and offset constants). Its reference kernel runs the
main op, then each filled slot in slot order, so an engine graph runs on the reference
backend like any other graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import Any

from anekit.ir.graph import Node
from anekit.ir.ops._infer import Attrs, Types, broadcast
from anekit.ir.registry import Attr, InferError, TensorType, declare, get_op, infer_types


class Slot(IntEnum):
    """The epilogue slots in their fixed order (ZinNEBypassLayer's constructor order)."""

    TEXTURE = 0  # in-place spatial/texture remap
    BROADCAST = 1  # broadcast of a fused operand
    PRE_ACT = 2  # activation before the gain/offset unit
    GOC = 3  # gain/offset control: per-channel (or scalar) scale and bias
    POST_ACT = 4  # activation after the gain/offset unit
    TRANSPOSE = 5  # output transpose / layout
    QUANT = 6  # output (re)quantisation


@dataclass(frozen=True)
class EpilogueStep:
    """One filled slot: ``op`` applied to the running value and the node inputs ``operands``.

    An operand index of -1 passes an absent optional input (e.g. a GOC with offset only).
    """

    slot: Slot
    op: str
    attrs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    operands: tuple[int, ...] = ()
    origin: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.attrs, MappingProxyType):
            object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.attrs.items() if v is not None)
        return f"{self.slot.name.lower()}:{self.op}" + (f"({args})" if args else "")


# Which engine unit executes a layer type: the multiply-accumulate array, the planar
# engine, or the DMA/transpose path (no compute).
UNITS: Mapping[str, str] = MappingProxyType(
    {
        "conv": "mac",
        "matmul": "mac",
        "elementwise": "planar",
        "neuron": "planar",
        "goc": "planar",
        "pool": "planar",
        "softmax": "planar",
        "reduction": "planar",
        "concat": "dma",
        "reshape": "dma",
        "transpose": "dma",
        "texture": "planar",
        "deconv": "mac",
        "norm": "planar",
        "sdpa": "mac",  # the fused attention layer: its two matmuls dominate
    }
)


def layer_type_of(main: str) -> str:
    """The engine layer type of an IR op, from its record: its own layer type, or 'neuron'
    for an activation (KeyError when the op has no engine form)."""
    record = get_op(main)
    if record.layer_type:
        return record.layer_type
    if record.activation:
        return "neuron"
    raise KeyError(f"IR op '{main}' has no engine layer form")


def is_activation(op: str) -> bool:
    """Whether the engine's neuron unit applies ``op`` (a layer of its own or an epilogue slot)."""
    return get_op(op).activation


def has_engine_form(op: str) -> bool:
    """Whether ``op`` can be the main op of an engine layer."""
    record = get_op(op)
    return bool(record.layer_type) or record.activation


# --- the gain/offset unit as an op of its own -------------------------------------------


@declare("goc", layer_type="goc", inputs=("x", "gain?", "offset?"), infer=broadcast())
def goc(x, gain, offset):
    """x * gain + offset with gain/offset broadcast (per-channel [C,1,1] or scalar)"""
    y = x if gain is None else x * gain
    return y if offset is None else y + offset


# --- the layer op -----------------------------------------------------------------------


def _steps(attrs: Attrs) -> tuple[EpilogueStep, ...]:
    steps = attrs["epilogue"]
    order = [s.slot for s in steps]
    if order != sorted(order) or len(set(order)) != len(order):
        raise InferError(
            f"epilogue slots must be distinct and in slot order, got {[s.name for s in order]}"
        )
    return steps


def _layer_infer(ins: Types, attrs: Attrs) -> list[TensorType]:
    n = attrs["n_main"]
    if n > len(ins):
        raise InferError(f"n_main={n} but the layer has {len(ins)} inputs")
    _, outs = infer_types(attrs["main"], ins[:n], attrs["main_attrs"])
    if len(outs) != 1:
        raise InferError("engine layers have one output")
    cur = outs[0]
    for step in _steps(attrs):
        if any(i != -1 and (i < n or i >= len(ins)) for i in step.operands):
            raise InferError(
                f"epilogue {step.describe()} reads inputs {step.operands} outside the operands"
            )
        operand_types = [ins[i] if i >= 0 else None for i in step.operands]
        _, (cur,) = infer_types(step.op, [cur, *operand_types], step.attrs)
    return [cur]


@declare(
    "ane_layer",
    inputs=("xs*",),
    attrs=(
        Attr("main", "str", doc="the IR op of the engine operation"),
        Attr("main_attrs", "any", MappingProxyType({})),
        Attr("n_main", "int", doc="how many leading inputs belong to the main op"),
        Attr("epilogue", "any", (), doc="tuple of EpilogueStep in slot order"),
        Attr("layer_type", "str", doc="engine layer type (conv, matmul, elementwise, ...)"),
        Attr("main_origin", "strs", (), doc="the original nodes the main op implements"),
    ),
    infer=_layer_infer,
)
def ane_layer(*xs, main, main_attrs, n_main, epilogue, layer_type, main_origin):
    """main op, then each filled epilogue slot in order"""
    y = get_op(main).call(xs[:n_main], main_attrs)
    for step in epilogue:
        y = get_op(step.op).call(
            [y, *(xs[i] if i >= 0 else None for i in step.operands)], step.attrs
        )
    return y


@dataclass(frozen=True)
class LayerView:
    """Typed read access to an ``ane_layer`` node."""

    node: Node

    def __post_init__(self) -> None:
        if self.node.op != "ane_layer":
            raise ValueError(f"node '{self.node.name}' is a {self.node.op}, not an engine layer")

    @property
    def main(self) -> str:
        return self.node.attrs["main"]

    @property
    def main_attrs(self) -> Mapping[str, Any]:
        return self.node.attrs["main_attrs"]

    @property
    def layer_type(self) -> str:
        return self.node.attrs["layer_type"]

    @property
    def unit(self) -> str:
        return UNITS[self.layer_type]

    @property
    def main_inputs(self) -> tuple[str, ...]:
        return self.node.inputs[: self.node.attrs["n_main"]]

    @property
    def epilogue(self) -> tuple[EpilogueStep, ...]:
        return self.node.attrs["epilogue"]

    def slot(self, slot: Slot) -> EpilogueStep | None:
        return next((s for s in self.epilogue if s.slot == slot), None)

    def operand(self, step: EpilogueStep, k: int = 0) -> str | None:
        """The value name of a step's k-th operand (None when absent)."""
        i = step.operands[k] if k < len(step.operands) else -1
        return self.node.inputs[i] if i >= 0 else None

    @property
    def main_origin(self) -> tuple[str, ...]:
        """The original nodes the main op implements (the rest of the origin was folded in)."""
        return self.node.attrs.get("main_origin") or self.node.origin

    def describe(self) -> str:
        parts = [self.main] + [s.describe() for s in self.epilogue]
        return " + ".join(parts)


def layer_attrs(
    main: str,
    main_attrs: Mapping[str, Any],
    n_main: int,
    epilogue: Sequence[EpilogueStep] = (),
    layer_type: str | None = None,
    main_origin: Sequence[str] = (),
) -> dict[str, Any]:
    """Attributes for an ``ane_layer`` node (main attrs normalised by the main op).

    ``main_origin`` names the original nodes the main op implements, so reports can tell
    a node that became a layer from one folded into another layer's epilogue.
    """
    norm = get_op(main).normalize_attrs(main_attrs)
    return {
        "main": main,
        "main_attrs": norm,
        "n_main": n_main,
        "epilogue": tuple(sorted(epilogue, key=lambda s: s.slot)),
        "layer_type": layer_type or layer_type_of(main),
        "main_origin": tuple(main_origin),
    }
