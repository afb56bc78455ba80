"""The pattern-rewrite helper: a GraphEditor with a use index, and rule sweeps to a fixed point.

A rule is a function ``rule(rw, node) -> bool`` registered for one or more ops; it inspects
the node and its neighbourhood through the `Rewriter` (producers, consumers, constants)
and, when it matches, rewrites through it and returns True. `apply_rules` sweeps the
graph in order, trying each node's rules, until a sweep changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.errors import ShapeError
from anekit.ir.dtypes import dtype_of_array
from anekit.ir.graph import Graph, Node, Value
from anekit.passes.context import PassContext


class Rewriter:
    """A working copy of a graph with O(1) producer/consumer lookups.

    Every change goes through the underlying `GraphEditor`; this class keeps the index of
    readers per value up to date and erases nodes that become dead, so that "has exactly
    one reader" is always true of the current graph.
    """

    def __init__(self, graph: Graph, ctx: PassContext):
        self.ctx = ctx
        self.ed = graph.edit()
        self._users: dict[str, dict[str, None]] = {}
        for n in graph.nodes:
            self._index(n)

    # --- queries ------------------------------------------------------------------------

    def has(self, name: str) -> bool:
        return self.ed.has_node(name)

    def node(self, name: str) -> Node:
        return self.ed.node(name)

    def value(self, name: str) -> Value:
        return self.ed.values[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return self.ed.values[name].shape

    def const(self, name: str | None) -> np.ndarray | None:
        return self.ed.constants.get(name) if name else None

    def is_const(self, name: str | None) -> bool:
        return bool(name) and name in self.ed.constants

    def producer(self, value: str | None) -> Node | None:
        return self.ed.producer(value) if value else None

    def users(self, value: str) -> list[Node]:
        return [self.ed.node(n) for n in self._users.get(value, ())]

    def is_output(self, value: str) -> bool:
        return value in self.ed.output_names

    def single_use(self, value: str) -> bool:
        """Read by exactly one node and not a graph output."""
        return len(self._users.get(value, ())) == 1 and not self.is_output(value)

    def sole_user(self, value: str) -> Node | None:
        return self.users(value)[0] if self.single_use(value) else None

    def order(self) -> list[str]:
        return [n.name for n in self.ed.nodes]

    # --- changes ------------------------------------------------------------------------

    def add(
        self,
        op: str,
        inputs: Sequence[str | None],
        attrs: Mapping[str, Any] | None = None,
        *,
        hint: str,
        origin: Iterable[str] = (),
        before: Node | str | None = None,
    ) -> str:
        """Add a one-output node and return its output name."""
        return self.add_multi(op, inputs, attrs, hint=hint, origin=origin, before=before)[0]

    def add_multi(
        self,
        op: str,
        inputs: Sequence[str | None],
        attrs: Mapping[str, Any] | None = None,
        *,
        hint: str,
        origin: Iterable[str] = (),
        before: Node | str | None = None,
    ) -> tuple[str, ...]:
        if before is not None and not self.has(before if isinstance(before, str) else before.name):
            before = None
        outs = self.ed.add(
            op, inputs, attrs, name=hint, origin=tuple(dict.fromkeys(origin)), before=before
        )
        self._index(self.ed.producer(outs[0]))
        return outs

    def constant(self, array: np.ndarray, hint: str) -> str:
        """Add a constant without copying: transposed or sliced weights stay numpy views
        (whoever serialises them pays for the layout once; compiling a 124M-parameter
        model must not copy every weight)."""
        array = np.asarray(array)
        name = self.ed.fresh(hint)
        self.ed.values[name] = Value(name, array.shape, dtype_of_array(array))
        self.ed.constants[name] = array
        return name

    def put(self, node: Node) -> None:
        """Replace the node of the same name in place (its position is kept)."""
        self._unindex(self.ed.node(node.name))
        self.ed.set_node(node)
        self._index(node)

    def insert(self, node: Node, before: Node | str | None = None) -> None:
        """Add a fully formed node whose outputs are already declared values."""
        self.ed.add_node(node, before=before)
        self._index(node)

    def replace_uses(self, old: str, new: str) -> None:
        """Every reader of ``old`` (and the graph outputs) reads ``new``; erase dead producers."""
        if old == new:
            return
        ov, nv = self.ed.values[old], self.ed.values[new]
        if ov.shape != nv.shape or ov.dtype != nv.dtype:
            raise ShapeError(f"cannot replace '{old}' ({ov.type}) by '{new}' ({nv.type})")
        for name in list(self._users.get(old, ())):
            n = self.ed.node(name)
            self.put(n.with_(inputs=tuple(new if i == old else i for i in n.inputs)))
        self.ed.output_names = [new if o == old else o for o in self.ed.output_names]
        self.erase_if_dead(self.producer(old))

    def remove(self, node: Node) -> None:
        """Remove a node (its outputs must be unread) and erase producers that become dead."""
        node = self.ed.node(node.name)
        self._unindex(node)
        self.ed.remove(node)
        for i in dict.fromkeys(node.inputs):
            self.erase_if_dead(self.producer(i))

    def detach(self, node: Node) -> None:
        """Remove a node without erasing its producers (they are being reused)."""
        node = self.ed.node(node.name)
        self._unindex(node)
        self.ed.remove(node)

    def erase_if_dead(self, node: Node | None) -> None:
        if node is None or not self.has(node.name):
            return
        if any(self._users.get(o) or self.is_output(o) for o in node.outputs):
            return
        self.remove(node)

    def build(self) -> Graph:
        return self.ed.build()

    # --- the use index --------------------------------------------------------------------

    def _index(self, node: Node) -> None:
        for i in node.inputs:
            if i:
                self._users.setdefault(i, {})[node.name] = None

    def _unindex(self, node: Node) -> None:
        for i in node.inputs:
            users = self._users.get(i)
            if users is not None:
                users.pop(node.name, None)


# --- rules --------------------------------------------------------------------------------

RuleFn = Callable[[Rewriter, Node], bool]


@dataclass(frozen=True)
class Rule:
    """A named rewrite tried on nodes of the listed ops ('*' for every node)."""

    name: str
    ops: tuple[str, ...]
    fn: RuleFn


def rule(*ops: str, name: str | None = None) -> Callable[[RuleFn], Rule]:
    """Decorator turning ``fn(rw, node) -> bool`` into a Rule for ``ops``."""

    def wrap(fn: RuleFn) -> Rule:
        return Rule(name or fn.__name__.lstrip("_"), tuple(ops), fn)

    return wrap


def index_rules(rules: Iterable[Rule]) -> dict[str, tuple[Rule, ...]]:
    table: dict[str, list[Rule]] = {}
    for r in rules:
        for op in r.ops:
            table.setdefault(op, []).append(r)
    return {k: tuple(v) for k, v in table.items()}


def sweep(rw: Rewriter, table: Mapping[str, Sequence[Rule]]) -> int:
    """One pass over the nodes in order, each node's first matching rule applied; returns count."""
    changed = 0
    generic = table.get("*", ())
    for name in rw.order():
        if not rw.has(name):
            continue
        node = rw.node(name)
        for r in (*table.get(node.op, ()), *generic):
            if r.fn(rw, node):
                rw.ctx.count(r.name)
                changed += 1
                break
    return changed


