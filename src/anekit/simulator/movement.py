"""Load-time rewrites of pure data movement: a concat read only by a transpose becomes one
copy, and reshapes and slices between declared static shapes are plain views.

The emitter writes a wide final projection as several matmuls (engine size limits), a concat of
their results and a transpose back to [1, tokens, vocabulary]. Op by op that is a copy into
the concat's result, then a strided copy for the transpose: for GPT-2's 50257-word head two
13 MB buffers and a quarter of the head's time. Both ops only move values, so when the
concat's result is read by the transpose alone, the pair is one step that copies each input
straight to its place in the transposed result, in blocks that stay in the cache. Every
element ends where the two ops would have put it; nothing is computed or rounded.

Only programs whose shapes are static and consistent are rewritten: the inputs then have their
declared shapes, so the fused step cannot fail where the two ops would have failed with a
clearer message.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from anekit.formats.mil.types import MAX_TENSOR_ELEMENTS

from .execute import NO_SLOT, Step
from .ops._util import as_bool, as_int, as_ints

# Elements per copied block: the block of the source and of the result stay in the L2 cache.
_BLOCK = 1 << 16


def concat_transpose(values: tuple[np.ndarray, ...], axis: Any, perm: Any) -> np.ndarray:
    """``transpose(concat(values, axis), perm)`` copied in blocks along the concat axis."""
    ax, order = as_int(axis), as_ints(perm)
    first = values[0]
    ax = ax + first.ndim if ax < 0 else ax
    shape = list(first.shape)
    shape[ax] = sum(v.shape[ax] for v in values)
    out = np.empty([shape[p] for p in order], dtype=first.dtype)
    target = out.transpose(np.argsort(order))  # the concat's result, as a view of ``out``
    step = max(1, _BLOCK // max(1, math.prod(shape) // max(1, shape[ax])))
    start = 0
    for value in values:
        size = value.shape[ax]
        for offset in range(0, size, step):
            end = min(offset + step, size)
            index = (slice(None),) * ax + (slice(start + offset, start + end),)
            target[index] = value[(slice(None),) * ax + (slice(offset, end),)]
        start += size
    return out


def fuse_concat_transpose(
    steps: Sequence[Step], keep: Sequence[int], shapes: Mapping[int, tuple[int, ...] | None]
) -> list[Step]:
    """``steps`` with each transpose of a concat read by nothing else fused into one step;
    ``keep`` are the slots the function returns, ``shapes`` the static shape of every slot
    (None when it has symbols)."""
    readers: Counter[int] = Counter(keep)
    producer: dict[int, int] = {}
    for i, step in enumerate(steps):
        for _, slot in step.dynamic:
            readers[slot] += 1
        for _, items in step.variadic:
            for slot, _ in items:
                if slot != NO_SLOT:
                    readers[slot] += 1
        for e in step.outputs:
            producer[e.slot] = i
    fused: dict[int, Step] = {}  # transpose index -> fused step
    dropped: set[int] = set()  # concat indices
    for i, step in enumerate(steps):
        if step.op != "transpose" or len(step.dynamic) != 1 or "perm" not in step.known:
            continue
        slot = step.dynamic[0][1]
        c = producer.get(slot)
        if c is None or readers[slot] != 1 or not _fusable(steps[c], step, shapes):
            continue
        concat = steps[c]
        known = {"axis": concat.known["axis"], "perm": step.known["perm"]}
        fused[i] = replace(step, kernel=concat_transpose, known=known, dynamic=(),
                           variadic=concat.variadic)  # fmt: skip
        dropped.add(c)
    return [fused.get(i, s) for i, s in enumerate(steps) if i not in dropped]


def _fusable(concat: Step, transpose: Step, shapes: Mapping[int, tuple[int, ...] | None]) -> bool:
    """A plain concat (no interleave) and a transpose whose static shapes agree."""
    if concat.op != "concat" or len(concat.variadic) != 1 or "axis" not in concat.known:
        return False
    if as_bool(concat.known.get("interleave", False)):
        return False
    c, t = concat.outputs[0], transpose.outputs[0]
    if c.shape is None or t.shape is None or c.storage != t.storage:
        return False
    rank = len(c.shape)
    try:
        axis, perm = as_int(concat.known["axis"]), as_ints(transpose.known["perm"])
    except ValueError:
        return False
    if rank == 0 or not -rank <= axis < rank or sorted(perm) != list(range(rank)):
        return False
    axis %= rank
    if tuple(c.shape[p] for p in perm) != t.shape:
        return False
    parts = [
        tuple(np.shape(value)) if slot == NO_SLOT else shapes.get(slot)
        for slot, value in concat.variadic[0][1]
    ]
    if not parts or any(p is None or len(p) != rank for p in parts):
        return False
    others = {tuple(d for k, d in enumerate(p) if k != axis) for p in parts}  # type: ignore[arg-type]
    return (
        others == {tuple(d for k, d in enumerate(c.shape) if k != axis)}
        and sum(
            p[axis]
            for p in parts  # type: ignore[index]
        )
        == c.shape[axis]
    )


def static_views(steps: Sequence[Step], shapes: Mapping[int, Any]) -> list[Step]:
    """Reshapes and slices between declared static shapes take a value of the declared
    input shape as a view whose target shape or index is worked out once, at load (numpy
    would return the same view after the op's kernel worked it out from the arguments every
    run: half of a training step's steps are such reshapes and slices). Anything else
    still goes through the op's kernel: a value of another shape (which it refuses, naming
    it), a reshape of a strided value whose layout allows no view (which it copies), and
    arguments the kernel would refuse."""
    out = []
    for step in steps:
        single = step.outputs[0] if len(step.outputs) == 1 else None
        source = shapes.get(step.dynamic[0][1]) if len(step.dynamic) == 1 else None
        if (
            single is not None
            and single.shape is not None
            and source is not None
            and not step.variadic
            and step.dynamic[0][0] == "x"
        ):
            kernel = _static_view(step, tuple(source), tuple(single.shape))
            if kernel is not None:
                step = replace(step, kernel=kernel, known={})
        out.append(step)
    return out


def _static_view(step: Step, source: tuple[int, ...], target: tuple[int, ...]) -> Any:
    """The step's kernel for a value of shape ``source``, or None when it is not a view
    the op's own kernel agrees with. The probe has the source's shape and no memory."""
    general, known = step.kernel, dict(step.known)
    if math.prod(source) > MAX_TENSOR_ELEMENTS or math.prod(target) > MAX_TENSOR_ELEMENTS:
        return None  # a shape no tensor may have: the op's kernel refuses it when it runs
    probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), source, [0] * len(source))
    index_of = getattr(general, "index_of", None)
    try:
        if step.op == "reshape":
            if general(probe, **known).shape != target:
                return None
            return _reshape_view(general, known, source, target)
        if index_of is not None:
            index = index_of(probe, **known)
            if probe[index].shape != target:
                return None
            return _index_view(general, known, source, index)
    except Exception:  # noqa: BLE001 - any refusal: leave the step to the kernel
        return None
    return None


def _reshape_view(general: Any, known: dict[str, Any], source: tuple[int, ...],
                  target: tuple[int, ...]) -> Any:  # fmt: skip
    def reshape(x: np.ndarray) -> np.ndarray:
        if x.shape == source:
            if x.flags.c_contiguous:
                return x.reshape(target)
            try:  # a strided value: a view where its layout allows one, as the kernel does
                return x.reshape(target, copy=False)
            except (ValueError, TypeError):  # a copy (or numpy before 2.1): the kernel's
                pass
        return general(x, **known)

    return reshape


def _index_view(general: Any, known: dict[str, Any], source: tuple[int, ...], index: Any) -> Any:
    def sliced(x: np.ndarray) -> np.ndarray:
        if x.shape == source:
            return x[index]
        return general(x, **known)

    return sliced
