"""Load-time kernels for one input shape: an op whose kernel has a ``prepare`` function, with
static input shapes, runs a kernel that has worked out once what the general one works out
on every call (a convolution's padding, output sizes, weight matrix and code path).

``kernel.prepare(known, shapes)`` gets the step's known arguments and the static shape of
each runtime argument by name; it returns a kernel taking the runtime arguments by those
names (positionally, in any order the run loop finds from its signature), or None to keep
the general kernel. A prepared kernel computes exactly what the general one computes for
those shapes: the same operations in the same order, so the bits are the same.

A ``prepare`` marked ``rounds`` also takes ``rounded=True`` for a step whose one result is
rounded to fp16: its kernel then returns the rounded values (rounding each tile of a
convolution while it is in cache), and the step's output is marked as not to be rounded
again by the run loop (a pass over a large result: 7 ms of PicoDet's run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .execute import Step


def prepare_steps(steps: Sequence[Step], shapes: Mapping[int, Any]) -> list[Step]:
    """``steps`` with each preparable step's kernel replaced by its prepared kernel."""
    out = []
    for step in steps:
        prepare = getattr(step.kernel, "prepare", None)
        if prepare is not None and not step.variadic and step.dynamic:
            dynamic = {key: shapes.get(slot) for key, slot in step.dynamic}
            if all(shape is not None for shape in dynamic.values()):
                known, static = dict(step.known), {k: tuple(v) for k, v in dynamic.items()}
                (e, *more) = step.outputs
                if getattr(prepare, "rounds", False) and e.round and not more:
                    kernel = prepare(known, static, True)
                    if kernel is not None:
                        step = replace(step, kernel=kernel, known={},
                                       outputs=(replace(e, round=False),))  # fmt: skip
                else:
                    kernel = prepare(known, static)
                    if kernel is not None:
                        step = replace(step, kernel=kernel, known={})
        out.append(step)
    return out
