"""Losses appended to a model graph: `loss(e, output, target) -> loss value name`.

`cross_entropy` takes integer class labels (any shape; the logits add a class axis last)
or class probabilities shaped like the logits; `mse` takes a target shaped like the
output. Both return the mean over examples, shaped [1] (rank-0 values are avoided in step
programs: segment boundaries carry scalars as [1]). The logits are clamped to the
fp16 range first (Orion section 7.2: one overflowed activation turns softmax and the
loss to NaN).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from anekit.errors import ModelError
from anekit.ir.dtypes import FP16_MAX
from anekit.train.emit import Emitter

LossFn = Callable[[Emitter, str, str], str]


def cross_entropy(e: Emitter, logits: str, target: str) -> str:
    shape = e.shape(logits)
    classes = shape[-1]
    rows = int(np.prod(shape[:-1]))
    tv = e.ed.values[target]
    if tv.dtype.is_float:
        if tv.shape != shape:
            raise ModelError(
                f"cross_entropy: probability targets must be shaped like the logits "
                f"{list(shape)}, got {list(tv.shape)}"
            )
        probs = e.reshape(target, (rows, classes))
    else:
        if tv.shape != shape[:-1]:
            raise ModelError(
                f"cross_entropy: class labels must have the logits' shape without the class "
                f"axis, {list(shape[:-1])}, got {list(tv.shape)}"
            )
        values = e.const(np.array([0.0, 1.0], e.ed.values[logits].dtype.numpy), hint="onehot")
        labels = e.reshape(target, (rows,))
        probs = e("one_hot", labels, values, depth=classes, axis=-1)
    z = e.reshape(e("clip", logits, min=-FP16_MAX, max=FP16_MAX), (rows, classes))
    picked = e("reduce_sum", e.mul(probs, e("log_softmax", z, axis=-1)), axes=(1,), keepdims=True)
    return e.reshape(e.neg(e("reduce_mean", picked, axes=(0,), keepdims=True)), (1,))


def mse(e: Emitter, output: str, target: str) -> str:
    if e.shape(target) != e.shape(output):
        raise ModelError(
            f"mse: the target must be shaped like the output {list(e.shape(output))}, "
            f"got {list(e.shape(target))}"
        )
    diff = e.sub(output, target)
    return e.reshape(e("reduce_mean", e.mul(diff, diff), keepdims=True), (1,))


LOSSES: dict[str, LossFn] = {"cross_entropy": cross_entropy, "mse": mse}


def resolve(loss: str | LossFn) -> LossFn:
    if callable(loss):
        return loss
    try:
        return LOSSES[loss]
    except KeyError:
        raise ModelError(
            f"unknown loss '{loss}'", hint=f"use one of {sorted(LOSSES)} or a callable"
        ) from None
