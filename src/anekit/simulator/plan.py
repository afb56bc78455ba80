"""Load time: a MIL function checked against the op definitions and compiled into a list of steps.

Everything that can be decided before running is decided here, once: unsupported ops (all of
them listed at once), unknown or missing inputs, inputs that must be constants, type domains,
the dtypes each op produces against the ones the program declares, constants decoded (weights
read from the weight file, fp16 widened to float32), ops whose inputs are all known evaluated
(constexpr dequantization, shape arithmetic), and when each value dies. A :class:`Step` then
holds the kernel, its known arguments, the slots of its runtime arguments and what to check
and round on its outputs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit import budget
from anekit.errors import FormatError
from anekit.float16 import share
from anekit.formats.mil import (
    ArgList,
    Binding,
    Function,
    MilTensorType,
    Operation,
    ScalarType,
    Var,
)

from .execute import NO_SLOT, Expect, Source, Step, apply, op_error, storage_shape
from .fp16 import widen_fp16
from .fusion import fuse_elementwise
from .movement import fuse_concat_transpose, static_views
from .ops import REGISTRY
from .ops._util import as_str
from .prepared import prepare_steps
from .registry import Signature, SimOp
from .values import STORAGE, BlobFiles, decode_value, frozen, literal_dtype

_OPSET = re.compile(r"ios(\d+)\Z")


@dataclass(frozen=True)
class Plan:
    """A compiled function: input slots, steps, and where each output comes from."""

    inputs: tuple[Binding, ...]
    input_slots: tuple[int, ...]
    steps: tuple[Step, ...]
    outputs: tuple[tuple[str, int, Any], ...]  # (name, slot or -1, known value)
    output_types: Mapping[str, Any]
    slot_count: int
    peak_bytes: int = 0  # the most bytes of (static) runtime values alive at once


def opset_number(opset: str | None) -> int:
    """``ios18`` -> 18; programs without an opset are treated as the newest (18)."""
    match = _OPSET.match(opset or "")
    return int(match.group(1)) if match else 18


def unsupported_ops(function: Function) -> Counter[str]:
    """Ops of ``function`` the simulator has no kernel for, with their counts."""
    return Counter(o.op for o in function.operations if o.op != "const" and o.op not in REGISTRY)


class _Loader:
    def __init__(self, function: Function, blobs: BlobFiles, source: Source):
        self.function = function
        self.blobs = blobs
        self.source = source
        self.opset = opset_number(function.opset)
        self.types: dict[str, Any] = {}  # name -> MIL type
        self.known: dict[str, Any] = {}  # name -> value known at load
        self.slots: dict[str, int] = {}  # name -> runtime slot
        self.next_slot = 0

    def error(self, index: int, operation: Operation, message: str, hint: str | None = None):
        return op_error(self.source, index, f"{operation.op} '{operation.name}': {message}", hint)

    def slot(self, name: str) -> int:
        self.slots[name] = self.next_slot
        self.next_slot += 1
        return self.slots[name]

    def load(self) -> Plan:
        f = self.function
        missing = unsupported_ops(f)
        if missing:
            listed = ", ".join(f"{name} ({n})" for name, n in sorted(missing.items()))
            raise FormatError(
                f"function '{f.name}' uses {sum(missing.values())} operation(s) the simulator "
                f"does not support: {listed}",
                where=self.source.where,
                hint="supported ops: anekit.simulator.supported_ops()",
            )
        input_slots = []
        for b in f.inputs:
            if not isinstance(b.type, (ScalarType, MilTensorType)):
                raise FormatError(
                    f"function '{f.name}' input {b.name} has the type {b.type}, which the "
                    "simulator does not support (tensors and scalars only)",
                    where=self.source.where,
                )
            self.types[b.name] = b.type
            input_slots.append(self.slot(b.name))
        steps = [s for i, o in enumerate(f.operations) if (s := self.operation(i, o)) is not None]
        outputs = []
        for name in f.outputs:
            if name in self.known:
                outputs.append((name, NO_SLOT, _widened(self.known[name])))
            else:
                outputs.append((name, self.slots[name], None))
        keep = [s for _, s, _ in outputs]
        shapes = {e.slot: e.shape for step in steps for e in step.outputs}
        for b, slot in zip(f.inputs, input_slots, strict=True):
            pattern = storage_shape(b.type)[0]
            shapes[slot] = pattern if all(isinstance(d, int) for d in pattern) else None  # type: ignore[assignment]
        steps = fuse_concat_transpose(steps, keep, shapes)
        storages = {e.slot: e.storage for step in steps for e in step.outputs}
        storages.update((slot, STORAGE.get(storage_shape(b.type)[1]))
                        for b, slot in zip(f.inputs, input_slots, strict=True))  # fmt: skip
        steps = fuse_elementwise(steps, keep, shapes, storages)
        steps = prepare_steps(static_views(steps, shapes), shapes)
        steps = _with_frees(steps, tuple(input_slots), keep)
        inputs = {slot: (shapes.get(slot), STORAGE.get(storage_shape(b.type)[1]))
                  for b, slot in zip(f.inputs, input_slots, strict=True)}  # fmt: skip
        peak, at = _peak_bytes(steps, inputs)
        budget.check(peak, f"function '{f.name}' (its live values at {at})",
                     where=self.source.where)  # fmt: skip
        return Plan(
            tuple(f.inputs),
            tuple(input_slots),
            tuple(steps),
            tuple(outputs),
            {name: self.types[name] for name in f.outputs},
            self.next_slot,
            peak,
        )

    # --- one operation --------------------------------------------------------------------

    def operation(self, index: int, o: Operation) -> Step | None:
        for b in o.outputs:
            self.types[b.name] = b.type
        if o.op == "const":
            self.const(index, o)
            return None
        d = REGISTRY[o.op]
        given = dict(o.inputs)
        unknown = [k for k in given if k not in d.params_by_name]
        if unknown:
            raise self.error(
                index,
                o,
                f"unknown input(s) {', '.join(unknown)}",
                hint="inputs: " + ", ".join(p.name for p in d.params),
            )
        absent = [p.name for p in d.params if not p.optional and p.name not in given]
        if absent:
            raise self.error(index, o, f"missing required input(s) {', '.join(absent)}")
        dtypes: dict[str, str] = {}
        domains: dict[str, str] = {}
        known: dict[str, Any] = {}
        dynamic: list[tuple[str, int]] = []
        variadic: list[tuple[str, tuple[tuple[int, Any], ...]]] = []
        for p in d.params:
            if p.name not in given:
                continue
            arg = given[p.name]
            if p.variadic:
                if not isinstance(arg, ArgList):
                    arg = ArgList((arg,))
                items = [self.argument(index, o, p.name, item) for item in arg.items]
                item_dtypes = {dt for dt, _, _ in items}
                if len(item_dtypes) > 1:
                    raise self.error(
                        index, o, f"the items of {p.name} have different types {item_dtypes}"
                    )
                dtype = item_dtypes.pop() if item_dtypes else "fp32"
                if all(s == NO_SLOT for _, s, _ in items):
                    known[p.name] = tuple(v for _, _, v in items)
                else:
                    variadic.append((p.name, tuple((s, v) for _, s, v in items)))
            else:
                if isinstance(arg, ArgList):
                    raise self.error(index, o, f"input {p.name} takes one value, not a list")
                dtype, slot, value = self.argument(index, o, p.name, arg)
                if slot == NO_SLOT:
                    known[p.name] = value
                else:
                    dynamic.append((p.name, slot))
            if p.const and p.name not in known:
                raise self.error(
                    index, o, f"input {p.name} must be a constant known when the program loads"
                )
            self.check_domain(index, o, d, p.name, dtype, domains)
            dtypes[p.name] = dtype
        for name, value in known.items():
            if isinstance(value, tuple):
                known[name] = tuple(_widened(v) for v in value)
            elif not _reads_half(o.op, name, value, known):
                known[name] = _widened(value)
        consts = dict(known)
        if d.defaults is not None:
            for k, v in d.defaults(dtypes, self.opset).items():
                if k not in given:
                    consts[k] = known[k] = v
        signature = Signature(dtypes, domains, consts)
        if d.check is not None:
            try:
                d.check(signature, self.opset)
            except ValueError as exc:
                raise self.error(index, o, str(exc)) from None
        outputs = self.outputs(index, o, d, signature)
        step = Step(index, o.op, o.name, d.kernel, known, tuple(dynamic), tuple(variadic), outputs)
        if not dynamic and not variadic:
            self.fold(step)
            return None
        return step

    def const(self, index: int, o: Operation) -> None:
        if len(o.outputs) != 1:
            raise self.error(index, o, "a const has exactly one output")
        value = o.attribute("val")
        if value is None:
            raise self.error(index, o, "const without a val attribute")
        declared = o.outputs[0].type
        if value.type != declared and not _same_scalar_type(value.type, declared):
            raise self.error(index, o, f"declared {declared} but its value is {value.type}")
        try:
            self.known[o.outputs[0].name] = decode_value(value, self.blobs)
        except FormatError as exc:
            raise self.error(index, o, _detail(exc), exc.hint) from None

    def argument(self, index: int, o: Operation, key: str, arg: Any) -> tuple[str, int, Any]:
        """(dtype, slot or NO_SLOT, known value) of one argument."""
        if isinstance(arg, Var):
            t = self.types[arg.name]
            if not isinstance(t, (ScalarType, MilTensorType)):
                raise self.error(index, o, f"input {key} has the unsupported type {t}")
            if arg.name in self.known:
                return t.dtype, NO_SLOT, self.known[arg.name]
            return t.dtype, self.slots[arg.name], None
        try:
            return literal_dtype(arg), NO_SLOT, decode_value(arg, self.blobs)
        except FormatError as exc:
            raise self.error(index, o, f"input {key}: {_detail(exc)}", exc.hint) from None

    def check_domain(
        self, index: int, o: Operation, d: SimOp, name: str, dtype: str, domains: dict
    ) -> None:
        p = d.params_by_name[name]
        allowed = d.allowed(p)
        if dtype not in allowed:
            raise self.error(
                index, o, f"input {name} is {dtype}; it must be one of {', '.join(sorted(allowed))}"
            )
        if p.types in d.domains:
            bound = domains.setdefault(p.types, dtype)
            if bound != dtype:
                others = [q.name for q in d.params if q.types == p.types and q.name != name]
                raise self.error(
                    index,
                    o,
                    f"input {name} is {dtype} but {'/'.join(others)} is {bound}; they must "
                    "have the same type",
                )

    def outputs(self, index: int, o: Operation, d: SimOp, sig: Signature) -> tuple[Expect, ...]:
        try:
            produced = d.outputs(sig)
        except (KeyError, ValueError) as exc:
            raise self.error(index, o, f"cannot type the outputs: {exc}") from None
        if d.variadic_outputs:
            produced = produced * len(o.outputs)
        if len(produced) != len(o.outputs):
            raise self.error(
                index,
                o,
                f"produces {len(produced)} output(s), the program declares {len(o.outputs)}",
            )
        expects = []
        for b, dtype in zip(o.outputs, produced, strict=True):
            pattern, declared = storage_shape(b.type)
            if declared != dtype:
                raise self.error(
                    index, o, f"output {b.name} is {dtype}, the program declares {b.type}"
                )
            static = all(isinstance(x, int) for x in pattern)
            expects.append(
                Expect(
                    slot=self.slot(b.name),
                    name=b.name,
                    dtype=dtype,
                    storage=STORAGE.get(dtype, np.dtype(object)),
                    shape=pattern if static else None,  # type: ignore[arg-type]
                    pattern=pattern,
                    round=dtype == "fp16" and not d.exact,
                )
            )
        return tuple(expects)

    def fold(self, step: Step) -> None:
        """Run an op whose inputs are all known now, and keep its outputs as constants."""
        half = step.known.get("x")
        if step.op == "cast" and _is_half(half) and as_str(step.known.get("dtype")) in ("fp16", "fp32"):
            # an fp16 weight cast to fp32 (a lookup table the CPU segment reads in fp32)
            # holds the same values: kept as the one fp16 copy, widened where read
            self.known[step.outputs[0].name] = half
            del self.slots[step.outputs[0].name]
            return
        given = {k: _widened(v) for k, v in step.known.items()}
        results = apply(step, given, {}, self.source)
        for e, value in zip(step.outputs, results, strict=True):
            del self.slots[e.name]
            # a folded constant (an fp16 gather table widened by a cast) equal to another
            # program's, or to the model's own weights, is kept once (float16.share)
            if isinstance(value, np.ndarray) and value.flags.c_contiguous:
                value = share(frozen(value))
            self.known[e.name] = value


# (op, input) pairs whose kernels read a weight held as fp16 as it is (`ops.conv`'s pointwise
# product through `gemm.matmul_half`, `ops.gather`'s rows): a language model's projections and
# embedding stay one fp16 copy. Every other consumer gets the weight widened to float32.
# A constant fp16 -> fp32 cast of one is folded to the fp16 value itself (`_Loader.fold`).
HALF_CONSUMERS = frozenset({("conv", "weight"), ("gather", "x"), ("cast", "x")})


def _is_half(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == np.float16


def _reads_half(op_name: str, name: str, value: Any, known: Mapping[str, Any]) -> bool:
    """True when ``value`` (fp16) may reach this op's kernel as fp16: a pointwise conv's
    weight (1x1 kernel, one group, stride 1, no padding) or a gather's table."""
    if not _is_half(value) or (op_name, name) not in HALF_CONSUMERS:
        return False
    if op_name == "conv":
        flat = ("strides", "dilations")
        return (value.ndim >= 3 and all(d == 1 for d in value.shape[2:])
                and int(np.asarray(known.get("groups", 1))) == 1
                and all(np.all(np.asarray(known.get(k, 1)) == 1) for k in flat)
                and ("pad" not in known or not np.any(np.asarray(known["pad"]))))  # fmt: skip
    return True


