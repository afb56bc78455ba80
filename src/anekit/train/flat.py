"""Multi-tensor updates: the optimizer's elementwise chain emitted once over many
parameters joined into one tensor, not once per parameter.

The simulator's cost is mostly per op (a numpy call and an fp16 rounding pass each), so
an update of ~30 ops per parameter costs far more for many small tensors than for one
joined tensor. Elementwise ops compute every element alone, so the joined form gives
every element the same value as the per-parameter form.

A parameter whose size n is a multiple of `ROW` joins a wide group as [1, n / ROW, 1,
ROW] (the engine's [1, C, 1, S] layout with 64-byte fp16 rows; a reshape that moves no
data), concatenated along the channels, at most `MAX_CHANNELS` of them (the smallest
channel cap among the targets). Any other parameter joins a narrow group as [1, 1, 1, n],
concatenated along the row, at most `MAX_ROW` elements (the smallest dimension cap). A
parameter that fits neither, or is alone in its group, keeps its own update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

ROW = 32
MAX_CHANNELS = 16384
MAX_ROW = 16384
MAX_MEMBER = 65536


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


def _kind(n: int) -> int | None:
    """The concatenation axis of a parameter of ``n`` elements (None: its own update)."""
    if n > MAX_MEMBER:
        return None
    if n % ROW == 0 and n // ROW <= MAX_CHANNELS:
        return 1
    return 3 if n <= MAX_ROW else None


def _view(n: int, axis: int) -> tuple[int, ...]:
    return (1, n // ROW, 1, ROW) if axis == 1 else (1, 1, 1, n)


def groups(shapes: Mapping[str, Sequence[int]], own_view: Callable, flat: bool = True,
           ) -> list[Group]:  # fmt: skip
    """The update groups of ``shapes`` (parameter -> shape), ordered by their first
    member; ``own_view(shape)`` is the view of a parameter updated alone."""
    caps = {1: MAX_CHANNELS, 3: MAX_ROW}
    open_: dict[int, list[str]] = {1: [], 3: []}  # axis -> the members of its open group
    done: list[tuple[int, list[str]]] = []
    lone: list[str] = []
    sizes = {p: int(np.prod(s)) for p, s in shapes.items()}
    for p, n in sizes.items():
        axis = _kind(n) if flat else None
        if axis is None:
            lone.append(p)
            continue
        extent = sum(_view(sizes[q], axis)[axis] for q in open_[axis]) + _view(n, axis)[axis]
        if extent > caps[axis]:
            done.append((axis, open_[axis]))
            open_[axis] = []
        open_[axis].append(p)
    done.extend(open_.items())
    out = []
    for axis, members in done:
        if len(members) > 1:
            out.append(Group(tuple(members), tuple(_view(sizes[p], axis) for p in members), axis))
        else:
            lone.extend(members)
    out += [Group((p,), (tuple(own_view(tuple(shapes[p]))),), 1) for p in lone]
    order = {p: i for i, p in enumerate(shapes)}
    return sorted(out, key=lambda g: order[g.params[0]])
