"""The op registry: one declaration per op (inputs, typed attributes, inference, fp32 kernel)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit.ir.dtypes import DType, to_dtype


class _Required:
    """Marks an attribute without a default."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

# Attribute kinds and how a value of each is normalised. Lists become tuples so that
# node attributes are immutable and comparable.
_ATTR_KINDS = ("int", "float", "bool", "str", "ints", "floats", "strs", "dtype", "array", "any")


class InferError(Exception):
    """Raised by an inference function; the caller adds the node and op names."""


class KernelError(Exception):
    """A kernel refused the values it was given (an index out of range, an integer division
    by zero): the fault of whoever supplied them, the model's constants or the caller's
    feeds. The caller adds the node and says which."""


@dataclass(frozen=True)
class TensorType:
    """The static type of a tensor: its shape and element type."""

    shape: tuple[int, ...]
    dtype: DType

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __str__(self) -> str:
        return f"{self.dtype}[{'x'.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Attr:
    """A typed op attribute with an optional default and an optional closed set of values."""

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[Any, ...] | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _ATTR_KINDS:
            raise ValueError(f"attribute {self.name}: unknown kind {self.kind!r}")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def coerce(self, value: Any) -> Any:
        """Normalise a user value to this attribute's kind; raise InferError if it does not fit."""
        if value is None and self.default is None:
            return None
        try:
            out = _COERCE[self.kind](value)
        except (TypeError, ValueError) as exc:
            raise InferError(f"attribute '{self.name}' expects {self.kind}, got {value!r}") from exc
        if self.choices is not None and out not in self.choices:
            raise InferError(
                f"attribute '{self.name}' must be one of {list(self.choices)}, got {out!r}"
            )
        return out


def _as_int(v: Any) -> int:
    if isinstance(v, bool | np.bool_):
        return int(v)
    if isinstance(v, float | np.floating) and not float(v).is_integer():
        raise ValueError("not an integer")
    return int(v)


def _as_ints(v: Any) -> tuple[int, ...]:
    if isinstance(v, np.ndarray):
        v = v.reshape(-1).tolist()
    if isinstance(v, int | np.integer):
        return (int(v),)
    return tuple(_as_int(x) for x in v)


def _as_floats(v: Any) -> tuple[float, ...]:
    if isinstance(v, np.ndarray):
        v = v.reshape(-1).tolist()
    if isinstance(v, int | float | np.number):
        return (float(v),)
    return tuple(float(x) for x in v)


def _as_array(v: Any) -> np.ndarray:
    arr = np.array(v)
    arr.flags.writeable = False
    return arr


_COERCE: dict[str, Callable[[Any], Any]] = {
    "int": _as_int,
    "float": float,
    "bool": lambda v: bool(v),
    "str": lambda v: v if isinstance(v, str) else v.decode() if isinstance(v, bytes) else str(v),
    "ints": _as_ints,
    "floats": _as_floats,
    "strs": lambda v: tuple(str(x) for x in v),
    "dtype": to_dtype,
    "array": _as_array,
    "any": lambda v: v,
}

InferFn = Callable[[Sequence["TensorType | None"], Mapping[str, Any]], Sequence[TensorType]]
KernelFn = Callable[..., Any]


