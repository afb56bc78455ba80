"""The layer dependency graph of a segment: producers, consumers, depth and reachability."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

from anekit.schedule.layers import LayerInfo, link_layers


class LayerDag:
    """Layers indexed by their position in the input list (the "node id").

    ``preds[i]``/``succs[i]`` are distinct producer/consumer indices inside the segment;
    ``level[i]`` is the longest path from a source (the topological rank used as a
    tie-break); reachability is answered from per-node descendant bit sets.
    """

    def __init__(self, layers: Sequence[LayerInfo]):
        self.layers: tuple[LayerInfo, ...] = link_layers(layers)
        self.index: dict[str, int] = {lay.name: i for i, lay in enumerate(self.layers)}
        self.preds: tuple[tuple[int, ...], ...] = tuple(
            tuple(self.index[p] for p in lay.producers) for lay in self.layers
        )
        self.succs: tuple[tuple[int, ...], ...] = tuple(
            tuple(self.index[c] for c in lay.consumers) for lay in self.layers
        )
        level = [0] * len(self.layers)
        for i, ps in enumerate(self.preds):
            level[i] = 1 + max((level[p] for p in ps), default=-1)
        self.level: tuple[int, ...] = tuple(level)
        by_output = {lay.output: i for i, lay in enumerate(self.layers)}
        self.producer_of_tensor: dict[str, int] = by_output

    def __len__(self) -> int:
        return len(self.layers)

    @cached_property
    def descendants(self) -> tuple[int, ...]:
        """Bit set of the nodes reachable from each node (itself included)."""
        desc = [0] * len(self.layers)
        for i in range(len(self.layers) - 1, -1, -1):
            bits = 1 << i
            for s in self.succs[i]:
                bits |= desc[s]
            desc[i] = bits
        return tuple(desc)

    def reaches(self, a: int, b: int) -> bool:
        """True when there is a path a -> ... -> b (or a == b)."""
        return bool((self.descendants[a] >> b) & 1)

    def independent(self, a: int, b: int) -> bool:
        """No producer-consumer path between a and b in either direction."""
        return a != b and not self.reaches(a, b) and not self.reaches(b, a)

    def members(self, bits: int) -> list[int]:
        """The node ids in a bit set, ascending (one pass over its binary digits: clearing
        the lowest bit repeatedly copies the whole integer each time)."""
        digits = bin(bits)[:1:-1]  # least significant first, without the '0b'
        return [i for i, d in enumerate(digits) if d == "1"]
