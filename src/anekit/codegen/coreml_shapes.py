"""Enumerated input shapes in a Core ML package: one mlprogram valid at every shape.

anekit compiles static shapes, so the model is compiled once per configuration (one shape per
input with enumerated shapes; every combination when several inputs have them). Core ML wants
one program whose inputs have symbolic dimensions. The programs of all configurations are
compared operation by operation (engine I/O padding aside, which the one-function export
drops): they must be the same operations on the same variables with the same constants, so
that the program written with symbolic input dimensions performs, at each shape, exactly the
operations compiled for that shape. One difference is rewritten rather than refused: a
``reshape`` whose target shape differs in a single position gets ``-1`` there (the element
count then fixes that dimension to the value compiled for each shape). Anything else that
differs (a constant, an operation, a segment) is refused with the operation named: the
compiler laid that model out differently per shape, and one program cannot hold both.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.codegen.mlpackage import FlexibleShapes, padding_ops
from anekit.errors import AnekitError
from anekit.formats import mil
from anekit.formats.blob import BlobReader
from anekit.formats.bundle import Manifest

# configurations compiled for one export (every combination of the inputs' enumerated shapes)
MAX_CONFIGURATIONS = 32
Shape = tuple[int, ...]


@dataclass(frozen=True)
class Variant:
    """The model compiled at one configuration (``shapes``: input name -> its shape)."""

    shapes: Mapping[str, Shape]
    manifest: Manifest
    programs: Sequence[mil.MilProgram]
    weights: Sequence[BlobReader | None]


def shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape)


def configurations(enumerated: Mapping[str, Sequence[Shape]]) -> list[dict[str, Shape]]:
    """Every combination of the inputs' shapes, the default (each input's first) first."""
    names = list(enumerated)
    combos = list(itertools.product(*(enumerated[n] for n in names)))
    if len(combos) > MAX_CONFIGURATIONS:
        raise AnekitError(
            f"{len(combos)} combinations of enumerated shapes; at most {MAX_CONFIGURATIONS} "
            "are compiled for one package",
            hint="give fewer shapes (each combination of the inputs' shapes is compiled)",
        )
    return [dict(zip(names, combo, strict=True)) for combo in combos]


def check_against_model(enumerated: Mapping[str, Sequence[Shape]],
                        declared: Mapping[str, Sequence[int | None]]) -> None:  # fmt: skip
    """Each enumerated shape names an input of the model, has its rank, and keeps the
    dimensions the model fixes (``declared``: input -> dims, None where dynamic)."""
    for name, shapes in enumerated.items():
        if name not in declared:
            raise AnekitError(f"enumerated shapes for '{name}', which is not an input of the model",
                              hint=f"its inputs: {', '.join(declared)}")  # fmt: skip
        dims = list(declared[name])
        for shape in shapes:
            if len(shape) != len(dims):
                raise AnekitError(
                    f"enumerated shape {shape_text(shape)} of input '{name}' has rank {len(shape)}; "
                    f"the model's input has rank {len(dims)}"
                )
            for k, (want, got) in enumerate(zip(dims, shape, strict=True)):
                if want is not None and want != got:
                    dynamic = [str(i) for i, d in enumerate(dims) if d is None]
                    raise AnekitError(
                        f"enumerated shape {shape_text(shape)} of input '{name}' sets dimension "
                        f"{k} to {got}, but the model fixes it to {want}",
                        hint=f"only its dynamic dimensions ({', '.join(dynamic)}) can vary"
                        if dynamic else "this input has no dynamic dimension: it cannot vary",
                    )


def flexible_shapes(variants: Sequence[Variant], enumerated: Mapping[str, Sequence[Shape]]) -> FlexibleShapes:
    """What `anekit.codegen.mlpackage.export_mlpackage` needs to write the first variant's
    program with symbolic input dimensions, valid at every variant's shapes (AnekitError
    naming the operation that cannot be)."""
    base = variants[0]
    consts: dict[tuple[int, str], np.ndarray] = {}
    declared: dict[tuple[int, str], list[Shape]] = {}
    for variant in variants[1:]:
        _same_ports(base, variant)
        for segment in range(len(base.manifest.segments)):
            for key, value in _compare_segment(base, variant, segment).items():
                consts[(segment, key[0])] = _merged_reshape(consts.get((segment, key[0])), value, key[1])
    for variant in variants:
        for seg, program in zip(variant.manifest.segments, variant.programs, strict=True):
            function = program.function(seg.function)
            for b in (*function.inputs, *(o for op in function.operations for o in op.outputs)):
                shape = () if mil.is_scalar(b.type) else tuple(getattr(b.type, "shape", ()))
                declared.setdefault((seg.index, b.name), []).append(shape)
    return FlexibleShapes(inputs=dict(enumerated), consts=consts, declared=declared)


def _where(variant: Variant) -> str:
    return ", ".join(f"{n}={shape_text(s)}" for n, s in variant.shapes.items())


def _refuse(base: Variant, variant: Variant, what: str) -> AnekitError:
    return AnekitError(
        f"one Core ML program cannot serve every enumerated shape: {what} in the program "
        f"compiled at {_where(variant)} and the one at {_where(base)}",
        hint="what the compiler wrote there depends on the shape; export these shapes as "
        "separate packages, or enumerate only shapes at which that op is the same",
    )


def _same_ports(base: Variant, variant: Variant) -> None:
    a, b = base.manifest, variant.manifest
    if _ports(a) != _ports(b):
        raise _refuse(base, variant, "the model's inputs or outputs come from different places")
    if len(a.segments) != len(b.segments):
        raise _refuse(base, variant, f"the model has {len(b.segments)} and {len(a.segments)} "
                                     "segments")  # fmt: skip
    for x, y in zip(a.segments, b.segments, strict=True):
        same = (x.device, x.function) == (y.device, y.function) and [
            (i.mil_name, i.mil_dtype) for i in (*x.inputs, *x.outputs)
        ] == [(i.mil_name, i.mil_dtype) for i in (*y.inputs, *y.outputs)]
        if not same:
            raise _refuse(base, variant, f"segment {x.index} has other inputs, outputs or device")


def _ports(manifest: Manifest) -> list[tuple]:
    return [(p.name, p.dtype, p.source.key if p.source else None)
            for p in (*manifest.inputs, *manifest.outputs)]  # fmt: skip


def _effective_ops(variant: Variant, index: int) -> tuple[mil.Function, list[mil.Operation], dict[str, str]]:
    """The segment's operations the one-function export replays, constants aside, and the
    padding ops it passes over (output -> the value passed on); refused where engine I/O
    padding would be written with one shape's sizes."""
    segment = variant.manifest.segments[index]
    function = variant.programs[index].function(segment.function)
    bypass = padding_ops(function, segment)
    for io in (*segment.inputs, *segment.outputs):
        kept = io.mil_name in (bypass.values() if io in segment.inputs else bypass)
        if io.padded and not kept:
            raise AnekitError(
                f"segment {index}'s '{io.mil_name}' is padded for the engine at "
                f"{_where(variant)} and read by more than its unpadding; one program cannot "
                "pad it for every enumerated shape",
                hint="export the shapes as separate packages",
            )
    ops = [op for op in function.operations if op.op != "const" and op.outputs[0].name not in bypass]
    return function, ops, bypass


