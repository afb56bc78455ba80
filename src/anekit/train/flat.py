"""Multi-tensor updates: the optimizer's elementwise chain emitted once over a group of
parameters joined into one tensor, not once per parameter.

The simulator's cost is mostly per op for small tensors (a numpy call and an fp16
rounding pass each), so ~30 update ops per parameter cost far more for many small tensors
than for one joined tensor. Elementwise ops compute every element alone, so the joined
form gives every element the same value as the per-parameter form.

A parameter whose size n is a multiple of `ROW` joins as [1, n / ROW, 1, ROW] (the
engine's [1, C, 1, S] layout with 64-byte fp16 rows; a reshape that moves no data),
concatenated along the channels; any other parameter as [1, 1, 1, n], concatenated along
the row, at most `MAX_ROW` elements (the smallest dimension cap among the targets).

A group holds at most `MAX_GROUP` elements: joining costs a concat of each input and a
slice per member of each output, and the cost model rates a slice at its whole input, so
the engine's estimate grows with members x group size. Unbounded, the transformer block
of benchmarks/train_step_time.py saves the simulator ~0.5 ms a step and costs the M1
estimate 3 ms; at 65536 it saves ~0.35 ms and the estimate moves by <= 2%. A parameter
alone in its group, or larger than a group, keeps its own update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

ROW = 32
MAX_GROUP = 65536
MAX_ROW = 16384


@dataclass(frozen=True)
class Group:
    params: tuple[str, ...]
    views: tuple[tuple[int, ...], ...]  # each member's view
    axis: int  # the axis a joined group's views are concatenated along

    @property
    def joined(self) -> bool:
        return len(self.params) > 1

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(v[self.axis] for v in self.views)


def _view(n: int, axis: int) -> tuple[int, ...]:
    return (1, n // ROW, 1, ROW) if axis == 1 else (1, 1, 1, n)


def groups(shapes: Mapping[str, Sequence[int]], own_view: Callable, flat: bool = True,
           ) -> list[Group]:  # fmt: skip
    """The update groups of ``shapes`` (parameter -> shape): each parameter joins the first
    group of its kind with room (ordered by their first members); ``own_view(shape)`` is
    the view of a parameter updated alone."""
    caps = {1: MAX_GROUP, 3: MAX_ROW}
    packed: list[tuple[int, list[str]]] = []  # (axis, members), first fit in parameter order
    sizes = {p: int(np.prod(s)) for p, s in shapes.items()}
    for p, n in sizes.items():
        axis = 1 if n % ROW == 0 else 3
        room = (m for a, m in packed if a == axis and sum(sizes[q] for q in m) + n <= caps[axis])
        members = next(room, None) if flat and n <= caps[axis] else None
        if members is None:
            packed.append((axis, [p]))
        else:
            members.append(p)
    out = []
    for axis, members in packed:
        if len(members) > 1:
            out.append(Group(tuple(members), tuple(_view(sizes[p], axis) for p in members), axis))
        else:
            p = members[0]
            out.append(Group((p,), (tuple(own_view(tuple(shapes[p]))),), axis))
    return out
