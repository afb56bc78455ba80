"""The training step as one graph: forward, loss, backward, gradient hygiene, update.

Inputs: the model's data inputs, ``target``, dropout masks, the per-step scalars
(learning rate, bias corrections, loss scale) and the state (parameters, optimizer slots,
running statistics). Outputs: ``loss``, ``overflow`` (0 when every gradient element is
finite, else NaN), ``grad_norm`` when clipping by it and, for every state input ``s``, its
next value ``s.next``. A session keeps each ``s.next`` for ``s`` on the engine (e5rt-reference section
2.5.1), so the state stays resident and the host feeds only the batch and the scalars.

Gradient hygiene (Orion section 7): the loss is multiplied by the loss scale before
differentiation and the gradients divided by it after. A NaN or infinite element of a
gradient, or of a parameter or optimizer slot the update would keep, makes ``overflow`` NaN, and the session, guarded by it, commits none of the step's next
values: every state value stays as it was (the host then halves the loss scale), as
torch's GradScaler skips such a step. The test is arithmetic on the engine (the peak
magnitude of each gradient times 0; when clipping, the global norm's own peak), so no
gradient leaves the engine for a CPU check and no blend runs over the state. Optional
clipping by global norm follows.

The update runs once per group of parameters joined into one tensor (train/flat.py), not
once per parameter: the same values, in fewer ops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from anekit.errors import ModelError
from anekit.ir.dtypes import FP16_MAX
from anekit.ir.graph import Graph, Value
from anekit.train import flat
from anekit.train.autograd import backprop
from anekit.train.emit import Emitter
from anekit.train.modes import (
    batch_statistics,
    clamp_for_fp16,
    convs_as_matmuls,
    explicit_ranks,
)
from anekit.train.optim import TINY, Optimizer

TARGET = "target"
LOSS, OVERFLOW, GRAD_NORM = "loss", "overflow", "grad_norm"
NONFINITE_PREFIX = "nonfinite/"  # the outputs of build_step(counts_only=True)


def next_name(state: str) -> str:
    return f"{state}.next"


def slot_name(param: str, slot: str) -> str:
    return f"{param}.{slot}"


@dataclass(frozen=True)
class StepGraph:
    graph: Graph
    params: tuple[str, ...]
    state: Mapping[str, str]  # state input -> the output that becomes its next value
    buffers: tuple[str, ...]  # running statistics (state, not trained)
    data_inputs: tuple[str, ...]  # model inputs, the target, dropout masks
    scalars: tuple[str, ...]

    def initial_state(self, model: Graph, optimizer: Optimizer) -> dict[str, np.ndarray]:
        out = {}
        for name in self.state:
            if name in model.constants:
                out[name] = np.array(model.constants[name], dtype=np.float32)
            else:  # an optimizer slot starts at zero
                out[name] = np.zeros(self.graph.values[name].shape, np.float32)
        return out


def build_step(
    model: Graph,
    loss_fn: Callable[[Emitter, str, str], str],
    optimizer: Optimizer,
    params: Sequence[str],
    target: Value,
    *,
    max_grad_norm: float | None = None,
    fp16: bool = False,
    flat_update: bool = True,
    counts_only: bool = False,
) -> StepGraph:
    """The step's graph; with ``counts_only`` instead, its forward and backward with one
    output per parameter, ``nonfinite/<param>``: how many of its gradient elements are NaN
    or infinite (an int32 sum on the CPU; the engine has no booleans). The trainer runs it
    on the rare step the overflow guard discards, to say where the overflow was."""
    if len(model.outputs) != 1:
        raise ModelError(
            f"the model has {len(model.outputs)} outputs; the built-in losses need exactly one",
            hint="pass a loss callable, or a model with one output",
        )
    model, buffer_updates = batch_statistics(convs_as_matmuls(clamp_for_fp16(model), params))
    output = model.output_names[0]
    ed = model.edit()
    e = Emitter(ed, prefix="step")
    data_inputs = [v.name for v in model.inputs]
    state_inputs = [*params, *buffer_updates]
    for name in state_inputs:  # constants become state inputs
        del ed.constants[name]
        ed.inputs.append(ed.values[name])
    model = explicit_ranks(ed.build(), state_inputs)
    ed = model.edit()
    e = Emitter(ed, prefix="step")
    ed.declare_value(TARGET, target.shape, target.dtype)
    ed.inputs.append(ed.values[TARGET])
    data_inputs.append(TARGET)
    scalar_names = ["loss_scale", "inv_loss_scale", *optimizer.scalars(1)]
    scalars = {}
    for s in scalar_names:
        ed.declare_value(s, (1,), "fp32")  # rank 1: scalars cross segment boundaries as [1]
        ed.inputs.append(ed.values[s])
        scalars[s] = s
    loss = loss_fn(e, output, TARGET)
    if ed.values[loss].numel != 1:
        raise ModelError(f"the loss must be a scalar, got shape {list(ed.values[loss].shape)}")
    loss = e.reshape(loss, (1,))
    scaled = e.mul(loss, scalars["loss_scale"])
    grads = backprop(e, ed.nodes, scaled, params)

    missing = [p for p in params if grads.get(p) is None]
    if missing:
        raise ModelError(f"the loss does not depend on the parameter '{missing[0]}'",
                         hint="freeze it (freeze= name patterns)")  # fmt: skip
    if counts_only:
        counts = {NONFINITE_PREFIX + p: _nonfinite_count(e, grads[p]) for p in params}
        return _finish(e, counts, {}, params, buffer_updates, data_inputs, scalar_names)
    clean, views = {}, {}
    for p in params:
        g = grads[p]
        views[p] = _update_view(e.shape(p))
        inv_scale = _ranked(e, scalars["inv_loss_scale"], len(views[p]))
        clean[p] = e.mul(e.reshape(g, views[p]), inv_scale)
    # 0 when every element is finite, else NaN (NaN * 0 and inf * 0 are NaN): one number
    # guards the step; the engine has no booleans, and needs none here
    zeros = [e.mul(_peak(e, g), e.scalar(0.0, g)) for g in clean.values()]
    factor = norm = None
    if max_grad_norm is not None:
        norm = _global_norm(e, list(clean.values()))
        factor = e("minimum", e.scalar(1.0, norm),
                   e.div(e.scalar(max_grad_norm, norm), e.add(norm, e.scalar(1e-6, norm))))  # fmt: skip

    next_values: dict[str, str] = {}
    slot_names = optimizer.slots_for(fp16)
    for p in params:
        for s in slot_names:
            ed.declare_value(slot_name(p, s), e.shape(p), ed.values[p].dtype)
            ed.inputs.append(ed.values[slot_name(p, s)])
    for group in flat.groups({p: e.shape(p) for p in params}, _update_view, flat_update):
        members, rank = group.params, len(group.views[0])
        here = {k: _ranked(e, v, rank) for k, v in scalars.items()}
        g = _join(e, [clean[p] for p in members], group)
        if factor is not None:
            g = e.mul(g, _ranked(e, factor, rank))
        state = {s: _join(e, [slot_name(p, s) for p in members], group) for s in slot_names}
        old = _join(e, members, group)
        new_p, new_slots = optimizer.update(e, old, g, state, here, fp16)
        results = {None: new_p, **new_slots}  # None: the parameters themselves
        # the guard covers what the step would keep, not only the gradients: finite
        # gradients can still make a non-finite update (an epsilon that rounds to 0)
        zeros += [e.mul(_peak(e, v), e.scalar(0.0, v)) for v in results.values()]
        for s, v in results.items():
            for p, part in zip(members, _split(e, v, group), strict=True):
                next_values[p if s is None else slot_name(p, s)] = e.reshape(part, e.shape(p))
    for stat, update in buffer_updates.items():
        next_values[stat] = update
    overflow = e.reshape(e.accumulate(zeros), (1,))

    outs = {LOSS: loss, OVERFLOW: overflow}
    if norm is not None:  # computed for the clipping; not worth its passes otherwise
        outs[GRAD_NORM] = norm
    return _finish(e, outs, next_values, params, buffer_updates, data_inputs, scalar_names)


def _finish(e: Emitter, outs: Mapping[str, str], next_values: Mapping[str, str],
            params: Sequence[str], buffers: Mapping[str, str], data_inputs: Sequence[str],
            scalars: Sequence[str]) -> StepGraph:  # fmt: skip
    """The graph with ``outs`` and each state's next value as named outputs."""
    e.outputs({**outs, **{next_name(s): v for s, v in next_values.items()}})
    return StepGraph(
        graph=e.ed.build(),
        params=tuple(params),
        state={s: next_name(s) for s in next_values},
        buffers=tuple(buffers),
        data_inputs=tuple(data_inputs),
        scalars=tuple(scalars),
    )