@dataclass(frozen=True)
class OpDef:
    """One op: its inputs ('x', optional 'bias?', variadic 'xs*'), attributes, inference and
    kernel, and what the compiler needs to know about it (docs/adding-an-op.md).

    ``num_outputs`` gives the output count of ops with a variadic output, from the attributes
    and the input count. ``layer_type`` is the engine layer the op becomes as a layer's main
    op ("" when it has none; ir/engine.py's UNITS says which unit runs each type);
    ``activation`` marks the ops the engine's neuron unit applies, as a layer of their own
    or in an activation slot of another layer's epilogue. ``affine`` marks the binary ops
    that fold into the gain/offset unit when one operand is a constant (x*g+o).
    ``no_engine_form`` is the reason the check report gives when the op runs on the CPU
    (empty: the generic one).
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[Attr, ...]
    infer: InferFn
    kernel: KernelFn
    doc: str = ""
    num_outputs: Callable[[Mapping[str, Any], int], int] | None = None
    # why code generation cannot emit the op ("" when it has a MIL lowering): validate turns
    # it into an error, so `check` never places a node that `save` cannot write
    no_lowering: str = ""
    layer_type: str = ""
    activation: bool = False
    affine: bool = False
    no_engine_form: str = ""
    attr_index: Mapping[str, Attr] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attr_index", MappingProxyType({a.name: a for a in self.attrs}))

    @property
    def variadic_input(self) -> bool:
        return bool(self.inputs) and self.inputs[-1].endswith("*")

    @property
    def min_inputs(self) -> int:
        return sum(1 for n in self.inputs if not n.endswith(("?", "*")))

    def input_name(self, i: int) -> str:
        if i < len(self.inputs):
            return self.inputs[i].rstrip("?*")
        return f"{self.inputs[-1].rstrip('*')}[{i}]"

    def check_arity(self, n: int) -> None:
        if n < self.min_inputs or (not self.variadic_input and n > len(self.inputs)):
            spec = ", ".join(self.inputs)
            raise InferError(f"expects inputs ({spec}), got {n}")

    def output_count(self, attrs: Mapping[str, Any], n_inputs: int) -> int:
        if self.num_outputs is not None:
            return self.num_outputs(attrs, n_inputs)
        return len(self.outputs)

    def call(self, args: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
        """Run the kernel; absent trailing optional inputs are passed as None."""
        args = list(args)
        if not self.variadic_input and len(args) < len(self.inputs):
            args += [None] * (len(self.inputs) - len(args))
        return self.kernel(*args, **attrs)

    def normalize_attrs(self, attrs: Mapping[str, Any] | None) -> Mapping[str, Any]:
        """Fill defaults, coerce kinds, reject unknown and missing attributes."""
        attrs = dict(attrs or {})
        unknown = sorted(set(attrs) - set(self.attr_index))
        if unknown:
            known = ", ".join(self.attr_index) or "none"
            raise InferError(f"unknown attribute(s) {unknown}; known: {known}")
        out: dict[str, Any] = {}
        for spec in self.attrs:
            if spec.name in attrs:
                out[spec.name] = spec.coerce(attrs[spec.name])
            elif spec.required:
                raise InferError(f"missing required attribute '{spec.name}'")
            else:
                out[spec.name] = spec.default
        return MappingProxyType(out)


class OpRegistry:
    """Name -> OpDef. Filled once, at import of `anekit.ir.ops`; read-only afterwards."""

    def __init__(self) -> None:
        self._ops: dict[str, OpDef] = {}

    def add(self, opdef: OpDef) -> OpDef:
        if opdef.name in self._ops:
            raise ValueError(f"op '{opdef.name}' is declared twice")
        self._ops[opdef.name] = opdef
        return opdef

    def get(self, name: str) -> OpDef:
        try:
            return self._ops[name]
        except KeyError:
            raise KeyError(f"unknown IR op '{name}'") from None

    def __contains__(self, name: object) -> bool:
        return name in self._ops

    def names(self) -> list[str]:
        return sorted(self._ops)


REGISTRY = OpRegistry()


def declare(
    name: str,
    *,
    inputs: Sequence[str],
    attrs: Sequence[Attr] = (),
    infer: InferFn,
    outputs: Sequence[str] = ("y",),
    num_outputs: Callable[[Mapping[str, Any], int], int] | None = None,
    doc: str = "",
    no_lowering: str = "",
    layer_type: str = "",
    activation: bool = False,
    affine: bool = False,
    no_engine_form: str = "",
) -> Callable[[KernelFn], KernelFn]:
    """Decorator declaring an op whose fp32 numpy reference kernel is the decorated function.

    The kernel is called as ``kernel(*inputs, **attrs)`` with fp16 inputs already widened to
    fp32 and every attribute present (defaults filled); it returns one array or a tuple.
    """

    def wrap(kernel: KernelFn) -> KernelFn:
        REGISTRY.add(
            OpDef(
                name=name,
                inputs=tuple(inputs),
                outputs=tuple(outputs),
                attrs=tuple(attrs),
                infer=infer,
                kernel=kernel,
                doc=doc or (kernel.__doc__ or "").strip(),
                num_outputs=num_outputs,
                no_lowering=no_lowering,
                layer_type=layer_type,
                activation=activation,
                affine=affine,
                no_engine_form=no_engine_form,
            )
        )
        return kernel

    return wrap


def get_op(name: str) -> OpDef:
    """The declaration of IR op ``name`` (all op modules are loaded on first use)."""
    import anekit.ir.ops  # noqa: F401 - loads every declaration

    return REGISTRY.get(name)


def op_names() -> list[str]:
    import anekit.ir.ops  # noqa: F401

    return REGISTRY.names()


def infer_types(
    op: str, input_types: Sequence[TensorType | None], attrs: Mapping[str, Any] | None
) -> tuple[Mapping[str, Any], tuple[TensorType, ...]]:
    """Normalise attributes and infer output types; raises InferError with the reason."""
    opdef = get_op(op)
    opdef.check_arity(len(input_types))
    for i, t in enumerate(input_types):
        spec = opdef.inputs[min(i, len(opdef.inputs) - 1)]
        if t is None and not spec.endswith("?"):
            raise InferError(f"input '{opdef.input_name(i)}' is required")
    norm = opdef.normalize_attrs(attrs)
    outs = tuple(opdef.infer(list(input_types), norm))
    expected = opdef.output_count(norm, len(input_types))
    if len(outs) != expected:
        raise InferError(f"inference produced {len(outs)} outputs, expected {expected}")
    for t in outs:
        if any(d < 0 for d in t.shape):
            raise InferError(f"inferred a negative dimension in {t}")
    return norm, outs
