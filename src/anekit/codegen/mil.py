"""The MIL emitter: one MIL program (text + weight.bin) per segment of a placed engine graph.

Rules (FACTS sections 1 and 3, the Orion constraint catalog):

- dialect from the target: ``program(1.3)`` / ``func main<ios18>`` on newer chips,
  ``program(1.0)`` / ``<ios16>`` on M1 and M2 (``target.mil``);
- engine segments compute in fp16 (fp16 I/O, fp16 weights); CPU segments in fp32, their
  weights stored as fp16 and cast (or as fp32 with ``weights="fp32"``); integers in int32,
  whatever their IR width;
- engine layers are expanded back into plain MIL ops (see :mod:`anekit.codegen.lower`);
- every non-variable argument is a named const; tensors of 10 or more floats are
  ``BLOBFILE`` consts whose offset is their record in the segment's weight.bin;
- function inputs and the returned outputs are sorted by MIL name (the engine binds
  surfaces in alphabetical order);
- engine I/O below the target's minimum surface (``limits.min_io_bytes``) has its last axis
  padded to at least 16 (Orion #4): the program slices inputs back and zero-pads outputs,
  and the padding is recorded so the runtime adds and strips it; all inputs (and all
  outputs) of an engine program share one allocation size, at least the minimum surface;
- names are sanitised IR names, unique and stable (same graph, same text).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from anekit.codegen.builder import Arg, FunctionBuilder, mil_type
from anekit.codegen.compress import Compressed
from anekit.codegen.lower import Call, lower_call
from anekit.codegen.weights import Conversions, WeightFile
from anekit.errors import ModelError
from anekit.formats.mil import Binding, Function, MilProgram, dtype_info, print_program
from anekit.ir.graph import Graph
from anekit.version import __version__

if TYPE_CHECKING:  # codegen reads targets and segments by their attributes only
    from anekit.targets import Target

# What Apple's coremlc writes into buildInfo (FACTS section 1), and who wrote this program.
BUILD_INFO = (
    ("coremlc-component-MIL", "3520.4.1"),
    ("coremlc-version", "3520.5.1"),
    ("anekit-version", __version__),
)
MIN_SEQUENCE = 16  # Orion #4: a single token is padded to S = 16


class SegmentLike(Protocol):
    """What the emitter reads of a segment (``anekit.passes.results.Segment`` has it)."""

    index: int
    device: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class SegmentSpec:
    """A segment handed to the emitter: a run of nodes on one device with its boundary values."""

    index: int
    device: Literal["ane", "cpu"]
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class TensorSpec:
    """One program input or output: the IR value it carries and how the program holds it.

    ``shape`` is the value's own shape; ``mil_shape`` the program's (padded at the end of the
    last axis, the data in the leading corner). ``dtype`` is the IR dtype, ``mil_dtype``
    the program's.
    """

    value: str
    mil_name: str
    dtype: str
    mil_dtype: str
    shape: tuple[int, ...]
    mil_shape: tuple[int, ...]

    @property
    def padded(self) -> bool:
        return self.shape != self.mil_shape

    @property
    def mil_bytes(self) -> int:
        return int(np.prod(self.mil_shape, dtype=np.int64)) * dtype_info(self.mil_dtype).itemsize


@dataclass(frozen=True)
class EmittedSegment:
    """A segment as a MIL program: its text, its weight.bin (None when it has no blobs), its
    signature (in function order) and, on the engine, the uniform surface sizes."""

    index: int
    device: str
    program: MilProgram
    weight_file: WeightFile | None
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    input_alloc_bytes: int | None
    output_alloc_bytes: int | None
    nodes: tuple[str, ...]
    legacy_scalars: bool = False
    # const op name -> the IR constant it holds unchanged (the rest are derived from them)
    constants: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @cached_property
    def text(self) -> str:
        return print_program(self.program, legacy_scalars=self.legacy_scalars)

    @property
    def weights(self) -> bytes | None:
        """The weight.bin's bytes (joined on each access; None when the program has no blobs)."""
        return None if self.weight_file is None else self.weight_file.to_bytes()


def padded_shape(shape: tuple[int, ...], dtype: str, min_bytes: int) -> tuple[int, ...]:
    """The engine surface shape of an I/O tensor: the last axis padded to ``MIN_SEQUENCE``
    when the tensor is smaller than the minimum surface. Only float tensors are engine
    surfaces (MIL pads floats only); scalars and integer or bool values are left alone."""
    if not shape or dtype not in ("fp16", "fp32"):
        return shape
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype_info(dtype).itemsize
    if nbytes >= min_bytes or shape[-1] >= MIN_SEQUENCE:
        return shape
    return (*shape[:-1], MIN_SEQUENCE)


def whole_graph_segment(graph: Graph, device: Literal["ane", "cpu"] = "ane") -> SegmentSpec:
    """The whole graph as one segment (a builder graph handed straight to the emitter)."""
    used = {i for n in graph.nodes for i in n.inputs if i}
    inputs = tuple(v for v in graph.input_names if v in used)
    return SegmentSpec(0, device, tuple(n.name for n in graph.nodes), inputs, graph.output_names)