def _nonfinite_count(e: Emitter, g: str) -> str:
    """How many elements of ``g`` are NaN or infinite, as a [1] int32 (exact past fp16)."""
    bad = e("or", e("isnan", g), e("isinf", g))
    return e.reshape(e("reduce_sum", e("cast", bad, to="int32"), keepdims=False), (1,))


def update_ops(graph: Graph, state: Sequence[str]) -> list[str]:
    """The ops (a fused layer's main op) of a compiled step graph's optimizer update: the
    nodes downstream of an optimizer slot (a state value that is not a model constant),
    which only the update reads."""
    reached = {s for s in state if s in graph.values and s not in graph.constants and "." in s}
    ops = []
    for node in graph.nodes:  # in order: a node's inputs come before it
        if any(i in reached for i in node.inputs):
            reached.update(node.outputs)
            ops.append(node.attrs.get("main", node.op))
    return ops


def _update_view(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape a parameter's update runs in. The update is elementwise, so any view
    computes the same numbers; a matrix [.., S, C] in its own shape would go to the
    engine's layout [1, C, 1, S], a transpose in and out for the parameter, its gradient
    and each optimizer slot every step. As [1, S, 1, C] (a reshape, no data moves) it is
    in an engine form already."""
    if len(shape) in (2, 3) and shape[-1] > 1 and shape[-2] > 1:
        return (1, int(np.prod(shape[:-1])), 1, shape[-1])
    return shape


def _join(e: Emitter, names: Sequence[str], group: flat.Group) -> str:
    """The members' values (gradients, parameters or one slot) as the group's one tensor."""
    parts = [e.reshape(n, v) for n, v in zip(names, group.views, strict=True)]
    return e("concat", *parts, axis=group.axis) if group.joined else parts[0]


def _split(e: Emitter, joined: str, group: flat.Group) -> tuple[str, ...]:
    """A joined group's value cut back into its members' views."""
    if not group.joined:
        return (joined,)
    return e.multi("split", [joined], axis=group.axis, sizes=group.sizes)


def _ranked(e: Emitter, scalar: str, rank: int) -> str:
    """A [1] scalar at ``rank`` (one reshape per scalar and rank, shared)."""
    shape = (1,) * rank
    if e.shape(scalar) == shape:
        return scalar
    found = e.ed.values.get(f"{scalar}.rank{rank}")
    if found is None:
        (out,) = e.ed.add("reshape", [scalar], {"shape": shape}, outputs=[f"{scalar}.rank{rank}"],
                          name=f"{scalar}.rank{rank}")  # fmt: skip
        return out
    return found.name


def _peak(e: Emitter, g: str) -> str:
    """max |g| over every axis, kept as [1, ..]: NaN when any element is NaN, infinite when
    any is, else finite. The same reduction as the fp16-safe L2 norm's peak
    (passes/decompose), so with clipping the compiler computes it once for both."""
    return e("reduce_max", e("abs", g), keepdims=True)


def _global_norm(e: Emitter, grads: list[str]) -> str:
    """sqrt(sum of squares) over all gradients, scaled by the largest per-tensor norm so
    that no square overflows fp16. The scale is clipped to [fp16's smallest subnormal,
    65504]: all-zero gradients give 0, not 0 / 0 = NaN (an epsilon below fp16's range
    rounds to 0), and a per-tensor norm beyond fp16's range (finite gradients, an
    infinite norm) gives an infinite norm, not inf / inf = NaN."""
    norms = [e.reshape(e("reduce_l2", g, keepdims=False), (1,)) for g in grads]
    top = norms[0]
    for n in norms[1:]:
        top = e("maximum", top, n)
    top = e("clip", top, min=TINY, max=FP16_MAX)
    total = e.accumulate([e.mul(e.div(n, top), e.div(n, top)) for n in norms])
    return e.mul(top, e("sqrt", total))
