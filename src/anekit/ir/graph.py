"""The IR graph: values with static shapes, nodes in topological order, constant arrays."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.errors import ModelError, ShapeError
from anekit.ir.dtypes import DType, dtype_of_array, to_dtype
from anekit.ir.registry import InferError, OpDef, TensorType, get_op, infer_types

if TYPE_CHECKING:
    from anekit.ir.edit import GraphEditor


@dataclass(frozen=True)
class Value:
    """A named tensor with a static shape and an element type."""

    name: str
    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", to_dtype(self.dtype))

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.name}: {self.type}"


@dataclass(frozen=True, eq=False)
class Node:
    """One op application. Inputs and outputs are value names ('' marks an absent optional input).

    ``attrs`` is complete (defaults filled in by the registry). ``origin`` names the nodes
    of the imported model this node implements, so reports can trace every original node
    through the passes.
    """

    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    origin: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "origin", tuple(self.origin))
        if not isinstance(self.attrs, MappingProxyType):
            object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))

    @property
    def opdef(self) -> OpDef:
        return get_op(self.op)

    @property
    def output(self) -> str:
        """The single output of a one-output node."""
        if len(self.outputs) != 1:
            raise ValueError(f"node '{self.name}' ({self.op}) has {len(self.outputs)} outputs")
        return self.outputs[0]

    def with_(self, **changes: Any) -> Node:
        return replace(self, **changes)

    def __repr__(self) -> str:
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        return f"Node({self.name}: {self.op}({', '.join(self.inputs)}) -> {', '.join(self.outputs)}; {attrs})"


class Graph:
    """An immutable dataflow graph. Passes build new graphs with `GraphEditor`.

    ``values`` holds the type of every named tensor (inputs, constants and node outputs);
    ``constants`` maps constant names to read-only numpy arrays.
    """

    def __init__(
        self,
        *,
        inputs: Sequence[Value],
        outputs: Sequence[Value | str],
        nodes: Sequence[Node],
        values: Mapping[str, Value],
        constants: Mapping[str, np.ndarray],
        name: str = "graph",
        metadata: Mapping[str, Any] | None = None,
    ):
        self.name = name
        self.values: Mapping[str, Value] = MappingProxyType(dict(values))
        self.inputs: tuple[Value, ...] = tuple(inputs)
        self.outputs: tuple[Value, ...] = tuple(
            o if isinstance(o, Value) else self.values[o] for o in outputs
        )
        self.nodes: tuple[Node, ...] = tuple(nodes)
        for arr in constants.values():
            arr.flags.writeable = False  # shared between graphs: never mutate in place
        self.constants: Mapping[str, np.ndarray] = MappingProxyType(dict(constants))
        self.metadata: Mapping[str, Any] = MappingProxyType(dict(metadata or {}))

    # --- lookups -------------------------------------------------------------------------

    def value(self, name: str) -> Value:
        try:
            return self.values[name]
        except KeyError:
            raise KeyError(f"graph '{self.name}' has no value named '{name}'") from None

    def is_constant(self, name: str) -> bool:
        return name in self.constants

    def constant(self, name: str) -> np.ndarray | None:
        return self.constants.get(name)

    @cached_property
    def _producers(self) -> Mapping[str, Node]:
        return MappingProxyType({o: n for n in self.nodes for o in n.outputs})

    @cached_property
    def _consumers(self) -> Mapping[str, tuple[Node, ...]]:
        uses: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                if i:
                    uses.setdefault(i, []).append(n)
        return MappingProxyType({k: tuple(v) for k, v in uses.items()})

    @cached_property
    def input_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.inputs)

    @cached_property
    def output_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.outputs)

    def producer(self, value_name: str) -> Node | None:
        return self._producers.get(value_name)

    def consumers(self, value_name: str) -> tuple[Node, ...]:
        return self._consumers.get(value_name, ())

    @cached_property
    def _by_name(self) -> Mapping[str, Node]:
        return MappingProxyType({n.name: n for n in self.nodes})

    def node(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"graph '{self.name}' has no node named '{name}'") from None

    # --- summaries -----------------------------------------------------------------------

    def op_histogram(self) -> dict[str, int]:
        return dict(Counter(n.op for n in self.nodes).most_common())

    def parameter_count(self) -> int:
        return int(sum(a.size for a in self.constants.values()))

    def parameter_bytes(self) -> int:
        return int(sum(a.nbytes for a in self.constants.values()))

    def __repr__(self) -> str:
        return (
            f"Graph({self.name!r}, inputs={[str(v) for v in self.inputs]}, "
            f"outputs={[str(v) for v in self.outputs]}, nodes={len(self.nodes)}, "
            f"constants={len(self.constants)})"
        )

    def pretty(self) -> str:
        """A readable listing of the graph, one node per line."""
        lines = [f"graph {self.name}("]
        lines += [f"    {v}" for v in self.inputs]
        lines.append(") {")
        for n in self.nodes:
            ins = ", ".join(
                (f"const {i}" if i in self.constants else i) if i else "_" for i in n.inputs
            )
            outs = ", ".join(str(self.values[o]) for o in n.outputs)
            attrs = "".join(f" {k}={_short(v)}" for k, v in n.attrs.items())
            lines.append(f"    {outs} = {n.op}({ins}){attrs}")
        lines.append(f"}} -> ({', '.join(self.output_names)})")
        return "\n".join(lines)

    # --- checking and running ------------------------------------------------------------

    def validate(self) -> None:
        """Check structure and re-infer every node's types; raise ModelError/ShapeError."""
        defined: set[str] = set()
        for v in self.inputs:
            if v.name in defined:
                raise ModelError(f"graph input '{v.name}' is declared twice")
            defined.add(v.name)
        for name, arr in self.constants.items():
            if name in defined:
                raise ModelError(f"constant '{name}' has the name of a graph input")
            v = self.values.get(name)
            # an fp32 constant may be held as float16 (a language model's one fp16 copy of
            # its weights: fp16 values, exact in fp32)
            half_fp32 = v is not None and v.dtype == DType.FP32 and arr.dtype == np.float16
            if v is None or v.shape != arr.shape or (v.dtype != dtype_of_array(arr) and not half_fp32):
                raise ModelError(f"constant '{name}' does not match its declared value {v}")
            defined.add(name)
        node_names: set[str] = set()
        for n in self.nodes:
            if n.name in node_names:
                raise ModelError(f"node name '{n.name}' is used twice")
            node_names.add(n.name)
            for i in n.inputs:
                if i and i not in defined:
                    raise ModelError(
                        f"node '{n.name}' ({n.op}) reads '{i}', which is not defined before it"
                    )
            types = [self.values[i].type if i else None for i in n.inputs]
            try:
                _, outs = infer_types(n.op, types, n.attrs)
            except InferError as exc:
                raise ShapeError(f"node '{n.name}' ({n.op}): {exc}") from None
            for o, t in zip(n.outputs, outs, strict=True):
                if o in defined:
                    raise ModelError(f"value '{o}' is defined twice (again by node '{n.name}')")
                declared = self.values.get(o)
                if declared is None or declared.type != t:
                    raise ShapeError(
                        f"node '{n.name}' ({n.op}): output '{o}' declared {declared and declared.type}"
                        f" but infers {t}"
                    )
                defined.add(o)
        for v in self.outputs:
            if v.name not in defined:
                raise ModelError(f"graph output '{v.name}' is never computed")

    def run(self, feeds: Mapping[str, Any], **options: Any) -> dict[str, np.ndarray]:
        """Run on the fp32 reference backend; returns the outputs keyed by name, in graph order."""
        from anekit.ir.interpret import run_graph

        return run_graph(self, feeds, **options)

    def __call__(self, **feeds: Any) -> dict[str, np.ndarray]:
        return self.run(feeds)

    # --- derivation ----------------------------------------------------------------------

    def edit(self) -> GraphEditor:
        from anekit.ir.edit import GraphEditor

        return GraphEditor(self)

    def replace(self, **changes: Any) -> Graph:
        fields = {
            "inputs": self.inputs,
            "outputs": self.outputs,
            "nodes": self.nodes,
            "values": self.values,
            "constants": self.constants,
            "name": self.name,
            "metadata": self.metadata,
        }
        fields.update(changes)
        return Graph(**fields)


def _short(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, tuple) and len(v) > 8:
        return f"({', '.join(map(str, v[:8]))}, ...)"
    return repr(v) if isinstance(v, str) else str(v)