def emit_segment(
    graph: Graph,
    segment: SegmentLike,
    target: Target,
    *,
    weights: str = "fp16",
    executor: Executor | None = None,
    conversions: Conversions | None = None,
    compressed: Mapping[str, Compressed] | None = None,
) -> EmittedSegment:
    """One segment of ``graph`` as a MIL program for ``target``.

    ``weights`` is how CPU segments store float weights (engine segments always use fp16):
    ``fp16`` (the default, half the size, read through a cast) or ``fp32`` (exact).
    ``executor`` converts weights on other threads (the weight file waits for them);
    ``conversions``, shared by the segments of a model, converts each weight once.
    ``compressed`` maps IR constants to their compressed forms (`anekit.codegen.compress`).
    """
    device = segment.device
    engine = device == "ane"
    b = FunctionBuilder(
        "fp16" if engine else "fp32",
        weights,
        executor,
        conversions=conversions,
        int8_tensors=target.mil.int8_tensors,
        compressed=compressed,
    )
    namer = b.namer
    env: dict[str, Arg] = {}
    min_bytes = target.limits.min_io_bytes

    def spec(value: str) -> TensorSpec:
        v = graph.value(value)
        mil_dtype = b.dtype_of(v.dtype)  # int8 as int32 on iOS 15/16: the runtime converts
        mil_shape = padded_shape(v.shape, mil_dtype, min_bytes) if engine else v.shape
        return TensorSpec(value, namer.value(value), str(v.dtype), mil_dtype, v.shape, mil_shape)

    inputs = [spec(v) for v in segment.inputs]
    outputs = [spec(v) for v in segment.outputs]
    for s in inputs:
        var = s.mil_name
        if s.padded:
            var = b.op(
                "slice_by_size",
                {"x": s.mil_name, "begin": b.param(f"{s.mil_name}_begin", [0] * len(s.shape), key="begin"),
                 "size": b.param(f"{s.mil_name}_size", list(s.shape), key="size")},
                s.shape, s.mil_dtype, hint=f"{s.mil_name}_unpadded",
            )  # fmt: skip
        env[s.value] = Arg(var, s.shape, s.mil_dtype, None, s.value, graph.value(s.value).dtype)
    # a padded output's value is computed under another name, then padded into its own
    internal = {s.value: namer.fresh(f"{s.mil_name}_unpadded") for s in outputs if s.padded}
    nodes = [graph.node(name) for name in segment.nodes]
    for node in nodes:
        args = tuple(_arg(graph, env, i, b) for i in node.inputs)
        outs = tuple(graph.value(o) for o in node.outputs)
        call = Call(
            op=node.op,
            attrs=node.attrs,
            args=args,
            outputs=tuple((v.shape, v.dtype) for v in outs),
            names=tuple(internal.get(o) or namer.value(o) for o in node.outputs),
            hint=namer.value(node.outputs[0]) if node.outputs else node.name,
            origin=node.name,
        )
        for v, var in zip(outs, lower_call(b, call, target, device), strict=True):
            env[v.name] = Arg(var, v.shape, b.dtype_of(v.dtype), None, v.name, v.dtype)
    for s in outputs:
        if s.value not in env:
            raise ModelError(f"segment {segment.index} never computes its output '{s.value}'")
        if s.padded:
            widths = [0] * (2 * len(s.shape) - 1) + [s.mil_shape[-1] - s.shape[-1]]
            b.op(
                "pad",
                {"x": env[s.value].var, "pad": b.param(f"{s.mil_name}_pad", widths, key="pad"),
                 "mode": b.param(f"{s.mil_name}_mode", "constant", "string", key="mode"),
                 "constant_val": b.param(f"{s.mil_name}_zero", _zero(s.mil_dtype), s.mil_dtype, key="zero")},
                s.mil_shape, s.mil_dtype, name=s.mil_name,
            )  # fmt: skip
    inputs.sort(key=lambda s: s.mil_name)
    outputs.sort(key=lambda s: s.mil_name)
    function = Function(
        "main",
        target.mil.opset,
        tuple(Binding(s.mil_name, mil_type(s.mil_shape, s.mil_dtype)) for s in inputs),
        tuple(b.operations),
        tuple(s.mil_name for s in outputs),
    )
    program = MilProgram(target.mil.program_version, BUILD_INFO, (function,))
    return EmittedSegment(
        index=segment.index,
        device=device,
        program=program,
        weight_file=b.blobs if len(b.blobs) else None,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        input_alloc_bytes=_alloc(inputs, min_bytes) if engine else None,
        output_alloc_bytes=_alloc(outputs, min_bytes) if engine else None,
        nodes=tuple(segment.nodes),
        legacy_scalars=target.mil.program_version == "1.0",
        constants=MappingProxyType(dict(b.ir_constants)),
    )


def emit(
    graph: Graph,
    target: Target,
    segments: Sequence[SegmentLike] | None = None,
    *,
    weights: str = "fp16",
) -> list[EmittedSegment]:
    """Every segment of ``graph`` (default: the whole graph as one engine segment)."""
    chosen = list(segments) if segments is not None else [whole_graph_segment(graph)]
    return [emit_segment(graph, s, target, weights=weights) for s in chosen]


def _arg(graph: Graph, env: dict[str, Arg], name: str, b: FunctionBuilder) -> Arg | None:
    if not name:
        return None
    found = env.get(name)
    if found is not None:
        return found
    value = graph.constant(name)
    if value is None:
        raise ModelError(f"value '{name}' is read before any node of its segment computes it")
    v = graph.value(name)
    return Arg(None, v.shape, b.dtype_of(v.dtype), value, name, v.dtype)


def _alloc(specs: Sequence[TensorSpec], min_bytes: int) -> int:
    """One allocation size for every surface of a group (Orion #2, #18), at least the minimum."""
    return max([min_bytes, *(s.mil_bytes for s in specs)])


def _zero(dtype: str) -> object:
    return False if dtype == "bool" else 0 if dtype in ("int32", "int8", "uint8") else np.float32(0)
