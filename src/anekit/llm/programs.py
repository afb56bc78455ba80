"""Compiled prefill and decode programs of a model, cached for the whole process, and the
host-side feeds they take (positions, additive masks, one-hot selectors).

The cache key is the model's weight files (path, size, modification time), the target,
the compression and the program's shape, so a second `generate` in the same process, even
through a second `anekit.llm.load` of the same folder, compiles nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.ir.dtypes import MASK_VALUE
from anekit.ir.graph import Graph

# The additive mask value of a hidden position: fp16-safe (never -inf, which turns an
# all-masked softmax row into NaN) and far below any real attention score.
# Prefill sequence buckets (Orion section 4.4 uses 32 to 1024; 16 keeps short prompts cheap).
BUCKETS = (16, 32, 64, 128, 256, 512, 1024)


@dataclass
class Compiled:
    """One compiled program and what it cost to make."""

    model: Any  # anekit.compiler.CompiledModel
    seconds: float


_CACHE: dict[Hashable, Compiled] = {}
_LOCK = threading.Lock()


def cached(
    key: Hashable, build: Callable[[], Graph], compile_graph: Callable[[Graph], Any]
) -> tuple[Compiled, bool]:
    """The program for ``key``, compiling it on first use; True when it was compiled now."""
    with _LOCK:
        found = _CACHE.get(key)
        if found is not None:
            return found, False
        start = time.perf_counter()
        model = compile_graph(build())
        _ = (
            model.program
        )  # emit the MIL now, so compile time is counted here and not in the first run
        found = _CACHE[key] = Compiled(model, time.perf_counter() - start)
        return found, True


def clear_cache() -> None:
    """Forget every compiled program (tests; memory)."""
    with _LOCK:
        _CACHE.clear()


def bucket_for(length: int, max_context: int) -> int:
    """The smallest bucket holding ``length`` positions (the context itself past the last)."""
    for b in BUCKETS:
        if length <= b <= max_context:
            return b
    return max_context


def prefill_feeds(ids: list[int], seq: int) -> dict[str, np.ndarray]:
    """Feeds of a prefill over ``ids`` padded to ``seq``: causal mask, padding hidden."""
    n = len(ids)
    padded = np.zeros((1, seq), np.int32)
    padded[0, :n] = ids
    mask = np.triu(np.full((seq, seq), MASK_VALUE, np.float32), k=1)
    mask[:, n:] = MASK_VALUE  # padding keys are never attended to
    np.fill_diagonal(mask, 0.0)  # every row keeps one visible key (padding rows too)
    last = np.zeros((1, 1, 1, seq), np.float32)
    last[0, 0, 0, n - 1] = 1.0
    return {
        "ids": padded,
        "positions": np.arange(seq, dtype=np.int32)[None],
        "mask": mask[None, None],
        "last": last,
    }


def decode_feeds(token: int, position: int, context: int) -> dict[str, np.ndarray]:
    """Feeds of one decode step writing cache slot ``position`` and attending to 0..position."""
    mask = np.full((1, 1, 1, context), MASK_VALUE, np.float32)
    mask[..., : position + 1] = 0.0
    write = np.zeros((1, 1, 1, context), np.float32)
    write[..., position] = 1.0
    return {
        "ids": np.array([[token]], np.int32),
        "positions": np.array([[position]], np.int32),
        "mask": mask,
        "write": write,
    }


def join_logits(outputs: dict[str, np.ndarray], chunks: int) -> np.ndarray:
    """The vocabulary head's chunks [1, n_i, 1, 1] joined into one float32 vector."""
    return np.concatenate([outputs[f"logits_{i}"].reshape(-1) for i in range(chunks)])
