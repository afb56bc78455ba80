"""Learning-rate schedules: a step number (1-based) -> learning rate, computed on the host
and fed to the step program as a scalar input each step."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from anekit.errors import InputError


@dataclass(frozen=True)
class Constant:
    lr: float

    def __call__(self, step: int) -> float:
        return self.lr


@dataclass(frozen=True)
class WarmupCosine:
    """Linear warmup over ``warmup`` steps, then cosine decay to ``min_lr`` at ``total``."""

    lr: float
    total: int
    warmup: int = 0
    min_lr: float = 0.0

    def __call__(self, step: int) -> float:
        if self.warmup and step <= self.warmup:
            return self.lr * step / self.warmup
        span = max(1, self.total - self.warmup)
        t = min(1.0, (step - self.warmup) / span)
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1.0 + math.cos(math.pi * t))


def warmup_cosine(lr: float, total: int, warmup: int = 0, min_lr: float = 0.0) -> WarmupCosine:
    for name, count in (("total", total), ("warmup", warmup)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InputError(f"warmup_cosine's {name} must be a count of steps, not {count!r}")
    return WarmupCosine(rate(lr, "the learning rate"), total, warmup, rate(min_lr, "min_lr"))


def as_schedule(lr) -> object:
    return lr if callable(lr) else Constant(rate(lr, "the learning rate"))


def rate(value, what: str, *, low: float = 0.0, high: float = float(np.finfo(np.float32).max),
         open_low: bool = False, open_high: bool = False) -> float:  # fmt: skip
    """``value`` as a finite float in [low, high] (or open at an end): hyperparameters a
    NaN or a sign error would silently ruin."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InputError(f"{what} must be a number, not {value!r}")
    v = float(value)
    below = v <= low if open_low else v < low
    above = v >= high if open_high else v > high
    if not math.isfinite(v) or below or above:
        lo, hi = "(" if open_low else "[", ")" if open_high else "]"
        raise InputError(f"{what} must be a finite number in {lo}{low:g}, {high:g}{hi}, not {value!r}")
    return v


def describe(schedule) -> dict:
    """JSON form (checkpoints record the schedule with the optimizer)."""
    if isinstance(schedule, Constant):
        return {"kind": "constant", "lr": schedule.lr}
    if isinstance(schedule, WarmupCosine):
        return {"kind": "warmup_cosine", "lr": schedule.lr, "total": schedule.total,
                "warmup": schedule.warmup, "min_lr": schedule.min_lr}  # fmt: skip
    return {"kind": "callable", "name": getattr(schedule, "__name__", type(schedule).__name__)}
