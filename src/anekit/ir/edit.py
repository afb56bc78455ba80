"""GraphEditor: the one way to derive a new graph (add, replace, remove, then build)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from anekit.errors import ModelError, ShapeError
from anekit.ir.dtypes import dtype_of_array
from anekit.ir.graph import Graph, Node, Value
from anekit.ir.registry import InferError, infer_types
from anekit.naming import fresh_name

# The head and tail of the node order's linked list (never a node name: names are not empty).
_ENDS = ""


class GraphEditor:
    """A mutable working copy of a Graph. Nothing changes the source graph.

    Typical use in a pass::

        ed = graph.edit()
        (y,) = ed.add("relu", [x], origin=node.origin)
        ed.replace_uses(node.output, y)
        ed.remove(node)
        return ed.build()

    ``build()`` restores topological order (stable: new nodes land where their inputs
    allow, as close to their insertion point as possible), removes dead nodes and unused
    constants, and keeps graph output names unchanged.
    """

    def __init__(self, graph: Graph):
        self.name = graph.name
        self.metadata = dict(graph.metadata)
        self.inputs: list[Value] = list(graph.inputs)
        self.output_names: list[str] = list(graph.output_names)
        self._original_outputs = list(graph.output_names)
        self.values: dict[str, Value] = dict(graph.values)
        self.constants: dict[str, np.ndarray] = dict(graph.constants)
        # The nodes' order is a doubly linked list (a node inserted before an anchor goes
        # right ahead of it, in O(1)); build() orders ready nodes by their place in it.
        self._nodes: dict[str, Node] = {}
        self._next: dict[str, str] = {_ENDS: _ENDS}
        self._prev: dict[str, str] = {_ENDS: _ENDS}
        self._producer: dict[str, str] = {}
        for n in graph.nodes:
            self._nodes[n.name] = n
            self._link(n.name, _ENDS)
            self._producer.update((o, n.name) for o in n.outputs)
        self._taken: set[str] = set(self.values) | set(self._nodes)
        self._next_suffix: dict[str, int] = {}

    # --- names ---------------------------------------------------------------------------

    def fresh(self, hint: str) -> str:
        """A name not yet used by any value or node, derived from ``hint``."""
        # many names share a hint: the counters keep each search from rescanning them
        name = fresh_name(hint or "v", self._taken, counters=self._next_suffix)
        self._taken.add(name)
        return name

    # --- queries -------------------------------------------------------------------------

    @property
    def nodes(self) -> list[Node]:
        return [self._nodes[name] for name in self._order()]

    def _order(self) -> list[str]:
        """Node names in list order."""
        names, name = [], self._next[_ENDS]
        while name != _ENDS:
            names.append(name)
            name = self._next[name]
        return names

    def _link(self, name: str, before: str) -> None:
        """Put ``name`` right ahead of ``before`` (``_ENDS``: at the end)."""
        prev = self._prev[before]
        self._next[prev], self._prev[name] = name, prev
        self._next[name], self._prev[before] = before, name

    def node(self, name: str) -> Node:
        return self._nodes[name]

    def has_node(self, name: str) -> bool:
        return name in self._nodes

    def value(self, name: str) -> Value:
        return self.values[name]

    def constant(self, name: str) -> np.ndarray | None:
        return self.constants.get(name)

    def producer(self, value_name: str) -> Node | None:
        name = self._producer.get(value_name)
        return self._nodes[name] if name is not None else None

    def consumers(self, value_name: str) -> list[Node]:
        return [n for n in self.nodes if value_name in n.inputs]

    # --- changes -------------------------------------------------------------------------

    def add_constant(self, array: np.ndarray, hint: str = "const") -> str:
        array = np.asarray(array)
        if not array.flags.c_contiguous:
            array = np.asarray(array, order="C")
        name = self.fresh(hint)
        self.values[name] = Value(name, array.shape, dtype_of_array(array))
        self.constants[name] = array
        return name

    def add(
        self,
        op: str,
        inputs: Sequence[str | None],
        attrs: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        outputs: Sequence[str] | None = None,
        origin: Sequence[str] = (),
        before: Node | str | None = None,
    ) -> tuple[str, ...]:
        """Add a node; infer its output types; return its output names.

        ``outputs`` gives explicit output names (they must be free); by default fresh names
        derived from the node name are used. ``before`` places the node just ahead of an
        existing node in the order (the default is the end; build() re-sorts anyway).
        """
        ins = tuple(i or "" for i in inputs)
        types = []
        for i in ins:
            if i and i not in self.values:
                raise ModelError(f"adding {op}: input '{i}' is not a value of the graph")
            types.append(self.values[i].type if i else None)
        node_name = self.fresh(name or op)
        try:
            norm, out_types = infer_types(op, types, attrs)
        except InferError as exc:
            raise ShapeError(f"node '{node_name}' ({op}): {exc}") from None
        if outputs is None:
            if len(out_types) == 1:
                out_names = [self.fresh(node_name)] if node_name in self.values else [node_name]
                self._taken.add(out_names[0])
            else:
                out_names = [self.fresh(f"{node_name}_{k}") for k in range(len(out_types))]
        else:
            out_names = list(outputs)
            if len(out_names) != len(out_types):
                raise ModelError(f"node '{node_name}' ({op}) has {len(out_types)} outputs")
            for o in out_names:
                if o in self.values:
                    raise ModelError(f"value name '{o}' is already used")
                self._taken.add(o)
        for o, t in zip(out_names, out_types, strict=True):
            self.values[o] = Value(o, t.shape, t.dtype)
        node = Node(op, node_name, ins, tuple(out_names), norm, tuple(origin))
        self._insert(node, before)
        return tuple(out_names)

    def add_node(self, node: Node, *, before: Node | str | None = None) -> Node:
        """Insert a fully formed node (its output values must already be declared)."""
        if node.name in self._nodes:
            raise ModelError(f"node name '{node.name}' is already used")
        for o in node.outputs:
            if o not in self.values:
                raise ModelError(f"node '{node.name}': output '{o}' has no declared value")
        self._taken.add(node.name)
        self._insert(node, before)
        return node

    def set_node(self, node: Node) -> None:
        """Replace the node of the same name (same position), e.g. after changing attrs."""
        old = self._nodes[node.name]
        for o in old.outputs:
            self._producer.pop(o, None)
        self._producer.update((o, node.name) for o in node.outputs)
        self._nodes[node.name] = node

    def declare_value(self, name: str, shape: Sequence[int], dtype: Any) -> str:
        if name in self.values:
            raise ModelError(f"value name '{name}' is already used")
        self._taken.add(name)
        self.values[name] = Value(name, tuple(shape), dtype)
        return name

    def name_outputs(self, names: Sequence[str]) -> None:
        """Give the graph outputs these names at build() (the default keeps the source's names)."""
        if len(names) != len(self.output_names):
            raise ModelError(f"{len(names)} names for {len(self.output_names)} outputs")
        self._original_outputs = list(names)

    def remove(self, node: Node | str) -> None:
        name = node if isinstance(node, str) else node.name
        for o in self._nodes.pop(name).outputs:
            if self._producer.get(o) == name:
                del self._producer[o]
        prev, after = self._prev.pop(name), self._next.pop(name)
        self._next[prev], self._prev[after] = after, prev

    def replace_uses(self, old: str, new: str) -> None:
        """Make every reader of ``old`` (and the graph outputs) read ``new`` instead."""
        if old == new:
            return
        ov, nv = self.values[old], self.values[new]
        if ov.shape != nv.shape or ov.dtype != nv.dtype:
            raise ShapeError(f"cannot replace '{old}' ({ov.type}) by '{new}' ({nv.type})")
        for n in list(self._nodes.values()):
            if old in n.inputs:
                self._nodes[n.name] = n.with_(
                    inputs=tuple(new if i == old else i for i in n.inputs)
                )
        self.output_names = [new if o == old else o for o in self.output_names]

    def _insert(self, node: Node, before: Node | str | None) -> None:
        anchor = _ENDS if before is None else before if isinstance(before, str) else before.name
        if anchor not in self._prev:
            raise KeyError(f"cannot insert before '{anchor}': no such node")
        self._nodes[node.name] = node
        self._link(node.name, anchor)
        self._producer.update((o, node.name) for o in node.outputs)

    # --- build ---------------------------------------------------------------------------

    def build(self, *, dce: bool = True) -> Graph:
        """A new, valid-ordered Graph with the original output names kept."""
        order = self._toposort()
        if dce:
            live = {n.name for n in _live_nodes(order, set(self.output_names))}
            for name in [n for n in self._nodes if n not in live]:
                self.remove(name)
            # dead nodes never delay live ones in Kahn's order: the live order is unchanged
            order = [n for n in order if n.name in live]
        if self._restore_output_names():
            order = self._toposort()
        nodes = order
        used = {i for n in nodes for i in n.inputs if i} | set(self.output_names)
        constants = {k: v for k, v in self.constants.items() if k in used}
        keep = used | {o for n in nodes for o in n.outputs} | {v.name for v in self.inputs}
        values = {k: v for k, v in self.values.items() if k in keep}
        return Graph(
            inputs=self.inputs,
            outputs=[values[o] for o in self.output_names],
            nodes=nodes,
            values=values,
            constants=constants,
            name=self.name,
            metadata=self.metadata,
        )

    def _restore_output_names(self) -> bool:
        """Outputs are keyed by name for users: keep the original names after rewrites.
        True when a node was added or changed."""
        reserved = {v.name for v in self.inputs} | set(self.constants)
        changed = False
        for pos, (orig, cur) in enumerate(
            zip(self._original_outputs, self.output_names, strict=True)
        ):
            if orig == cur or orig in reserved:
                continue  # unchanged, or the name now belongs to an input/constant
            holder = self.producer(orig)
            if holder is not None:
                # a live intermediate still has the old name: give it a new one
                self._rename_value(orig, self.fresh(f"{orig}_pre"))
            elif orig in self.values:
                del self.values[orig]
            cur_producer = self.producer(cur)
            shared = self.output_names.count(cur) > 1 or cur in reserved or cur_producer is None
            if shared or any(cur in n.inputs for n in self._nodes.values()):
                self.add("identity", [cur], outputs=[orig], name=self.fresh(f"{orig}_out"))
            else:
                self._rename_value(cur, orig)
            self.output_names[pos] = orig
            changed = True
        return changed

    def _rename_value(self, old: str, new: str) -> None:
        v = self.values.pop(old)
        self.values.pop(new, None)
        self.values[new] = Value(new, v.shape, v.dtype)
        for n in list(self._nodes.values()):
            if old in n.inputs or old in n.outputs:
                self._nodes[n.name] = n.with_(
                    inputs=tuple(new if i == old else i for i in n.inputs),
                    outputs=tuple(new if o == old else o for o in n.outputs),
                )
        if old in self._producer:
            self._producer[new] = self._producer.pop(old)
        self.output_names = [new if o == old else o for o in self.output_names]

    def _toposort(self) -> list[Node]:
        """Kahn's algorithm, choosing the ready node with the smallest key (stable order)."""
        nodes = list(self._nodes.values())
        producer = {o: n.name for n in nodes for o in n.outputs}
        deps: dict[str, set[str]] = {}
        users: dict[str, list[str]] = {n.name: [] for n in nodes}
        for n in nodes:
            d = {producer[i] for i in n.inputs if i and i in producer}
            d.discard(n.name)
            deps[n.name] = d
            for p in d:
                users[p].append(n.name)
        for n in nodes:
            for i in n.inputs:
                if i and i not in producer and i not in self.values:
                    raise ModelError(f"node '{n.name}' ({n.op}) reads unknown value '{i}'")
        rank = {name: k for k, name in enumerate(self._order())}
        heap = [(rank[n.name], n.name) for n in nodes if not deps[n.name]]
        heapq.heapify(heap)
        order: list[Node] = []
        while heap:
            _, name = heapq.heappop(heap)
            order.append(self._nodes[name])
            for u in users[name]:
                deps[u].discard(name)
                if not deps[u]:
                    heapq.heappush(heap, (rank[u], u))
        if len(order) != len(nodes):
            stuck = sorted(set(self._nodes) - {n.name for n in order})[:5]
            raise ModelError(f"the graph has a cycle through nodes {stuck}")
        return order


def _live_nodes(nodes: list[Node], roots: set[str]) -> list[Node]:
    """Nodes that contribute to ``roots`` (value names), in the given order."""
    needed = set(roots)
    live: list[Node] = []
    for n in reversed(nodes):
        if any(o in needed for o in n.outputs):
            live.append(n)
            needed.update(i for i in n.inputs if i)
    live.reverse()
    return live