def _widened(value: Any) -> Any:
    """A value held as fp16 in the simulator's storage (float32 holding fp16 values), one
    copy per process (float16.share); anything else as it is."""
    return share(frozen(widen_fp16(value))) if _is_half(value) else value


def _detail(exc: FormatError) -> str:
    """A nested error's message with its own location (the weight file and offset)."""
    return f"{exc.where}: {exc.message}" if exc.where else exc.message


def _same_scalar_type(a: Any, b: Any) -> bool:
    """``fp16`` and ``tensor<fp16, []>`` name the same type."""
    return storage_shape(a) == storage_shape(b) if not isinstance(a, type(b)) else False


def _with_frees(steps: Sequence[Step], inputs: tuple[int, ...], keep: Sequence[int]) -> list[Step]:
    """Steps annotated with the slots that die after them (outputs are never freed)."""
    last: dict[int, int] = {s: -1 for s in inputs}
    for i, step in enumerate(steps):
        for _, slot in step.dynamic:
            last[slot] = i
        for _, items in step.variadic:
            for slot, _ in items:
                if slot != NO_SLOT:
                    last[slot] = i
        for e in step.outputs:
            last.setdefault(e.slot, i)  # produced but never read: free at once
    kept = set(keep)
    frees: dict[int, list[int]] = {}
    for slot, i in last.items():
        if slot not in kept and i >= 0:
            frees.setdefault(i, []).append(slot)
    out = []
    for i, step in enumerate(steps):
        if i in frees:
            step = Step(**{**step.__dict__, "frees": tuple(sorted(frees[i]))})
        out.append(step)
    return out


def _bytes_of(shape: Sequence[int] | None, storage: np.dtype | None) -> int:
    if shape is None or storage is None:
        return 0  # a symbolic shape: checked when the kernel's result is (see checked_shape)
    count = 1
    for d in shape:
        count *= int(d)
    return count * storage.itemsize


def _peak_bytes(steps: Sequence[Step], inputs: Mapping[int, tuple[Any, Any]]) -> tuple[int, str]:
    """The most bytes of runtime values alive at once over ``steps`` (static shapes), and
    the op where it happens: the whole run's allocation, not one op's."""
    size = {slot: _bytes_of(shape, storage) for slot, (shape, storage) in inputs.items()}
    live = peak = sum(size.values())
    at = "the inputs"
    for step in steps:
        for e in step.outputs:
            size[e.slot] = _bytes_of(e.shape, e.storage)
            live += size[e.slot]
        if live > peak:
            peak, at = live, f"op {step.index} ({step.op} '{step.name}')"
        live -= sum(size.pop(slot, 0) for slot in step.frees)
    return peak, at


def load_plan(function: Function, blobs: BlobFiles, source: Source) -> Plan:
    """Check and compile ``function`` (FormatError naming the op and its line on problems)."""
    return _Loader(function, blobs, source).load()
