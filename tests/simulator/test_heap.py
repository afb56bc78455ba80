"""A large run takes its results from freed heap memory (simulator/heap.py): a block freed
inside the setting stays in the process for the next result; outside it, glibc's own
setting is back (a large block is a mapping of its own, returned to the system when
freed), and so is the memory the run kept."""

from __future__ import annotations

import os

import numpy as np
import pytest

from anekit.simulator import heap

pytestmark = pytest.mark.skipif(heap._libc is None, reason="not glibc")

SIZE = 192 << 20  # bytes: above glibc's largest mmap threshold (32 MiB) and heap.KEPT


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _returned_when_freed() -> int:
    """Bytes of resident memory a written, then freed, large block gives back."""
    block = np.ones(SIZE // 4, np.float32)
    before = _resident()
    del block
    return before - _resident()


def test_a_large_run_keeps_freed_memory_and_sets_glibc_back() -> None:
    assert heap.reuse(heap.LARGE - 1) is None
    with heap.reuse(heap.LARGE):
        kept = _returned_when_freed()
        during = _resident()
    assert kept < SIZE // 4
    assert during - _resident() >= SIZE - heap.KEPT - (8 << 20)  # returned when it ended
    assert _returned_when_freed() > SIZE // 2


def test_nested_runs_keep_the_setting_until_the_last_ends() -> None:
    with heap.reuse(heap.LARGE):
        with heap.reuse(heap.LARGE):
            pass
        assert _returned_when_freed() < SIZE // 4
    assert heap._runs == 0
    assert _returned_when_freed() > SIZE // 2
