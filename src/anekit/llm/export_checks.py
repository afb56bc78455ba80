"""The engine pitfalls users of stateful Core ML LLMs report, checked on what an export would
ship before anything is written. Each refusal is a `ModelError` (exit 2) naming the rule,
the node and the fix:

- ``state-alignment``: a state's last dimension must be a multiple of 32, or the stateful
  model fails on the engine while CPU and GPU run it (apple/coremltools#2631: width 270
  fails, 256 runs, M4, macOS 15);
- ``placement``: every op runs on the engine except the embedding gathers, which the engine
  cannot run and which stay on the CPU at the program's start (seed 001 section 4.3);
- ``fp16-softmax``: every softmax of an fp16 engine program takes its input through the
  +-65504 clamp (an overflowed score turns the row into NaN: wrong tokens with the engine on);
- ``fp16-norm``: every square of an fp16 engine program that a reduction averages (a norm's
  variance) squares a value already divided by its peak (|x| <= 1), since residual streams
  past 256 overflow fp16 when squared (the squares inside GELU's tanh form saturate
  harmlessly: tanh(inf) = 1);
- ``static-shapes``: every function input and output has a fixed shape (flexible shapes push
  models off the engine; the buckets are the enumeration).
"""

from __future__ import annotations

from typing import Any

from anekit.errors import ModelError

STATE_ALIGNMENT = 32
# ops the engine cannot run that an LLM program keeps on the CPU by design (embedding lookups)
CPU_BY_DESIGN = frozenset({"gather"})


def scheme_refusal(scheme: str) -> str:
    if scheme == "int4":
        return ("int4 here is per-block quantization (one scale per 32 input channels), which "
                "the engine does not run (coremltools: per-block quantization is not supported "
                "on the Neural Engine; the model falls back to the GPU or CPU)")  # fmt: skip
    return f"the export does not ship '{scheme}' weights"


def check_states(chunk: Any) -> None:
    for state in chunk.states:
        if state.shape[-1] % STATE_ALIGNMENT:
            raise ModelError(
                f"rule state-alignment: state '{state.name}' of {chunk.name} has shape "
                f"{list(state.shape)}; the engine needs its last dimension to be a multiple "
                f"of {STATE_ALIGNMENT} (apple/coremltools#2631)",
                hint=f"load the model with max_context a multiple of {STATE_ALIGNMENT}",
            )


def check_program(compiled: Any, where: str) -> None:
    check_placement(compiled, where)
    check_static(compiled, where)
    check_fp16_safety(compiled, where)


def check_placement(compiled: Any, where: str) -> None:
    for row in compiled.ops:
        if row.placement == "cpu" and row.op not in CPU_BY_DESIGN:
            raise ModelError(f"rule placement: node '{row.node}' ({row.op}) of {where} cannot run "
                             f"on the engine: {row.reason}", hint="see `anekit check` for the model")  # fmt: skip


def check_static(compiled: Any, where: str) -> None:
    manifest = compiled.program.manifest
    for port in (*manifest.inputs, *manifest.outputs):
        if not all(isinstance(d, int) for d in port.shape):
            raise ModelError(f"rule static-shapes: '{port.name}' of {where} has the flexible shape "
                             f"{list(port.shape)}", hint="use fixed bucket shapes")  # fmt: skip


def check_fp16_safety(compiled: Any, where: str) -> None:
    program = compiled.program
    for segment, mil_program in zip(program.manifest.segments, program.programs, strict=True):
        if segment.device != "ane":
            continue
        function = mil_program.function(segment.function)
        producers = function.producers
        reduced = {
            v for op in function.operations if op.op.startswith("reduce_") for v in op.variables()
        }
        for op in function.operations:
            x = op.input("x")
            if op.op == "softmax" and not _made_by(producers, x, ("clip",)):
                raise ModelError(f"rule fp16-softmax: softmax '{op.name}' of {where} takes an "
                                 "unclamped input, which can overflow fp16 on the engine")  # fmt: skip
            square = op.op == "mul" and x is not None and x == op.input("y")
            if square and op.outputs[0].name in reduced and not _scaled(producers, x):
                raise ModelError(f"rule fp16-norm: '{op.name}' of {where} squares a value not "
                                 "divided by its peak, which overflows fp16 past 256")  # fmt: skip


def _made_by(producers: Any, var: Any, kinds: tuple[str, ...]) -> bool:
    op = producers.get(getattr(var, "name", None))
    return op is not None and op.op in kinds


def _scaled(producers: Any, var: Any) -> bool:
    """``var`` is a product or quotient with a reciprocal (or a divisor): the peak-scaled
    deviations of the fp16-safe norm."""
    op = producers.get(getattr(var, "name", None))
    if op is None:
        return False
    if op.op == "real_div":
        return True
    return op.op == "mul" and any(_made_by(producers, op.input(k), ("reciprocal", "real_div"))
                                  for k in ("x", "y"))  # fmt: skip