def _compare_segment(base: Variant, variant: Variant, index: int) -> dict[tuple[str, int], Any]:
    """The reshape targets that differ, keyed (const name, position that differs)."""
    f_a, ops_a, bypass_a = _effective_ops(base, index)
    f_b, ops_b, bypass_b = _effective_ops(variant, index)
    consts_a, consts_b = _consts(f_a), _consts(f_b)
    reader_a, reader_b = base.weights[index], variant.weights[index]
    differing: dict[tuple[str, int], Any] = {}
    for k in range(max(len(ops_a), len(ops_b))):
        if k >= len(ops_a) or k >= len(ops_b):
            op = (ops_a + ops_b)[min(len(ops_a), len(ops_b))]
            raise _refuse(base, variant, f"'{op.outputs[0].name}' ({op.op}) is where the programs "
                                         f"part ({len(ops_b)} and {len(ops_a)} operations)")  # fmt: skip
        a, b = ops_a[k], ops_b[k]
        name = a.outputs[0].name
        if (a.op, [o.name for o in a.outputs], [key for key, _ in a.inputs]) != (
            b.op, [o.name for o in b.outputs], [key for key, _ in b.inputs]
        ):
            raise _refuse(base, variant, f"operation {k} is '{b.outputs[0].name}' ({b.op}) and "
                                         f"'{name}' ({a.op})")  # fmt: skip
        extra_a = [(key, v) for key, v in a.attributes if key != "name"]
        extra_b = [(key, v) for key, v in b.attributes if key != "name"]
        if [key for key, _ in extra_a] != [key for key, _ in extra_b] or not all(
            _equal(_value(u, None), _value(v, None))
            for (_, u), (_, v) in zip(extra_a, extra_b, strict=True)
        ):
            raise _refuse(base, variant, f"'{name}' ({a.op}) has different attributes")
        for (key, x), (_, y) in zip(a.inputs, b.inputs, strict=True):
            if len(_args(x)) != len(_args(y)):
                raise _refuse(base, variant, f"'{name}' ({a.op}) reads a different number of values "
                                             f"for '{key}'")  # fmt: skip
            for u, v in zip(_args(x), _args(y), strict=True):
                if isinstance(u, mil.Var) != isinstance(v, mil.Var) or (
                    isinstance(u, mil.Var) and bypass_a.get(u.name, u.name) != bypass_b.get(v.name, v.name)
                ):
                    raise _refuse(base, variant, f"'{name}' ({a.op}) reads different values for '{key}'")
                if isinstance(u, mil.Var) and u.name in consts_a:
                    ua, vb = consts_a[u.name], consts_b.get(u.name)
                    ua_val = _value(ua, reader_a)
                    if vb is not None and _equal(ua_val, _value(vb, reader_b)):
                        continue
                    position = _reshape_position(a, key, ua_val, None if vb is None else _value(vb, reader_b))
                    if position is None:
                        raise _refuse(base, variant, f"'{name}' ({a.op}) has different constants "
                                                     f"'{key}' ({u.name})")  # fmt: skip
                    if _read_elsewhere(f_a, u.name, a):
                        raise _refuse(base, variant, f"the constant '{u.name}' of '{name}' "
                                                     "(reshape) is also read elsewhere and differs")  # fmt: skip
                    differing[(u.name, position)] = ua_val
                elif not isinstance(u, mil.Var) and not _equal(_value(u, reader_a), _value(v, reader_b)):
                    raise _refuse(base, variant, f"'{name}' ({a.op}) has different '{key}' values")
    return differing