def apply_rules(
    graph: Graph, ctx: PassContext, rules: Iterable[Rule], *, max_sweeps: int | None = None
) -> Graph:
    """Sweep until nothing changes (or ``max_sweeps``); return the rebuilt graph."""
    table = index_rules(rules)
    rw = Rewriter(graph, ctx)
    limit = max_sweeps if max_sweeps is not None else ctx.options.max_sweeps
    for i in range(limit):
        if not sweep(rw, table):
            break
        if i == limit - 1:
            ctx.note(f"stopped after {limit} sweeps with rules still firing")
    return rw.build()


# --- declarative matching ------------------------------------------------------------------

Predicate = Callable[[Rewriter, Node], bool]


@dataclass(frozen=True)
class Pattern:
    """A node to match: its op(s), a predicate, patterns for the producers of its inputs
    (None: anything, a constant included), and whether its output must have one reader.

    ``match(rw, node)`` returns the matched nodes, the node itself first, then each
    input's match in order; None when it does not match.
    """

    ops: tuple[str, ...]
    where: Predicate | None = None
    inputs: tuple[Pattern | None, ...] = ()
    single_use: bool = False

    def match(self, rw: Rewriter, node: Node | None) -> list[Node] | None:
        if node is None or node.op not in self.ops:
            return None
        if self.single_use and not rw.single_use(node.output):
            return None
        if self.where is not None and not self.where(rw, node):
            return None
        found = [node]
        for name, sub in zip(node.inputs, self.inputs, strict=False):
            if sub is None:
                continue
            inner = sub.match(rw, rw.producer(name))
            if inner is None:
                return None
            found += inner
        return found


def op(*ops: str, where: Predicate | None = None, inputs=(), single_use: bool = False) -> Pattern:
    """Shorthand: ``op("mul", inputs=(None, op("sigmoid", single_use=True)))``."""
    return Pattern(tuple(ops), where, tuple(inputs), single_use)


# --- small matchers shared by the passes --------------------------------------------------


def live_and_const(rw: Rewriter, node: Node) -> tuple[str, np.ndarray, int] | None:
    """For a binary node with one live and one constant input: (live, constant, const index)."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    ca, cb = rw.const(a), rw.const(b)
    if ca is None and cb is not None and a:
        return a, cb, 1
    if cb is None and ca is not None and b:
        return b, ca, 0
    return None


def scalar_value(array: np.ndarray | None) -> float | None:
    """The single value of a constant whose elements are all equal (None otherwise)."""
    if array is None or array.size == 0 or array.dtype.kind not in "fiu":
        return None
    flat = array.reshape(-1)
    first = flat[0]
    if array.size > 1 and not np.all(flat == first):
        return None
    return float(first)


def is_close(value: float | None, target: float, rtol: float = 1e-5) -> bool:
    return value is not None and bool(np.isclose(value, target, rtol=rtol, atol=0.0))
