"""Optimizers as graph builders: each emits its update into the step graph, so the update
runs inside the step program and its state (momentum, moments) is session state.

The host feeds per-step scalars (``scalars(step)``): the learning rate from the schedule
and, for Adam, the bias corrections. Updates follow torch.optim exactly (SGD with
momentum/dampening/nesterov/weight decay; Adam with L2 weight decay; AdamW with decoupled
weight decay).

fp16 (engine segments): Adam's second moment of a gradient of 1e-4 is 1e-8, below fp16's
smallest subnormal (6e-8), and eps = 1e-8 is itself zero in fp16, so a plain fp16 Adam
divides by zero. With ``fp16=True`` the program stores the root of the second moment,
s = sqrt(v), which has the gradient's own range, and updates it as a scaled hypotenuse,
s' = M sqrt(b2 (s/M)^2 + (1 - b2) (g/M)^2) with M = max(s, |g|), whose squares lie in
[0, 1]; eps is at least 2^-24 (fp16's smallest subnormal). With ``fp16=False`` the update
is torch's, operation for operation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from anekit.errors import InputError
from anekit.train import schedules
from anekit.train.emit import Emitter

TINY = 2.0**-24  # fp16's smallest subnormal


@dataclass
class Optimizer:
    lr: float | object = 1e-3
    weight_decay: float = 0.0
    schedule: object = field(init=False, repr=False)

    kind: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.schedule = schedules.as_schedule(self.lr)
        self.weight_decay = schedules.rate(self.weight_decay, "weight_decay")

    def scalars(self, step: int) -> dict[str, float]:
        """Host-computed scalar inputs for (1-based) step ``step``."""
        return {"lr": float(self.schedule(step))}

    def slots_for(self, fp16: bool) -> tuple[str, ...]:
        """The state kept per parameter (names of the slots)."""
        return ()

    def update(self, e: Emitter, p: str, g: str, state: Mapping[str, str],
               scalars: Mapping[str, str], fp16: bool) -> tuple[str, dict[str, str]]:  # fmt: skip
        raise NotImplementedError

    def config(self) -> dict:
        fields = {k: v for k, v in vars(self).items() if k not in ("lr", "schedule", "kind")}
        return {"kind": self.kind, "schedule": schedules.describe(self.schedule), **fields}


@dataclass
class SGD(Optimizer):
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.momentum = schedules.rate(self.momentum, "momentum")
        self.dampening = schedules.rate(self.dampening, "dampening", high=1.0)
        self.kind = "sgd"

    def slots_for(self, fp16: bool) -> tuple[str, ...]:
        return ("momentum",) if self.momentum else ()

    def update(self, e, p, g, state, scalars, fp16):
        new_state = {}
        if self.weight_decay:
            g = e.add(g, e.scale(p, self.weight_decay))
        if self.momentum:
            buf = e.add(e.scale(state["momentum"], self.momentum), e.scale(g, 1.0 - self.dampening))
            new_state["momentum"] = buf
            g = e.add(g, e.scale(buf, self.momentum)) if self.nesterov else buf
        return e.sub(p, e.mul(g, scalars["lr"])), new_state


@dataclass
class Adam(Optimizer):
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    decoupled: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.betas, tuple | list) or len(self.betas) != 2:
            raise InputError(f"Adam's betas must be two numbers, not {self.betas!r}")
        self.betas = tuple(schedules.rate(b, "an Adam beta", high=1.0, open_high=True)
                           for b in self.betas)  # fmt: skip
        self.eps = schedules.rate(self.eps, "Adam's eps", open_low=True)
        self.kind = "adamw" if self.decoupled else "adam"

    def slots_for(self, fp16: bool) -> tuple[str, ...]:
        return ("m", "v_sqrt" if fp16 else "v")

    def scalars(self, step: int) -> dict[str, float]:
        b1, b2 = self.betas
        lr = float(self.schedule(step))
        return {"lr": lr, "step_size": lr / (1.0 - b1**step),
                "bc2_sqrt": math.sqrt(1.0 - b2**step)}  # fmt: skip

    def update(self, e, p, g, state, scalars, fp16):
        b1, b2 = self.betas
        if self.weight_decay and not self.decoupled:
            g = e.add(g, e.scale(p, self.weight_decay))
        m = e.add(e.scale(state["m"], b1), e.scale(g, 1.0 - b1))
        if fp16:
            s = state["v_sqrt"]
            top = e.add(e("maximum", s, e("abs", g)), e.scalar(TINY, p))
            rs, rg = e.div(s, top), e.div(g, top)
            mix = e.add(e.scale(e.mul(rs, rs), b2), e.scale(e.mul(rg, rg), 1.0 - b2))
            second = e.mul(top, e("sqrt", mix))
            new_state = {"m": m, "v_sqrt": second}
            eps = max(self.eps, TINY)
        else:
            second = e.add(e.scale(state["v"], b2), e.scale(e.mul(g, g), 1.0 - b2))
            new_state = {"m": m, "v": second}
            second, eps = e("sqrt", second), self.eps
        denom = e.add(e.div(second, scalars["bc2_sqrt"]), e.scalar(eps, p))
        step = e.mul(e.div(m, denom), scalars["step_size"])
        if self.weight_decay and self.decoupled:
            p = e.sub(p, e.mul(e.scale(p, self.weight_decay), scalars["lr"]))
        return e.sub(p, step), new_state


def AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2) -> Adam:  # noqa: N802
    """Adam with decoupled weight decay (torch.optim.AdamW)."""
    return Adam(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, decoupled=True)


def from_config(config: Mapping) -> Optimizer:
    """Rebuild an optimizer from `Optimizer.config()` (checkpoints)."""
    sched = config["schedule"]
    if sched["kind"] == "constant":
        lr = sched["lr"]
    elif sched["kind"] == "warmup_cosine":
        lr = schedules.warmup_cosine(sched["lr"], sched["total"], sched["warmup"], sched["min_lr"])
    else:
        raise ValueError(f"the schedule '{sched.get('name')}' is a Python callable; pass it again")
    fields = {k: v for k, v in config.items() if k not in ("kind", "schedule")}
    if config["kind"] == "sgd":
        return SGD(lr=lr, **fields)
    return Adam(lr=lr, **{k: tuple(v) if k == "betas" else v for k, v in fields.items()})
