"""Where the file-based fuzz targets put each case, and the check that a case wrote
nothing: a fresh `case/` folder per case inside a private root; afterwards the root must
hold only `case/`, and `case/` exactly the files the target wrote there."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

# what a case may feed a model: inputs of at most this many elements in all
MAX_FEED_ELEMENTS = 1 << 20


class WroteOutside(Exception):
    """A case changed files it was not given (a finding: not an AnekitError)."""


class Sandbox:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="anekit-fuzz-"))
        self.case = self.root / "case"

    def fresh(self) -> Path:
        shutil.rmtree(self.case, ignore_errors=True)
        self.case.mkdir()
        return self.case

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """Every entry under the root: relative path -> (size, mtime_ns)."""
        found = {}
        for here, dirs, names in os.walk(self.root):
            for name in (*dirs, *names):
                p = Path(here) / name
                st = os.lstat(p)
                found[p.relative_to(self.root).as_posix()] = (st.st_size, st.st_mtime_ns)
        return found

    def check(self, before: dict[str, tuple[int, int]]) -> None:
        after = self.snapshot()
        if after != before:
            changed = sorted(set(after.items()) ^ set(before.items()))[:3]
            raise WroteOutside(f"the case changed files: {changed}")


SANDBOX: Sandbox | None = None


def sandbox() -> Sandbox:
    global SANDBOX
    if SANDBOX is None:
        SANDBOX = Sandbox()
    return SANDBOX


def zero_feeds(ports) -> dict[str, np.ndarray] | None:
    """Zeros for every input (name, shape, numpy dtype), or None when they would be large."""
    total = 0
    feeds = {}
    for name, shape, dtype in ports:
        count = 1
        for d in shape:
            count *= int(d)
        total += count
        if total > MAX_FEED_ELEMENTS:
            return None
        feeds[name] = np.zeros(tuple(int(d) for d in shape), dtype)
    return feeds
