"""Core ML state (iOS 18) on the simulator: functions with ``state<tensor<fp16, [...]>>``
inputs, ``read_state`` and ``coreml_update_state``.

A state is a buffer the caller keeps between calls (Core ML's ``MLState``). The simulator
runs values, not buffers, so a stateful function is rewritten once at load into a plain one
with the same arithmetic: each state becomes an input of its wrapped tensor type,
``read_state`` an ``identity`` of the state's latest value, ``coreml_update_state(state,
value)`` an ``identity`` of ``value`` that becomes the state's latest value (so a later
``read_state`` in the same call sees the write, as in Core ML), and each written state's
last value an extra output. :class:`StatefulProgram` feeds the caller's state in and writes
the updates back after the call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from anekit.errors import FormatError, InputError
from anekit.formats.mil import (
    Binding,
    Function,
    MilProgram,
    MilTensorType,
    Operation,
    StateType,
    Var,
)

from .program import SimProgram
from .values import STORAGE

STATE_OPS = ("read_state", "coreml_update_state")


def without_states(function: Function) -> tuple[Function, dict[str, MilTensorType], dict[str, str]]:
    """The plain twin of ``function``, its states (name -> wrapped type) and, per written
    state, the output that holds its new value."""
    states: dict[str, MilTensorType] = {}
    inputs = []
    for b in function.inputs:
        if isinstance(b.type, StateType):
            wrapped = b.type.wrapped
            if not isinstance(wrapped, MilTensorType) or wrapped.dtype != "fp16":
                raise FormatError(f"state '{b.name}' is {b.type}; Core ML states hold fp16 tensors")
            states[b.name] = wrapped
            inputs.append(Binding(b.name, wrapped))
        else:
            inputs.append(b)
    latest = {name: name for name in states}
    operations = []
    for op in function.operations:
        if op.op not in STATE_OPS:
            used = [v for v in op.variables() if v in states]
            if used:
                raise FormatError(f"'{op.name}' ({op.op}) reads the state '{used[0]}' directly; "
                                  "only read_state and coreml_update_state may")  # fmt: skip
            operations.append(op)
            continue
        state = op.input("input" if op.op == "read_state" else "state")
        if not isinstance(state, Var) or state.name not in states:
            raise FormatError(f"'{op.name}' ({op.op}) does not name a state input")
        source = latest[state.name] if op.op == "read_state" else op.input("value")
        if isinstance(source, str):
            source = Var(source)
        operations.append(Operation("identity", op.outputs, (("x", source),), op.attributes))
        if op.op == "coreml_update_state":
            latest[state.name] = op.outputs[0].name
    updates = {s: v for s, v in latest.items() if v != s}
    extra = tuple(v for v in updates.values() if v not in function.outputs)
    plain = replace(function, inputs=tuple(inputs), operations=tuple(operations),
                    outputs=function.outputs + extra)  # fmt: skip
    return plain, states, updates


class StatefulProgram:
    """One function of a MIL program, states included, ready to run on the simulator.

    ``new_state()`` gives zeroed states (Core ML's ``makeState``); ``run(feeds, state)``
    runs one call, replacing the written states' arrays in ``state`` in place.
    """

    def __init__(self, program: MilProgram, base_dir: str | os.PathLike[str] | None = None, *,
                 function: str = "main", where: str | None = None):  # fmt: skip
        original = program.function(function)
        plain, self.states, self.updates = without_states(original)
        others = tuple(f for f in program.functions if f.name != function)
        self.sim = SimProgram(replace(program, functions=(plain, *others)), base_dir,
                              function=function, where=where)  # fmt: skip
        self.outputs = original.outputs
        self.inputs = tuple(b.name for b in original.inputs if b.name not in self.states)

    def new_state(self) -> dict[str, np.ndarray]:
        """Every state zeroed, in the simulator's storage form (float32 holding fp16)."""
        return {name: np.zeros(t.shape, STORAGE["fp16"]) for name, t in self.states.items()}  # type: ignore[arg-type]

    def run(self, feeds: Mapping[str, Any], state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [name for name in self.states if name not in state]
        if missing:
            raise InputError(f"the state {missing} is not given", hint="use new_state()")
        clash = [name for name in feeds if name in self.states]
        if clash:
            raise InputError(f"'{clash[0]}' is a state; pass it in the state, not the feeds")
        out = self.sim.run({**feeds, **{n: state[n] for n in self.states}}, fp32_outputs=True)
        for name, value in self.updates.items():
            state[name] = out[value].copy() if value in self.outputs else out.pop(value)
        return {name: out[name] for name in self.outputs}
