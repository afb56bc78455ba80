"""The greedy list scheduler of ane-compiler phase 3: one execution order per ANE segment.

Each step pops the ready layer with the highest priority, compared in the seed's fixed
tie-break order (the seed names the criteria; the definitions are ours):

1. ring-buffer membership: members of a ring (a producer and the consumer that drains
   its rows) go first, so a ring is drained as soon as it fills;
2. branch-sibling score: minus the number of the layer's fork siblings (other readers
   of the tensors it reads) still unscheduled. Siblings of one fork tie; across forks it
   prefers finishing a fan-out already under way to opening another;
3. merge-sibling score: minus the number of the layer's merge siblings still
   unscheduled, where the merges are the first layers with several producers that the
   layer's private chain reaches (its consumers, through single-producer layers). A
   result that would wait at a join is deferred while its partners are pending; the
   branches of one diamond tie (this is what lets an attention block's value
   projection run next to the softmax);
4. the working-set-aware branch test: inside an open diamond (its merge not yet run)
   whose endpoints (the fork's and the merge's tensors) fit the budget, layers of the
   branch with the larger footprint go first while that branch's own peak (fork tensor
   + branch working set) still fits, so the branch is drained before the other grows;
5. topological order: the deeper layer first (its depth is its longest path from the
   segment's sources), which continues the current chain;
6. node id: the layer's position in the engine graph, lower first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from anekit.schedule.dag import LayerDag


@dataclass(frozen=True)
class Priority:
    """The comparison key of one ready layer (greater runs first); see the module docstring."""

    ring: int
    branch_sibling: int
    merge_sibling: int
    branch_test: int
    depth: int
    node_id: int

    def key(self) -> tuple[int, ...]:
        return (
            self.ring,
            self.branch_sibling,
            self.merge_sibling,
            self.branch_test,
            self.depth,
            -self.node_id,
        )


class ListScheduler:
    """Schedules one segment. ``onchip`` is each layer output's on-chip size in bytes."""

    def __init__(
        self,
        dag: LayerDag,
        onchip: Sequence[int],
        limit: float,
        ring_members: frozenset[int] = frozenset(),
    ):
        self.dag = dag
        self.onchip = tuple(onchip)
        self.limit = limit
        self.ring_members = ring_members
        self._branch_scores: dict[tuple[int, int], int] = {}
        self._left_succ = [len(s) for s in dag.succs]  # unscheduled readers per producer
        self._left_pred = [len(p) for p in dag.preds]  # unscheduled producers per layer
        self._scheduled = [False] * len(dag)
        self._merge_table: list[tuple[int, ...]] | None = None
        self._memberships: dict[int, list[tuple[int, int, int]]] | None = None
        self._diamonds: dict[int, Diamond] = {}

    def run(self) -> tuple[int, ...]:
        dag = self.dag
        ready = [i for i in range(len(dag)) if not dag.preds[i]]
        order: list[int] = []
        while ready:
            best = max(ready, key=lambda i: self.priority(i).key())
            ready.remove(best)
            order.append(best)
            self._scheduled[best] = True
            for p in dag.preds[best]:
                self._left_succ[p] -= 1
            for s in dag.succs[best]:
                self._left_pred[s] -= 1
                if self._left_pred[s] == 0:
                    ready.append(s)
        return tuple(order)

    def priority(self, i: int) -> Priority:
        dag = self.dag
        branch = -sum(self._left_succ[p] - 1 for p in dag.preds[i] if len(dag.succs[p]) > 1)
        merge = -sum(
            sum(1 for p in dag.preds[m] if not self._scheduled[p] and not dag.reaches(i, p))
            for m in self._merges(i)
        )
        test = max(
            (
                self._branch_score(head, fork)
                for fork, head, merge_node in self._branches_of(i)
                if not self._scheduled[merge_node]
            ),
            default=0,
        )
        return Priority(
            ring=int(i in self.ring_members),
            branch_sibling=branch,
            merge_sibling=merge,
            branch_test=test,
            depth=dag.level[i],
            node_id=i,
        )

    def _merges(self, i: int) -> tuple[int, ...]:
        """The first multi-producer layers reached from ``i`` through single-producer layers."""
        if self._merge_table is None:
            self._merge_table = first_merges(self.dag)
        return self._merge_table[i]

    def _branches_of(self, i: int) -> list[tuple[int, int, int]]:
        """(fork, head, merge) of every diamond branch ``i`` belongs to."""
        if self._memberships is None:
            self._diamonds = find_diamonds(self.dag)
            self._memberships = diamond_branches(self.dag, self._diamonds)
        return self._memberships.get(i, [])

    def _branch_score(self, head: int, fork: int) -> int:
        """The branch test for the branch starting at ``head`` below ``fork`` (0: no preference)."""
        cached = self._branch_scores.get((head, fork))
        if cached is not None:
            return cached
        score = branch_test(self.dag, self.onchip, self.limit, head, fork, self._diamonds)
        self._branch_scores[(head, fork)] = score
        return score


