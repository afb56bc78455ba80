"""Two halves of one kernel at once: the caller's thread and one helper thread.

The simulator's run loop is one Python thread; a C kernel that lets go of the GIL can run its
first half on a helper thread while the caller runs the second, on two cores. Used for large
products numpy hands to BLAS (gemm.py) and the window kernels (window_kernels.py), whose
halves compute every output exactly as one call would, so the split never changes a bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_pool: Any = None  # the helper thread, started on first use


def _helper() -> Any:
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor

        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="anekit-half")
    return _pool


def both(call: Callable[[int, int], Any], count: int) -> tuple[Any, Any]:
    """``call(0, h)`` on the helper thread and ``call(h, count)`` on this one, ``h`` half of
    ``count``; their results in that order (callers check that two CPUs are there:
    gemm.THREADS). One call on this thread when ``count`` is below 2."""
    if count < 2:
        return call(0, count), None
    half = count // 2
    first = _helper().submit(call, 0, half)
    second = call(half, count)
    return first.result(), second
