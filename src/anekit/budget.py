"""One memory budget for everything whose size comes from outside anekit.

Before anekit allocates memory whose size a file, a model or a caller chose (an import-time
constant fold, a reference-backend result, a simulator program's live values, a decoded
weight, a feed read from disk, a file read whole), it asks :func:`check`. The budget is, in
order: the innermost :func:`max_memory` block, the environment variable
``ANEKIT_MAX_MEMORY`` (bytes, or with a K/M/G/T suffix: ``512M``, ``8G``), or half of the
machine's physical memory. Over it, :class:`~anekit.errors.MemoryBudgetError` (exit 2 on the
command line) names what asked for how much.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from anekit.errors import AnekitError, MemoryBudgetError

ENV = "ANEKIT_MAX_MEMORY"
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:I?B)?\s*\Z", re.IGNORECASE)
_FALLBACK_PHYSICAL = 8 << 30  # when the system does not say how much memory it has
_lock = threading.Lock()
_overrides: list[int] = []  # the max_memory() blocks in force, innermost last


def parse_size(text: str | int, what: str = ENV) -> int:
    """``"512M"`` -> 536870912; a positive number of bytes, else an AnekitError."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.match(str(text))
        if match is None:
            raise AnekitError(
                f"{what}={text!r} is not a size", hint="write bytes or a size such as 512M or 8G"
            )
        value = int(float(match.group(1)) * _SUFFIX[match.group(2).upper()])
    if value <= 0:
        raise AnekitError(f"{what}={text!r} must be more than 0 bytes")
    return value


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system that says
        return _FALLBACK_PHYSICAL


def limit() -> int:
    """The budget in bytes now in force."""
    with _lock:
        if _overrides:
            return _overrides[-1]
    text = os.environ.get(ENV)
    if text:
        return parse_size(text)
    return physical_memory() // 2


@contextmanager
def max_memory(size: str | int) -> Iterator[int]:
    """Run a block under the budget ``size`` (bytes or ``"2G"``): the API's option, which
    wins over ``ANEKIT_MAX_MEMORY``. Blocks nest; each thread sees the innermost."""
    value = parse_size(size, "max_memory")
    with _lock:
        _overrides.append(value)
    try:
        yield value
    finally:
        with _lock:
            _overrides.remove(value)


def check(nbytes: int, what: str, *, where: str | None = None) -> int:
    """Raise MemoryBudgetError when ``what`` asks for more than the budget; else ``nbytes``."""
    budget = limit()
    if nbytes > budget:
        raise MemoryBudgetError(
            f"{what} needs {describe(nbytes)}, more than the memory budget of {describe(budget)}",
            requested=int(nbytes),
            limit=budget,
            where=where,
            hint=f"raise the budget with {ENV}=SIZE (e.g. {ENV}=16G) if the input is meant to "
            "be this large",
        )
    return nbytes


def check_array(shape: tuple[int, ...] | list[int], itemsize: int, what: str, *,
                where: str | None = None) -> int:  # fmt: skip
    """:func:`check` for an array of ``shape`` and ``itemsize`` (negative dims count 0)."""
    count = 1
    for d in shape:
        count *= max(int(d), 0)
    return check(count * int(itemsize), what, where=where)


def describe(nbytes: int) -> str:
    """A byte count for people: ``2.4 GB (2400000000 bytes)``."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit} ({nbytes} bytes)"
    return f"{nbytes} bytes"
