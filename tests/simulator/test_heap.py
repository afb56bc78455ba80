"""A large run takes its results from freed heap memory (simulator/heap.py): a block freed
inside the setting stays in the process for the next result; outside it, glibc's own
setting is back (a large block is a mapping of its own, returned to the system when
freed), and so is the memory the run kept.

Each case runs in a fresh child process: a large run earlier in a test worker can leave a
free hole in its heap big enough to serve the next large block from the heap, whatever the
setting, which made these measurements depend on the tests run before them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from anekit.simulator import heap

pytestmark = pytest.mark.skipif(heap._libc is None, reason="not glibc")

SRC = Path(__file__).resolve().parents[2] / "src"
PRELUDE = """
import os
import numpy as np
from anekit.simulator import heap

SIZE = 192 << 20  # bytes: above glibc's largest mmap threshold (32 MiB) and heap.KEPT

def _resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def _returned_when_freed():
    # bytes of resident memory a written, then freed, large block gives back
    block = np.ones(SIZE // 4, np.float32)
    before = _resident()
    del block
    return before - _resident()
"""


def _in_child(body: str) -> None:
    code = PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_large_run_keeps_freed_memory_and_sets_glibc_back() -> None:
    _in_child("""
        assert heap.reuse(heap.LARGE - 1) is None
        with heap.reuse(heap.LARGE):
            kept = _returned_when_freed()
            during = _resident()
        assert kept < SIZE // 4, kept
        assert during - _resident() >= SIZE - heap.KEPT - (8 << 20)  # returned when it ended
        assert _returned_when_freed() > SIZE // 2
    """)


def test_nested_runs_keep_the_setting_until_the_last_ends() -> None:
    _in_child("""
        with heap.reuse(heap.LARGE):
            with heap.reuse(heap.LARGE):
                pass
            assert _returned_when_freed() < SIZE // 4
        assert heap._runs == 0
        assert _returned_when_freed() > SIZE // 2
    """)


def test_after_a_large_run_blocks_below_32_mib_stay_in_the_heap() -> None:
    # a block of a few MiB (a CNN's feature map) freed and made again must not come back as
    # fresh pages: glibc's defaults set back after a large run left its threshold at 128 KiB
    # (its rising threshold stops once anything is set), and every such block was a new
    # mapping (1,575 page faults a run for PP-OCR's classifier after the detector); blocks
    # of 32 MiB or more are still mappings returned when freed
    _in_child("""
        def mid_returned():
            block = np.ones((8 << 20) // 4, np.float32)
            before = _resident()
            del block
            return before - _resident()

        assert mid_returned() >= (4 << 20), "glibc's fresh default maps a block of 8 MiB"
        with heap.reuse(heap.LARGE):
            pass
        assert mid_returned() < (1 << 20)
        assert _returned_when_freed() > SIZE // 2
    """)