def _merged_reshape(previous: np.ndarray | None, value: np.ndarray, position: int) -> np.ndarray:
    """A reshape target with -1 at ``position`` (every variant must differ at the same one)."""
    target = np.array(value, np.int32)
    target[position] = -1
    if previous is not None and not np.array_equal(previous, target):
        raise AnekitError(
            f"a reshape to {list(value)} differs in more than one dimension across the enumerated "
            "shapes; one program cannot hold it",
            hint="export the shapes as separate packages",
        )
    return target


def _reshape_position(op: mil.Operation, key: str, a: Any, b: Any) -> int | None:
    """The one position where two reshape targets differ (None if not exactly one)."""
    if op.op != "reshape" or key != "shape" or b is None:
        return None
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.ndim != 1 or (a < 0).any() or (b < 0).any():
        return None
    where = np.flatnonzero(a != b)
    return int(where[0]) if len(where) == 1 else None


def _read_elsewhere(function: mil.Function, name: str, reader: mil.Operation) -> bool:
    return any(name in op.variables() for op in function.operations if op is not reader)


def _args(arg: Any) -> tuple:
    return arg.items if isinstance(arg, mil.ArgList) else (arg,)


def _consts(function: mil.Function) -> dict[str, Any]:
    return {op.outputs[0].name: op.attribute("val") for op in function.operations if op.op == "const"}


def _value(value: Any, reader: BlobReader | None) -> Any:
    if isinstance(value, mil.BlobFile):
        if reader is None:
            raise AnekitError(f"BLOBFILE {value.path!r} but the segment has no weight file")
        shape = tuple(int(d) for d in value.type.shape)  # type: ignore[arg-type]
        return reader.read(value.offset, shape, value.type.dtype)
    if isinstance(value, mil.Scalar):
        return value.value
    if isinstance(value, mil.Tensor):
        return np.asarray(value.data)
    return value


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    return type(a) is type(b) and a == b
