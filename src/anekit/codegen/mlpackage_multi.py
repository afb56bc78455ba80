"""Stateful multifunction Core ML packages: several compiled programs as the functions of one
``.mlpackage`` that share one weight file, with named inputs and outputs rerouted to Core ML
state (iOS 18).

Each function is a compiled program (`anekit.runtime.Program`) replayed through coremltools'
pymil builder (`anekit.codegen.mlpackage.replay_segments`). A program input listed in
``reads`` is not a function input: it is ``read_state`` of the named state. A program output
listed in ``writes`` is not a function output: it is cast to fp16, padded with zeros (or cut)
along its last axis to the state's length and written with ``coreml_update_state``. Every
function declares every state of the package, so one Core ML state object serves them all
(what an app passes to each prediction).

Weights are shared across functions by coremltools' own cross-function deduplication (each
identical constant gets one ``weight_id``, so it is stored once in ``weight.bin``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anekit.codegen.mlpackage import (
    IO_DTYPE,
    Replay,
    opset_target,
    quiet_coremltools,
    replay_segments,
)
from anekit.codegen.names import Namer
from anekit.errors import AnekitError
from anekit.formats.blob import BlobReader

STATE_DTYPE = "fp16"  # Core ML states hold fp16 tensors only
MIN_STATE_OPSET = 18  # read_state / coreml_update_state and multifunction packages: iOS 18


@dataclass(frozen=True)
class StateSpec:
    """One Core ML state: an fp16 tensor the app keeps between predictions."""

    name: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class FunctionSpec:
    """One function of a package: a compiled program and which of its inputs come from state
    and which of its outputs go to state (program port name -> state name)."""

    name: str
    program: (
        Any  # anekit.runtime.Program (manifest, MIL programs, weights), or a callable making it
    )
    reads: Mapping[str, str] = field(default_factory=dict)
    writes: Mapping[str, str] = field(default_factory=dict)


def build_program(functions: Sequence[FunctionSpec], states: Sequence[StateSpec], opset: str,
                  default: str) -> Any:  # fmt: skip
    """The pymil Program holding every function, constants deduplicated across them."""
    ct = quiet_coremltools()
    from coremltools.converters.mil.mil import Program as PyProgram
    from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

    target = opset_target(ct, opset)
    prog = PyProgram()
    for spec in functions:
        prog.add_function(spec.name, _build_function(ct, spec, states, target))
    prog.default_function_name = default
    prog.export_as_multifunction = True
    # one weight_id per distinct constant, so each is written once to weight.bin
    PASS_REGISTRY["common::const_deduplication"]._deduplicate_const_across_functions(prog)
    prog.skip_all_passes = True
    return prog


def convert(prog: Any, opset: str) -> Any:
    """The pymil program as a Core ML model (not loaded: Linux has no Core ML)."""
    ct = quiet_coremltools()
    return ct.convert(
        prog,
        convert_to="mlprogram",
        minimum_deployment_target=opset_target(ct, opset),
        compute_precision=ct.precision.FLOAT32,  # the programs already carry their dtypes
        pass_pipeline=ct.PassPipeline.EMPTY,
        skip_model_load=True,
    )


def write_package(functions: Sequence[FunctionSpec], states: Sequence[StateSpec], opset: str,
                  default: str, path: str | os.PathLike[str]) -> Path:  # fmt: skip
    """Write the package at ``path`` (a new path inside a folder the caller writes atomically)."""
    path = Path(path)
    if path.suffix != ".mlpackage":
        raise AnekitError(f"'{path}' must end in .mlpackage")
    convert(build_program(functions, states, opset, default), opset).save(str(path))
    return path


def _build_function(ct: Any, spec: FunctionSpec, states: Sequence[StateSpec], target: Any) -> Any:
    from coremltools.converters.mil.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, types

    by_name = {s.name: s for s in states}
    for port, state in (*spec.reads.items(), *spec.writes.items()):
        if state not in by_name:
            raise AnekitError(f"function '{spec.name}': '{port}' names the unknown state '{state}'")
    # a callable is called here, so a caller building large functions holds one at a time
    program = (
        spec.program()
        if callable(spec.program) and not hasattr(spec.program, "manifest")
        else spec.program
    )
    manifest = program.manifest
    namer = Namer(reserved=set(by_name))
    replay = Replay(ct, namer)
    placeholders: dict[str, Any] = {}
    input_names: dict[str, str] = {}
    for port in manifest.inputs:
        if port.name in spec.reads:
            continue
        name = input_names[port.name] = namer.fresh(port.name)
        placeholders[name] = mb.placeholder(shape=port.shape,
                                            dtype=types.string_to_builtin(IO_DTYPE[port.dtype]))  # fmt: skip
    fp16 = types.string_to_builtin(STATE_DTYPE)
    for s in states:
        placeholders[s.name] = mb.state_tensor_placeholder(shape=s.shape, dtype=fp16)
    readers = [_reader(w) for w in program.weights]
    try:
        with Function(placeholders, opset_version=target) as func:
            values: dict[tuple, Any] = {
                ("input", p): func.inputs[n] for p, n in input_names.items()
            }
            for port, state in spec.reads.items():
                values[("input", port)] = mb.read_state(input=func.inputs[state],
                                                        name=namer.fresh(f"read_{state}"))  # fmt: skip
            replay_segments(replay, manifest, program.programs, readers, values)
            outputs = []
            for port in manifest.outputs:
                var = values[port.source.key]
                state = spec.writes.get(port.name)
                if state is None:
                    var = replay.cast(var, IO_DTYPE[port.dtype])
                    outputs.append(mb.identity(x=var, name=namer.fresh(port.name)))
                    continue
                var = _fit(mb, replay.cast(var, STATE_DTYPE), by_name[state].shape, namer)
                mb.coreml_update_state(state=func.inputs[state], value=var,
                                       name=namer.fresh(f"write_{state}"))  # fmt: skip
            func.set_outputs(outputs)
    finally:
        for r in readers:
            if r is not None:
                r.close()
    return func


def _fit(mb: Any, var: Any, shape: tuple[int, ...], namer: Namer) -> Any:
    """``var`` padded with zeros or cut along its last axis to ``shape``'s; the leading axes
    must already agree."""
    have = tuple(int(d) for d in var.shape)
    if have[:-1] != shape[:-1]:
        raise AnekitError(
            f"a value of shape {list(have)} cannot be written to a state of shape {list(shape)}"
        )
    if have[-1] < shape[-1]:
        widths = np.zeros(2 * len(shape), np.int32)
        widths[-1] = shape[-1] - have[-1]
        return mb.pad(x=var, pad=widths, constant_val=np.float16(0), name=namer.fresh("to_state"))
    if have[-1] > shape[-1]:
        return mb.slice_by_size(x=var, begin=np.zeros(len(shape), np.int32),
                                size=np.array(shape, np.int32), name=namer.fresh("to_state"))  # fmt: skip
    return var


def _reader(weights: Path | bytes | None) -> BlobReader | None:
    return None if weights is None else BlobReader(weights)
