"""The greedy list scheduler of seed 000 phase 3: one execution order per ANE segment.

Each step pops the ready layer with the highest priority, compared in the seed's fixed
tie-break order:

1. ring-buffer membership: members of a ring (a producer and the consumer that drains
   its rows) go first, so a ring is drained as soon as it fills;
2. branch-sibling score: minus the number of the layer's fork siblings (other readers
   of the tensors it reads) still unscheduled. Siblings of one fork tie; across forks it
   prefers finishing a fan-out already under way to opening another;
3. merge-sibling score: minus the number of the layer's merge siblings (other producers
   of the layers it feeds) still unscheduled: a result that would wait at a join is
   deferred until its partners are close (this is what lets an attention block's value
   projection run next to the softmax);
4. the working-set-aware branch test: at a diamond whose endpoints (the fork's and the
   merge's tensors) fit the budget, the branch with the larger footprint goes first while
   its own peak (fork tensor + branch working set) still fits;
5. topological order (the layer's depth: shallower first);
6. node id (position in the engine graph).
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
            -self.depth,
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

    def run(self) -> tuple[int, ...]:
        dag = self.dag
        ready = [i for i in range(len(dag)) if not dag.preds[i]]
        order: list[int] = []
        while ready:
            best = max(ready, key=lambda i: self.priority(i).key())
            ready.remove(best)
            order.append(best)
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
        merge = -sum(self._left_pred[c] - 1 for c in dag.succs[i] if len(dag.preds[c]) > 1)
        test = max(
            (
                self._branch_score(i, p)
                for p in dag.preds[i]
                if len(dag.succs[p]) > 1 and self._left_succ[p] > 1
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

    def _branch_score(self, head: int, fork: int) -> int:
        """The branch test for the branch starting at ``head`` below ``fork`` (0: no preference)."""
        cached = self._branch_scores.get((head, fork))
        if cached is not None:
            return cached
        score = branch_test(self.dag, self.onchip, self.limit, head, fork)
        self._branch_scores[(head, fork)] = score
        return score


def branch_test(dag: LayerDag, onchip: Sequence[int], limit: float, head: int, fork: int) -> int:
    """Footprint of the branch ``head`` of ``fork`` when the diamond's endpoints fit and the
    branch's peak fits next to the fork tensor; 0 otherwise (or when there is no merge).

    The branch is the layers reachable from ``head`` and from no other reader of the fork;
    the merge is the first layer every reader reaches.
    """
    desc = dag.descendants
    siblings = dag.succs[fork]
    others = 0
    common = -1
    for s in siblings:
        common &= desc[s]
        if s != head:
            others |= desc[s]
    if common <= 0:
        return 0  # the branches never meet: not a diamond
    merge = (common & -common).bit_length() - 1
    if onchip[fork] + onchip[merge] > limit:
        return 0
    branch = desc[head] & ~others
    members = set(dag.members(branch))
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
