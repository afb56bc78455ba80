"""Symbolic tensors recorded by the builder API, and graph assembly from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.errors import ModelError, ShapeError
from anekit.ir.dtypes import DType, dtype_of_array, to_dtype
from anekit.ir.graph import Graph, Node, Value
from anekit.ir.registry import InferError, TensorType, infer_types
from anekit.naming import fresh_name


@dataclass(eq=False)
class _Call:
    """One recorded op application."""

    op: str
    inputs: tuple[Tensor | None, ...]
    attrs: Mapping[str, Any]
    name: str | None


class Tensor:
    """A symbolic tensor: a graph input, a constant, or an output of a recorded op.

    Arithmetic operators record ops: ``x + y``, ``x * 2.0``, ``x @ w``, ``-x``.
    """

    __slots__ = ("type", "_call", "_index", "_name", "_array", "_trainable")

    def __init__(
        self,
        type_: TensorType,
        *,
        call: _Call | None = None,
        index: int = 0,
        name: str | None = None,
        array: np.ndarray | None = None,
    ):
        self.type = type_
        self._call = call
        self._index = index
        self._name = name
        self._array = array
        self._trainable = False

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return len(self.type.shape)

    @property
    def name(self) -> str | None:
        return self._name

    def __repr__(self) -> str:
        what = (
            "input"
            if self._call is None and self._array is None
            else ("constant" if self._array is not None else self._call.op)
        )
        return f"Tensor({self._name or '?'}: {self.type}, {what})"

    # operators record ops through the functional API
    def __add__(self, other: Any) -> Tensor:
        return record("add", [self, other])

    def __radd__(self, other: Any) -> Tensor:
        return record("add", [other, self])

    def __sub__(self, other: Any) -> Tensor:
        return record("sub", [self, other])

    def __rsub__(self, other: Any) -> Tensor:
        return record("sub", [other, self])

    def __mul__(self, other: Any) -> Tensor:
        return record("mul", [self, other])

    def __rmul__(self, other: Any) -> Tensor:
        return record("mul", [other, self])

    def __truediv__(self, other: Any) -> Tensor:
        return record("div", [self, other])

    def __rtruediv__(self, other: Any) -> Tensor:
        return record("div", [other, self])

    def __matmul__(self, other: Any) -> Tensor:
        return record("matmul", [self, other])

    def __rmatmul__(self, other: Any) -> Tensor:
        return record("matmul", [other, self])

    def __neg__(self) -> Tensor:
        return record("neg", [self])

    def __pow__(self, other: Any) -> Tensor:
        return record("pow", [self, other])

    def __hash__(self) -> int:
        return id(self)


def input(name: str, shape: Sequence[int], dtype: str | DType = "fp32") -> Tensor:  # noqa: A001
    """A graph input with a static shape, e.g. ``anekit.input("x", (1, 3, 224, 224))``."""
    if not isinstance(name, str) or not name:
        raise ModelError("an input needs a non-empty name")
    shape_t = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape_t):
        raise ModelError(f"input '{name}' has a negative dimension in {list(shape_t)}")
    try:
        dt = to_dtype(dtype)
    except ValueError as exc:
        raise ModelError(f"input '{name}': {exc}") from None
    return Tensor(TensorType(shape_t, dt), name=name)


def constant(value: Any, *, name: str | None = None, dtype: str | DType | None = None) -> Tensor:
    """A constant tensor (weights, masks); float64 data is stored as fp32."""
    arr = np.asarray(value)
    if dtype is not None:
        arr = arr.astype(to_dtype(dtype).numpy)
    elif arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    elif arr.dtype.kind in "iu" and arr.dtype not in (np.int8, np.uint8, np.int32, np.int64):
        arr = arr.astype(np.int64)
    try:
        dt = dtype_of_array(arr)
    except ValueError as exc:
        raise ModelError(f"constant {name or ''}: {exc}") from None
    # a private copy: graphs mark their constants read-only, which must not touch the caller's array
    return Tensor(TensorType(arr.shape, dt), name=name, array=np.array(arr, order="C", copy=True))


def parameter(value: Any, *, name: str, dtype: str | DType | None = None) -> Tensor:
    """A trainable constant: ``graph()`` lists it in ``metadata["parameters"]`` (what
    anekit.train trains; other constants stay fixed)."""
    t = constant(value, name=name, dtype=dtype)
    if not t.dtype.is_float:
        raise ModelError(f"parameter '{name}' must be a float tensor, got {t.dtype}")
    t._trainable = True
    return t


def as_tensor(value: Any, like: Tensor | None = None) -> Tensor:
    """Tensors pass through; numbers and arrays become constants (numbers take like's dtype)."""
    if isinstance(value, Tensor):
        return value
    if like is not None and np.ndim(value) == 0 and isinstance(value, int | float | np.number):
        return constant(np.asarray(value, dtype=like.dtype.numpy))
    return constant(value)


def record(
    op: str,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
):
    """Record one op; return its output Tensor (or a tuple for multi-output ops)."""
    like = next((t for t in inputs if isinstance(t, Tensor)), None)
    ins = tuple(None if t is None else as_tensor(t, like) for t in inputs)
    try:
        norm, out_types = infer_types(op, [t.type if t is not None else None for t in ins], attrs)
    except InferError as exc:
        raise ShapeError(f"{name or op} ({op}): {exc}") from None
    call = _Call(op, ins, norm, name)
    outs = tuple(
        Tensor(t, call=call, index=i, name=name if len(out_types) == 1 else None)
        for i, t in enumerate(out_types)
    )
    return outs[0] if len(outs) == 1 else outs


def graph(
    outputs: Sequence[Tensor] | Tensor,
    *,
    inputs: Sequence[Tensor] | None = None,
    name: str = "graph",
) -> Graph:
    """Assemble the Graph computing ``outputs`` from the recorded calls.

    Inputs default to every input tensor the outputs depend on, in first-use order;
    unnamed values and nodes are named ``<op>_<k>`` deterministically.
    """
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise ModelError("graph() needs at least one output Tensor")
    order: list[_Call] = []
    seen_calls: set[int] = set()
    found_inputs: list[Tensor] = []
    consts: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:  # iterative DFS to handle deep graphs
        stack: list[tuple[Tensor, bool]] = [(t, False)]
        while stack:
            cur, expanded = stack.pop()
            call = cur._call
            if call is None:
                if id(cur) not in seen:
                    seen.add(id(cur))
                    (consts if cur._array is not None else found_inputs).append(cur)
                continue
            if id(call) in seen_calls:
                continue
            if expanded:
                seen_calls.add(id(call))
                order.append(call)
                continue
            stack.append((cur, True))
            for i in reversed(call.inputs):
                if i is not None:
                    stack.append((i, False))

    for t in outs:
        visit(t)
    graph_inputs = list(inputs) if inputs is not None else found_inputs
    missing = [t for t in found_inputs if all(t is not g for g in graph_inputs)]
    if missing:
        raise ModelError(
            f"outputs depend on input(s) not listed in inputs=: {[t.name for t in missing]}"
        )

    names: dict[int, str] = {}
    taken: set[str] = set()

    def claim(hint: str) -> str:
        name = fresh_name(hint, taken)
        taken.add(name)
        return name

    for t in graph_inputs:
        if t.name in taken:
            raise ModelError(f"two inputs are named '{t.name}'")
        names[id(t)] = claim(t.name)
    counters: dict[str, int] = {}

    def auto(prefix: str) -> str:
        name = fresh_name(prefix, taken, bare=False, start=0, counters=counters)
        taken.add(name)
        return name

    for t in consts:
        names[id(t)] = claim(t.name) if t.name else auto("const")
    values: dict[str, Value] = {}
    constants: dict[str, np.ndarray] = {}
    for t in graph_inputs:
        values[names[id(t)]] = Value(names[id(t)], t.shape, t.dtype)
    for t in consts:
        values[names[id(t)]] = Value(names[id(t)], t.shape, t.dtype)
        constants[names[id(t)]] = t._array

    out_tensors: dict[int, dict[int, Tensor]] = {}
    for t in outs:
        if t._call is not None:
            out_tensors.setdefault(id(t._call), {})[t._index] = t

    nodes: list[Node] = []
    value_of: dict[tuple[int, int], str] = {}
    for call in order:
        node_name = claim(call.name) if call.name else auto(call.op)
        opdef_outs = []
        _, types = infer_types(
            call.op, [i.type if i is not None else None for i in call.inputs], call.attrs
        )
        for k, t in enumerate(types):
            named = out_tensors.get(id(call), {}).get(k)
            if len(types) == 1:
                vname = node_name
            else:
                vname = (
                    claim(f"{node_name}_{k}") if not (named and named.name) else claim(named.name)
                )
            value_of[(id(call), k)] = vname
            values[vname] = Value(vname, t.shape, t.dtype)
            opdef_outs.append(vname)
        in_names = tuple(
            ""
            if i is None
            else (names[id(i)] if i._call is None else value_of[(id(i._call), i._index)])
            for i in call.inputs
        )
        nodes.append(
            Node(call.op, node_name, in_names, tuple(opdef_outs), call.attrs, (node_name,))
        )

    def out_name(t: Tensor) -> str:
        return names[id(t)] if t._call is None else value_of[(id(t._call), t._index)]

    trainable = tuple(names[id(t)] for t in consts if t._trainable)
    return Graph(
        inputs=[values[names[id(t)]] for t in graph_inputs],
        outputs=[values[out_name(t)] for t in outs],
        nodes=nodes,
        values=values,
        constants=constants,
        name=name,
        metadata={"parameters": trainable} if trainable else None,
    )