def first_merges(dag: LayerDag) -> list[tuple[int, ...]]:
    """For every layer, the first multi-producer layers its private chain reaches (through
    single-producer layers), from the last layer back: each layer's answer is built from
    its consumers' answers, once (a search per layer walks every chain again: quadratic)."""
    table: list[tuple[int, ...]] = [()] * len(dag)
    for i in range(len(dag) - 1, -1, -1):
        found: set[int] = set()
        for c in dag.succs[i]:
            if len(dag.preds[c]) > 1:
                found.add(c)
            else:
                found.update(table[c])
        table[i] = tuple(sorted(found))
    return table


@dataclass(frozen=True)
class Diamond:
    """A fork (a layer with several readers) whose readers all reach a common layer, the
    merge (the first such layer); ``branches[head]`` is the bit set of what reader ``head``
    reaches and no other reader does."""

    fork: int
    merge: int
    branches: dict[int, int]


def find_diamonds(dag: LayerDag) -> dict[int, Diamond]:
    """Every diamond of the segment, keyed by its fork.

    What the other readers of a fork reach is an OR over all readers but one; prefix and
    suffix ORs give it for every reader in one pass over the readers (not one per reader,
    which is quadratic in a fork's fan-out: a value read by every layer of a long chain).
    """
    desc = dag.descendants
    found: dict[int, Diamond] = {}
    for fork, readers in enumerate(dag.succs):
        if len(readers) < 2:
            continue
        common = -1
        for r in readers:
            common &= desc[r]
        if common <= 0:
            continue
        suffix = [0] * (len(readers) + 1)
        for k in range(len(readers) - 1, -1, -1):
            suffix[k] = suffix[k + 1] | desc[readers[k]]
        prefix, branches = 0, {}
        for k, head in enumerate(readers):
            branches[head] = desc[head] & ~(prefix | suffix[k + 1])
            prefix |= desc[head]
        found[fork] = Diamond(fork, (common & -common).bit_length() - 1, branches)
    return found


def diamond_branches(
    dag: LayerDag, diamonds: dict[int, Diamond] | None = None
) -> dict[int, list[tuple[int, int, int]]]:
    """For each layer, the (fork, head, merge) of the diamond branches it lies on."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    for d in (find_diamonds(dag) if diamonds is None else diamonds).values():
        for head, branch in d.branches.items():
            for m in dag.members(branch):
                out.setdefault(m, []).append((d.fork, head, d.merge))
    return out


def branch_test(
    dag: LayerDag,
    onchip: Sequence[int],
    limit: float,
    head: int,
    fork: int,
    diamonds: dict[int, Diamond] | None = None,
) -> int:
    """Footprint of the branch ``head`` of ``fork`` when the diamond's endpoints fit and the
    branch's peak fits next to the fork tensor; 0 otherwise (or when there is no merge).

    The branch is the layers reachable from ``head`` and from no other reader of the fork;
    the merge is the first layer every reader reaches.
    """
    d = (find_diamonds(dag) if diamonds is None else diamonds).get(fork)
    if d is None or head not in d.branches:
        return 0  # the branches never meet: not a diamond
    if onchip[fork] + onchip[d.merge] > limit:
        return 0
    members = set(dag.members(d.branches[head]))
    footprint = sum(onchip[m] for m in members)
    peak = 0
    for m in members:
        inner = sum(onchip[p] for p in dag.preds[m] if p in members)
        peak = max(peak, onchip[m] + inner)
    if onchip[fork] + peak > limit:
        return 0
    return footprint


def list_schedule(
    dag: LayerDag,
    onchip: Sequence[int],
    limit: float,
    ring_members: frozenset[int] = frozenset(),
) -> tuple[int, ...]:
    """The execution order (layer indices) of one segment."""
    return ListScheduler(dag, onchip, limit, ring_members).run()
