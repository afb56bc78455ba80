"""Large results reuse freed heap memory during a run, instead of fresh pages.

glibc serves each allocation above its mmap threshold (128 KiB, rising to at most 32 MiB)
with a fresh mapping and unmaps it on free, so every large result of every op is written
through page faults first: a PP-OCR detector's run took 84k of them, a quarter of its CPU
time. While a program whose live values peak at LARGE or more runs, allocations come from
the heap instead (mmap off, trimming held back), so the block one op frees is the next op's
result without new pages; when the last such run ends, mmap is back and the free memory past
KEPT bytes is returned to the system (``malloc_trim``; KEPT is what training sessions ask
glibc to keep at the heap top, `anekit.train.runner`, so a step's pages stay for the next
step).

After a large run, blocks below STEADY bytes come from the heap and up to STEADY bytes stay
free at its top: where glibc's rising mmap threshold ends by itself in a process that frees
such blocks. Setting any threshold, as a large run must, stops it rising, and glibc's
defaults set back left it at 128 KiB: every later block above that was a fresh mapping
(after PP-OCRv4's detector the 48 x 192 classifier took 1,575 page faults a run and 7.0 ms;
now none and 4.6 ms; magika 7.7 -> 6.6 ms). Blocks of STEADY bytes or more are still
mappings of their own, returned when freed. A process without a large run keeps glibc's own
rising threshold (a model's loader frees its temporaries back to the system). Where the C
library is not glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from typing import Any

LARGE = 64 << 20  # bytes of live values from which a run takes its memory from the heap

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4  # mallopt parameters (malloc.h)
_DEFAULT_MMAP_MAX = 65536  # glibc's default
STEADY = 32 << 20  # glibc's ceiling for its rising mmap threshold (64-bit)
_HELD_TRIM = 1 << 30  # free memory kept in the heap during a run
KEPT = 64 << 20  # free bytes left at the heap top when the last run ends


def _glibc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:  # pragma: no cover - no C library found by that name
        return None


_libc = _glibc()
_lock = threading.Lock()
_runs = 0  # runs inside the heap setting now (threads, segments of one model)


class HeapReuse:
    """Context of one run: the heap setting from the first entry to the last exit."""

    def __enter__(self) -> None:
        global _runs
        with _lock:
            if _runs == 0:
                _libc.mallopt(_M_MMAP_MAX, 0)
                _libc.mallopt(_M_TRIM_THRESHOLD, _HELD_TRIM)
            _runs += 1

    def __exit__(self, *exc: object) -> None:
        global _runs
        with _lock:
            _runs -= 1
            if _runs == 0:
                _libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
                _libc.mallopt(_M_MMAP_THRESHOLD, STEADY)  # see the module's note
                _libc.mallopt(_M_TRIM_THRESHOLD, STEADY)
                _libc.malloc_trim(KEPT)


def reuse(peak_bytes: int) -> HeapReuse | None:
    """The heap setting for a run whose live values peak at ``peak_bytes``; None (nothing to
    do) for smaller runs and without glibc."""
    return HeapReuse() if _libc is not None and peak_bytes >= LARGE else None
