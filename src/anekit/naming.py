"""Fresh names: the one helper every package uses to derive an unused name from a hint.

A leaf module like `anekit.errors`: it imports nothing of anekit, so the importer, the IR
editor, code generation and the file writers can all share it.
"""

from __future__ import annotations

from collections.abc import Container, MutableMapping


def fresh_name(
    hint: str,
    *taken: Container[str],
    bare: bool = True,
    start: int = 1,
    counters: MutableMapping[str, int] | None = None,
) -> str:
    """The first of ``hint`` (when ``bare``), ``hint_{start}``, ``hint_{start + 1}``, ... that
    none of the ``taken`` containers holds. The caller records the name it keeps.

    ``counters`` remembers where each hint's search ended, so that many names sharing one
    hint are not rescanned from ``start`` (valid while names are only ever added to ``taken``).
    """
    if bare and not any(hint in t for t in taken):
        return hint
    i = start if counters is None else counters.get(hint, start)
    while any(f"{hint}_{i}" in t for t in taken):
        i += 1
    if counters is not None:
        counters[hint] = i + 1
    return f"{hint}_{i}"
