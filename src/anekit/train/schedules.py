"""Learning-rate schedules: a step number (1-based) -> learning rate, computed on the host
and fed to the step program as a scalar input each step."""

from __future__ import annotations

import math
from dataclasses import dataclass


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
    return WarmupCosine(lr, total, warmup, min_lr)


def as_schedule(lr) -> object:
    return lr if callable(lr) else Constant(float(lr))


def describe(schedule) -> dict:
    """JSON form (checkpoints record the schedule with the optimizer)."""
    if isinstance(schedule, Constant):
        return {"kind": "constant", "lr": schedule.lr}
    if isinstance(schedule, WarmupCosine):
        return {"kind": "warmup_cosine", "lr": schedule.lr, "total": schedule.total,
                "warmup": schedule.warmup, "min_lr": schedule.min_lr}  # fmt: skip
    return {"kind": "callable", "name": getattr(schedule, "__name__", type(schedule).__name__)}
