"""Compiled programs of language models, cached for the process and bounded by bytes, and the
host-side feeds they take (positions, additive masks, one-hot selectors).

The cache key is the model's weight files (path, size, modification time), the target, the
compression, the context and the program (`anekit.llm.plan.ProgramSpec`), so a second
`generate` in the same process, even through a second `anekit.llm.load` of the same
folder, compiles nothing. The cache holds at most `cache_limit()` bytes of programs (each
counted by what it keeps of its own, `FOOTPRINT` x its fp16 weights) and forgets the least
recently used beyond it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit import budget
from anekit.ir.dtypes import MASK_VALUE
from anekit.ir.graph import Graph

# Bytes a program keeps per fp16 weight byte of its chunk: the simulator's plan and working set
# (its weights are shared, below); measured 0.1-0.15 in tests/llm/test_one_copy.py and
# benchmarks/results/llm_scale.json, with room for a larger prefill bucket's activations.
FOOTPRINT = 0.25
# Bytes per fp16 weight byte every program of a model shares: the one fp16 copy the
# checkpoint reader made (1; the weight files are views of it and the simulator reads it in
# place, a tied vocabulary once for the gather and the head) and what the Python process and
# the reader's last block hold beside it.
SHARED = 1.1


@dataclass
class Compiled:
    """One compiled program, what it cost to make and the bytes it keeps."""

    model: Any  # anekit.compiler.CompiledModel
    seconds: float
    nbytes: int


_CACHE: OrderedDict[Hashable, Compiled] = OrderedDict()
_LOCK = threading.Lock()
_limit: list[int] = []


def cache_limit() -> int:
    """Bytes of programs the process keeps: `set_cache_limit`'s, else half the memory budget."""
    return _limit[-1] if _limit else budget.limit() // 2


def set_cache_limit(nbytes: int | None) -> None:
    """Bound the program cache to ``nbytes`` (None: back to half the memory budget)."""
    with _LOCK:
        _limit.clear()
        if nbytes is not None:
            _limit.append(int(nbytes))
        _evict(keep=None)


def cached_bytes() -> int:
    with _LOCK:
        return sum(c.nbytes for c in _CACHE.values())


def cached(key: Hashable, build: Callable[[], Graph], compile_graph: Callable[[Graph], Any],
           nbytes: int) -> tuple[Compiled, bool]:  # fmt: skip
    """The program for ``key``, compiling it on first use; True when it was compiled now."""
    with _LOCK:
        found = _CACHE.get(key)
        if found is not None:
            _CACHE.move_to_end(key)
            return found, False
        start = time.perf_counter()
        model = compile_graph(build())
        _ = model.program  # emit the MIL now, so compile time is counted here and not in the first run
        found = _CACHE[key] = Compiled(model, time.perf_counter() - start, nbytes)
        _evict(keep=key)
        return found, True


def _evict(keep: Hashable | None) -> None:
    limit = cache_limit()
    while len(_CACHE) > 1 and sum(c.nbytes for c in _CACHE.values()) > limit:
        oldest = next(iter(_CACHE))
        if oldest == keep:
            break
        del _CACHE[oldest]


def clear_cache() -> None:
    """Forget every compiled program (tests; memory)."""
    with _LOCK:
        _CACHE.clear()


def _visible(rows: np.ndarray, keys: np.ndarray, window: int | None) -> np.ndarray:
    """[S, T] True where the query at position rows[s] may see the key at keys[t]."""
    seen = keys[None, :] <= rows[:, None]
    if window is not None:
        seen &= keys[None, :] > rows[:, None] - window
    return seen


def _mask(seen: np.ndarray) -> np.ndarray:
    mask = np.where(seen, np.float32(0.0), np.float32(MASK_VALUE)).astype(np.float32)
    return mask[None, None]


def prefill_feeds(ids: list[int], seq: int, window: int | None = None) -> dict[str, np.ndarray]:
    """Feeds of a prefill over ``ids`` padded to ``seq``: causal mask, padding hidden; with
    ``window``, also the sliding layers' mask (``mask_sliding``)."""
    n = len(ids)
    padded = np.zeros((1, seq), np.int32)
    padded[0, :n] = ids
    pos = np.arange(seq)
    real = pos < n
    feeds = {"ids": padded, "positions": pos.astype(np.int32)[None]}
    for name, w in (("mask", None), ("mask_sliding", window)):
        if name == "mask_sliding" and window is None:
            continue
        seen = _visible(pos, pos, w) & real[None, :]  # padding keys are never attended to
        np.fill_diagonal(seen, True)  # every row keeps one visible key (padding rows too)
        feeds[name] = _mask(seen)
    last = np.zeros((1, 1, 1, seq), np.float32)
    last[0, 0, 0, n - 1] = 1.0
    feeds["last"] = last
    return feeds


def decode_feeds(tokens: list[int], start: int, seq: int, context: int,
                 window: int | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """Feeds of a decode over ``tokens`` at positions start.. (padded to ``seq``), writing
    their cache slots and attending to every earlier position (within ``window`` for the
    sliding layers' ``mask_sliding``)."""
    n = len(tokens)
    rows = start + np.arange(seq)
    real = np.arange(seq) < n
    ids = np.zeros((1, seq), np.int32)
    ids[0, :n] = tokens
    keys = np.arange(context)
    write = np.zeros((1, 1, seq, context), np.float32)
    write[0, 0, np.arange(n), rows[:n]] = 1.0
    feeds = {"ids": ids, "positions": np.minimum(rows, context - 1).astype(np.int32)[None],
             "write": write}  # fmt: skip
    for name, w in (("mask", None), ("mask_sliding", window)):
        if name == "mask_sliding" and window is None:
            continue
        seen = _visible(rows, keys, w)
        seen[~real] = False
        seen[~real, 0] = True  # a padding row sees one key, so its softmax stays finite
        feeds[name] = _mask(seen)
    if seq > 1:
        last = np.zeros((1, 1, 1, seq), np.float32)
        last[0, 0, 0, n - 1] = 1.0
        feeds["last"] = last
    return feeds


def join_logits(outputs: dict[str, np.ndarray], chunks: int) -> np.ndarray:
    """The vocabulary head's pieces [1, n_i, 1, 1] joined into one float32 vector."""
    return np.concatenate([outputs[f"logits_{i}"].reshape(-1) for i in range(chunks)])
