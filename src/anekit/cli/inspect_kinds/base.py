"""The text tree every inspected kind is drawn as, the Kind record, and the drawing helpers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LIST_LIMIT = 24  # longest list printed in the text tree; --json always has everything


@dataclass
class Node:
    """One line of the text tree and its children."""

    label: str
    children: list[Node] = field(default_factory=list)

    def add(self, label: str) -> Node:
        child = Node(label)
        self.children.append(child)
        return child


@dataclass(frozen=True)
class Kind:
    """One inspectable kind of file: how to recognise it, decode it, and draw it.

    `describe` is None while anekit has no reader for the kind: the kind is still named.
    """

    name: str
    detect: Callable[[Path, bytes], bool]
    describe: Callable[[Path], dict[str, Any]] | None
    render: Callable[[dict[str, Any]], Node] | None
    by_extension: tuple[str, ...] = ()


def hex_or_dash(value: int | None) -> str:
    return "—" if value is None else f"0x{value:x}"


def add_limited(parent: Node, items: list[Any], draw: Callable[[Any], str]) -> None:
    """Add the first LIST_LIMIT items under ``parent``, then a line counting the rest."""
    for item in items[:LIST_LIMIT]:
        parent.add(draw(item))
    if len(items) > LIST_LIMIT:
        parent.add(f"… and {len(items) - LIST_LIMIT} more (see --json)")


def without_bom_or_space(head: bytes) -> bytes:
    """The first bytes of a text file past a UTF-8 byte order mark and leading white space."""
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")
