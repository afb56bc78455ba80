"""Choosing the next token from logits on the host: greedy, temperature, top-k, top-p
(nucleus) and the repetition penalty, from a seeded generator."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from anekit.errors import InputError


@dataclass(frozen=True)
class SamplingOptions:
    """``temperature`` 0 means greedy (argmax). ``top_k`` 0 and ``top_p`` 1 keep every token;
    ``repetition_penalty`` > 1 discourages tokens already in the sequence (as transformers
    does: a positive logit is divided by it, a negative one multiplied)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "repetition_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
                raise InputError(f"{name} must be a number, got {value!r}")
        for name in ("top_k", "seed"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | np.integer)):
                raise InputError(f"{name} must be an integer, got {value!r}")
        if self.top_k is None:
            raise InputError("top_k must be an integer (0 keeps every token), got None")
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise InputError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise InputError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p}")
        if not np.isfinite(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise InputError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise InputError(f"seed must be an integer in [0, 2**63), got {self.seed}")


class Sampler:
    def __init__(self, options: SamplingOptions):
        self.options = options
        self._rng = np.random.default_rng(options.seed)

    def adjust(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """The logits after the repetition penalty and temperature (float64)."""
        o = self.options
        x = np.array(logits, dtype=np.float64)
        if o.repetition_penalty != 1.0 and len(history):
            seen = np.unique(np.asarray(history, dtype=np.int64))
            vals = x[seen]
            x[seen] = np.where(vals > 0, vals / o.repetition_penalty, vals * o.repetition_penalty)
        if o.temperature > 0:
            x /= o.temperature
        return x

    def __call__(self, logits: np.ndarray, history: Sequence[int]) -> int:
        o = self.options
        x = self.adjust(logits, history)
        if o.temperature == 0:
            return int(np.argmax(x))
        order = np.argsort(-x, kind="stable")
        if o.top_k:
            order = order[: o.top_k]
        probs = np.exp(x[order] - x[order[0]])
        probs /= probs.sum()
        if o.top_p < 1.0:
            # keep the smallest prefix whose mass reaches top_p (at least one token)
            keep = int(np.searchsorted(np.cumsum(probs), o.top_p) + 1)
            order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
        return int(order[self._rng.choice(len(order), p=probs)])
