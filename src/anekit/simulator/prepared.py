"""Load-time kernels for one input shape: an op whose kernel has a ``prepare`` function, with
static input shapes, runs a kernel that has worked out once what the general one works out
on every call (a convolution's padding, output sizes, weight matrix and code path).

``kernel.prepare(known, shapes)`` gets the step's known arguments and the static shape of
each runtime argument by name; it returns a kernel taking the runtime arguments by those
names (positionally, in any order the run loop finds from its signature), or None to keep
the general kernel. A prepared kernel computes exactly what the general one computes for
those shapes: the same operations in the same order, so the bits are the same.

An op with one variadic argument (concat) has ``kernel.prepare_spread(known, shapes)``
instead (the static shapes of the argument's values, in order): it returns a kernel of the
tuple of values, and the step then takes them one by one (:class:`Spread`), so that the run
loop calls it positionally (in C, ``_native.run_steps``).

A ``prepare`` marked ``rounds`` also takes ``rounded=True`` for a step whose one result is
rounded to fp16: its kernel then returns the rounded values (rounding each tile of a
convolution while it is in cache: a third less than the run loop's pass over the whole
result), and the step's output is marked as not to be rounded again by the run loop.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .execute import NO_SLOT, RUN_ARGS, Step


def prepare_steps(steps: Sequence[Step], shapes: Mapping[int, Any]) -> list[Step]:
    """``steps`` with each preparable step's kernel replaced by its prepared kernel."""
    out = []
    for step in steps:
        prepare = getattr(step.kernel, "prepare", None)
        if prepare is not None and not step.variadic and step.dynamic:
            dynamic = {key: shapes.get(slot) for key, slot in step.dynamic}
            if all(shape is not None for shape in dynamic.values()):
                known, static = dict(step.known), {k: tuple(v) for k, v in dynamic.items()}
                e = step.outputs[0] if len(step.outputs) == 1 else None
                if getattr(prepare, "rounds", False) and e is not None and e.round:
                    kernel = prepare(known, static, True)
                    if kernel is not None:
                        step = replace(step, kernel=kernel, known={},
                                       outputs=(replace(e, round=False),))  # fmt: skip
                else:
                    kernel = prepare(known, static)
                    if kernel is not None:
                        step = replace(step, kernel=kernel, known={})
        elif step.variadic:
            step = _spread(step, shapes)
        out.append(step)
    return out


class Spread:
    """A prepared kernel of an op with one variadic argument (concat's ``values``), taking
    its values one by one as parameters ``values0``, ``values1``, ...: the run loop then
    calls it positionally, as it calls other kernels, without a tuple of values built for
    each call."""

    def __init__(self, run: Callable[[tuple[Any, ...]], Any], names: tuple[str, ...]):
        self.run = run
        self.names = names
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        self.__signature__ = inspect.Signature([inspect.Parameter(n, kind) for n in names])

    def __call__(self, *values: Any, **named: Any) -> Any:
        return self.run((*values, *(named[n] for n in self.names[len(values) :])))


def _spread(step: Step, shapes: Mapping[int, Any]) -> Step:
    """``step`` with its variadic argument spread out, where its kernel's
    ``prepare_spread(known, shapes)`` (the known arguments, each value's static shape)
    returns a kernel of the tuple of values; else ``step`` as it is."""
    prepare = getattr(step.kernel, "prepare_spread", None)
    if prepare is None or len(step.variadic) != 1 or step.dynamic:
        return step
    key, items = step.variadic[0]
    if not 1 <= len(items) <= RUN_ARGS:  # more: the C loop would not take them
        return step
    each = [np.shape(value) if slot == NO_SLOT else shapes.get(slot) for slot, value in items]
    if any(shape is None for shape in each):
        return step
    run = prepare(dict(step.known), tuple(tuple(shape) for shape in each))
    if run is None:
        return step
    names = tuple(f"{key}{i}" for i in range(len(items)))
    known = {n: value for n, (slot, value) in zip(names, items, strict=True) if slot == NO_SLOT}
    dynamic = tuple((n, slot) for n, (slot, _) in zip(names, items, strict=True) if slot != NO_SLOT)
    return replace(step, kernel=Spread(run, names), known=known, dynamic=dynamic, variadic=())
