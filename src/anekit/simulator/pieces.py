"""One kernel in pieces on two threads: the caller's and one helper thread.

The simulator's run loop is one Python thread; a C kernel that lets go of the GIL can run
some pieces of its work on a helper thread while the caller runs the others, on two cores.
Used for large products numpy hands to BLAS (gemm.py) and for the window kernels
(window_kernels.py), whose pieces compute every output exactly as one call would, so the
split never changes a bit. Pieces are claimed one at a time from a shared counter: on a
busy machine where the helper gets no CPU, the caller takes every piece and waits for none
(a fixed split waited for the helper's whole half: 3x slower products under load).
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

SPARE = 0.5  # load below the CPU count by this much: a CPU is idle for the helper
OWN_WINDOW = 60.0  # seconds: the 1-minute load average's time constant, for our own share


class _OwnLoad:
    """This process's CPU use (all its threads) averaged as the kernel's 1-minute load
    average is, exponentially over OWN_WINDOW, from the CPU time between calls: the part of
    the load average that is our own work, not another process's."""

    def __init__(self) -> None:
        self.wall = self.cpu = None
        self.average = 0.0

    def __call__(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        if self.wall is not None and wall > self.wall:
            rate = (cpu - self.cpu) / (wall - self.wall)
            self.average += (rate - self.average) * (1 - math.exp(-(wall - self.wall) / OWN_WINDOW))
        self.wall, self.cpu = wall, cpu
        return self.average


own_load = _OwnLoad()


def spare_cpu(threads: int) -> bool:
    """True when a second thread can pay: ``threads`` CPUs and a 1-minute load average,
    less this process's own recent share (its GEMM threads and these pieces raise the load
    average too: counted as another process's, they turned the helper off in a benchmark
    that alone kept the machine busy), at least SPARE below them. With another process
    busy on a two-core machine the helper found no free CPU and its pieces made kernels
    slower (the CNN step 24.5 -> 29.1 ms at load 3.2), so then every piece runs on the
    caller."""
    if threads < 2:
        return False
    try:
        others = os.getloadavg()[0] - own_load()
    except OSError:  # pragma: no cover - no load average here
        return True
    return others < threads - SPARE


_pool: Any = None  # the helper thread, started on first use in each process
_pool_pid = 0  # the process it runs in: a fork's child has the object but not the thread


def _helper() -> Any:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        from concurrent.futures import ThreadPoolExecutor

        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="anekit-pieces")
        _pool_pid = os.getpid()
    return _pool


def run(call: Callable[[int, int], Any], count: int, parts: int = 2) -> list[Any]:
    """``call(lo, hi)`` over ``parts`` consecutive ranges covering [0, count), shared between
    this thread and the helper; the results in range order. Callers check that two CPUs
    are there (gemm.THREADS)."""
    parts = max(1, min(parts, count))
    bounds = [count * i // parts for i in range(parts + 1)]
    claims = itertools.count()  # next() is atomic under the GIL
    results: list[Any] = [None] * parts
    errors: list[BaseException] = []
    left = [parts]
    lock = threading.Lock()
    finished = threading.Event()

    def work() -> None:
        while (i := next(claims)) < parts:
            try:
                results[i] = call(bounds[i], bounds[i + 1])
            except BaseException as exc:  # handed to the caller below
                errors.append(exc)
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    finished.set()

    if parts > 1:
        _helper().submit(work)
    work()
    finished.wait()
    if errors:
        raise errors[0]
    return results
