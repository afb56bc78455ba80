"""Core ML export: a bundle's MIL programs rebuilt with coremltools' pymil builder and saved as
one ``.mlpackage`` (extra ``coreml``; coremltools is imported only here, and only when used).

The whole model becomes one mlprogram function, whatever its number of segments: each
segment's operations are replayed in order through ``coremltools.converters.mil.mil.Builder``
(names prefixed ``s<i>_`` so segments cannot clash); where a value crosses a segment boundary
it is cast between the two programs' dtypes (fp16 on the engine, fp32 on the CPU) and its
engine I/O padding is dropped, since inside one function there is no surface to pad. Core ML
then decides placement itself. Model inputs and outputs keep the model's names (made valid
identifiers) and dtypes (floats as fp32, or fp16 with ``io_dtype="fp16"``; integers as int32).
`CoreMLOptions` (codegen/coreml_options.py) adds image inputs, classifier labels, metadata,
compute units and the deployment target. With `FlexibleShapes` (codegen/coreml_shapes.py makes
them) inputs get symbolic dimensions and their enumerated shapes.

Every op is type-checked by coremltools as it is built; the shapes and dtypes it infers must
equal the ones our MIL declares, or the export stops with an internal error.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from anekit import atomic
from anekit.codegen.coreml_options import CoreMLOptions
from anekit.codegen.names import Namer
from anekit.errors import AnekitError, InternalError, MissingDependencyError
from anekit.files import read_file
from anekit.formats import mil
from anekit.formats.blob import BlobReader
from anekit.formats.bundle import Manifest

IO_DTYPE = {"fp32": "fp32", "fp16": "fp16", "int64": "int32", "int32": "int32", "bool": "bool",
             "int8": "int32", "uint8": "int32"}  # fmt: skip


@dataclass(frozen=True)
class FlexibleShapes:
    """One program written for several input shapes (`anekit.codegen.coreml_shapes` checks
    that it can be): ``inputs``, each flexible input's enumerated shapes (the default first);
    ``consts``, constants rewritten to hold at every shape, keyed (segment, name);
    ``declared``, each value's shape in every compiled program, keyed (segment, name)."""

    inputs: Mapping[str, Sequence[tuple[int, ...]]]
    consts: Mapping[tuple[int, str], np.ndarray]
    declared: Mapping[tuple[int, str], Sequence[tuple[int, ...]]]


def _numpy(dtype: str) -> np.dtype:
    return mil.dtype_info(dtype).numpy_dtype


def quiet_coremltools() -> Any:
    """coremltools, imported without its import-time warnings: off macOS it cannot load its
    native Core ML proxies (anekit never loads a model through them), and it warns about
    torch and scikit-learn versions it has not been tested with; none concerns an export."""
    logger = logging.getLogger("coremltools")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        import coremltools
    except ImportError as exc:
        raise MissingDependencyError("coremltools", "coreml", "exporting an .mlpackage") from exc
    finally:
        logger.setLevel(level)
    return coremltools


@contextlib.contextmanager
def _quiet_conversion() -> Iterator[None]:
    """No progress bars from coremltools' pass pipeline (its tqdm), nor its info logging."""
    from coremltools.converters.mil.mil.passes import pass_pipeline

    bar = pass_pipeline.tqdm
    logger = logging.getLogger("coremltools")
    level = logger.level
    pass_pipeline.tqdm = functools.partial(bar, disable=True)
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        pass_pipeline.tqdm = bar
        logger.setLevel(level)


def export_mlpackage(
    manifest: Manifest,
    programs: Sequence[mil.MilProgram],
    weights: Sequence[BlobReader | None],
    path: str | os.PathLike[str],
    options: CoreMLOptions | None = None,
    flexible: FlexibleShapes | None = None,
) -> Path:
    """Build the whole model as one mlprogram and save it at ``path`` (atomically); with
    ``flexible``, its inputs take every enumerated shape."""
    options = options or CoreMLOptions()
    _check_options(manifest, options, flexible)
    ct = quiet_coremltools()
    target = _minimum_target(ct, manifest.target.opset, options.deployment_target)
    names: dict[str, str] = {}
    pymil = _build(ct, manifest, programs, weights, options, names, flexible)
    classifier = None
    if options.class_labels is not None:
        probabilities = options.classifier_output or _float_outputs(manifest)[0]
        classifier = ct.ClassifierConfig(list(options.class_labels),
                                         predicted_probabilities_output=names[probabilities])  # fmt: skip
    with _quiet_conversion():
        model = ct.convert(
            pymil,
            convert_to="mlprogram",
            inputs=_input_types(ct, manifest, options, names, flexible),
            minimum_deployment_target=target,
            compute_precision=ct.precision.FLOAT32,  # our programs already carry their dtypes
            pass_pipeline=ct.PassPipeline.EMPTY,
            classifier_config=classifier,
            skip_model_load=True,
        )
    _describe(model, options)
    return _save(model, Path(path))


def _float_outputs(manifest: Manifest) -> list[str]:
    return [p.name for p in manifest.outputs if p.dtype in ("fp32", "fp16")]


def _check_options(manifest: Manifest, options: CoreMLOptions,
                   flexible: FlexibleShapes | None = None) -> None:  # fmt: skip
    """Options that name inputs and outputs the model has, with shapes that fit them."""
    ports = {p.name: p for p in manifest.inputs}
    for name, image in options.images.items():
        port = ports.get(name)
        if port is None:
            raise AnekitError(f"image input '{name}' is not an input of the model",
                              hint=f"its inputs: {', '.join(ports)}")  # fmt: skip
        shapes = _shapes(port, flexible)
        shape = next((s for s in shapes if not _image_shape(s, image.channels)), shapes[0])
        if port.dtype not in ("fp32", "fp16") or not _image_shape(shape, image.channels):
            raise AnekitError(
                f"input '{name}' ({port.dtype}{list(shape)}) cannot be a {image.color_layout} "
                f"image: an image input is a float [1, {image.channels}, height, width]"
            )
    if options.class_labels is not None:
        floats = _float_outputs(manifest)
        name = options.classifier_output
        if name is None and len(floats) != 1:
            raise AnekitError(f"the model has {len(floats)} float outputs; say which holds the "
                              "class probabilities", hint="classifier_output= (CLI: --classifier-output)")  # fmt: skip
        name = name or floats[0]
        port = next((p for p in manifest.outputs if p.name == name), None)
        if port is None or name not in floats:
            raise AnekitError(f"classifier output '{name}' is not a float output of the model",
                              hint=f"its float outputs: {', '.join(floats)}")  # fmt: skip
        classes = int(np.prod(port.shape))
        if classes != len(options.class_labels) or max(port.shape) != classes:
            raise AnekitError(
                f"{len(options.class_labels)} class labels for output '{name}' of shape "
                f"{list(port.shape)}: give one label per class"
            )


def _image_shape(shape: Sequence[int], channels: int) -> bool:
    return len(shape) == 4 and shape[0] == 1 and shape[1] == channels


def _shapes(port: Any, flexible: FlexibleShapes | None) -> list[tuple[int, ...]]:
    """An input's shapes: its enumerated shapes, or the one it was compiled for."""
    if flexible is not None and port.name in flexible.inputs:
        return [tuple(s) for s in flexible.inputs[port.name]]
    return [tuple(port.shape)]


def _minimum_target(ct: Any, opset: str, asked: str | None) -> Any:
    """The deployment target asked for, at least the one the program's opset needs."""
    needed = opset_target(ct, opset)
    if asked is None:
        return needed
    chosen = getattr(ct.target, asked, None)
    if chosen is None:
        known = ", ".join(t.name for t in ct.target)
        raise AnekitError(f"coremltools has no deployment target {asked!r}", hint=f"one of {known}")
    same_platform = {t.name: t for t in ct.target if t.name.startswith(asked.rstrip("0123456789"))}
    floor = next((t for t in same_platform.values() if t.value >= needed.value), None)
    if chosen.value < needed.value:
        raise AnekitError(
            f"deployment target {asked} is older than the {opset} opset this chip's programs "
            f"use, which needs {floor.name if floor is not None else needed.name} or later",
            hint="choose a later deployment target, or compile for an older chip",
        )
    return chosen


def _input_types(ct: Any, manifest: Manifest, options: CoreMLOptions, names: dict,
                 flexible: FlexibleShapes | None = None) -> list:  # fmt: skip
    """Every input as coremltools types it: images with their preprocessing, the rest tensors,
    either with their enumerated shapes (the first the default)."""
    types = []
    for port in manifest.inputs:
        name, shape = names[port.name], _input_shape(ct, port, flexible)
        image = options.images.get(port.name)
        if image is None:
            dtype = _port_dtype(port.dtype, options)
            types.append(ct.TensorType(name=name, shape=shape, dtype=_numpy(dtype)))
            continue
        biases = image.biases()
        types.append(ct.ImageType(
            name=name, shape=shape, scale=float(image.scale),
            bias=biases[0] if image.channels == 1 else biases,
            color_layout=getattr(ct.colorlayout, {"G": "GRAYSCALE"}.get(
                image.color_layout, image.color_layout.replace("G_", "GRAYSCALE_"))),
        ))  # fmt: skip
    return types


def _input_shape(ct: Any, port: Any, flexible: FlexibleShapes | None) -> Any:
    shapes = _shapes(port, flexible)
    if len(shapes) == 1:
        return shapes[0]
    return ct.EnumeratedShapes(shapes=shapes, default=shapes[0])


def _port_dtype(dtype: str, options: CoreMLOptions) -> str:
    """A model input's or output's type in the package: floats as ``io_dtype``."""
    io = IO_DTYPE[dtype]
    return options.io_dtype if io in ("fp32", "fp16") else io


def _describe(model: Any, options: CoreMLOptions) -> None:
    for attribute, value in (("author", options.author), ("license", options.license),
                             ("short_description", options.description),
                             ("version", options.version)):  # fmt: skip
        if value is not None:
            setattr(model, attribute, value)
    model.user_defined_metadata["com.anekit.compute_units"] = options.compute_units


def opset_target(ct: Any, opset: str) -> Any:
    try:
        return getattr(ct.target, opset.replace("ios", "iOS"))
    except AttributeError:
        raise AnekitError(
            f"coremltools has no deployment target for the MIL opset '{opset}'"
        ) from None


def _save(model: Any, target: Path) -> Path:
    if target.suffix != ".mlpackage":
        raise AnekitError(f"'{target}' must end in .mlpackage")

    def write(folder: Path) -> None:
        staged = folder / f"staged{target.suffix}"  # coremltools wants the suffix
        model.save(str(staged))
        for entry in os.listdir(staged):
            os.rename(staged / entry, folder / entry)
        staged.rmdir()
        atomic.checkpoint("saved the .mlpackage")

    return atomic.replace_folder(target, write, check=not_an_mlpackage, what="an .mlpackage")


def not_an_mlpackage(root: Path) -> str | None:
    """Why the folder ``root`` cannot be proven a Core ML package with nothing else in it
    (None when it can): ``Manifest.json`` lists items, and every other entry is a file or
    folder of ``Data/`` that an item names, or lies inside one."""
    try:
        raw = read_file(root / "Manifest.json", "Manifest.json", max_bytes=1 << 20)
        items = json.loads(raw.decode("utf-8"))["itemInfoEntries"]
        paths = {f"Data/{item['path']}".rstrip("/") for item in items.values()}
    except (AnekitError, ValueError, KeyError, TypeError, AttributeError):
        return "it has no readable Manifest.json listing its items"
    if any(".." in p.split("/") for p in paths):
        return "its Manifest.json names a path outside the package"
    parents = {str(PurePosixPath(p).parents[k]) for p in paths
               for k in range(len(PurePosixPath(p).parents) - 1)}  # fmt: skip
    for here, dirs, names in os.walk(root):
        rel_dir = Path(here).relative_to(root).as_posix()
        for name in (*dirs, *names):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if rel == "Manifest.json" or rel in parents or rel in paths:
                continue
            if any(rel.startswith(f"{p}/") for p in paths) and not os.path.islink(
                Path(here) / name
            ):
                continue
            return f"its Manifest.json does not list '{rel}'"
    return None


class Replay:
    """Replays MIL operations through the pymil builder inside one function."""

    def __init__(self, ct: Any, namer: Namer, flexible: FlexibleShapes | None = None):
        from coremltools.converters.mil.mil import Builder, types

        self.mb = Builder
        self.types = types
        self.namer = namer
        self.flexible = flexible
        self.segment = 0  # the segment being replayed (flexible's keys)

    def const(self, value: Any, reader: BlobReader | None, name: str) -> Any:
        return self.mb.const(val=self.literal(value, reader), name=name)

    def literal(self, value: Any, reader: BlobReader | None) -> Any:
        if isinstance(value, mil.BlobFile):
            if reader is None:
                raise AnekitError(f"BLOBFILE {value.path!r} but the segment has no weight file")
            shape = tuple(int(d) for d in value.type.shape)  # type: ignore[arg-type]
            array = reader.read(value.offset, shape, value.type.dtype)
            # coremltools tags sub-byte consts (compressed weights) by dtype metadata
            sub_byte = getattr(self.types, f"np_{value.type.dtype}_dtype", None)
            return array if sub_byte is None else array.astype(sub_byte)
        if isinstance(value, mil.Scalar):
            if value.dtype == "string":
                return value.value
            return _numpy(value.dtype).type(value.value)
        if isinstance(value, mil.Tensor):
            return np.array(value.data, dtype=_numpy(value.dtype))
        raise AnekitError(f"{type(value).__name__} values cannot be exported to Core ML")

    def cast(self, var: Any, dtype: str) -> Any:
        if self.dtype_of(var) == dtype:
            return var
        if dtype == "bool":
            return self.mb.not_equal(x=var, y=np.array(0, dtype=_numpy(self.dtype_of(var))).item(),
                                     name=self.namer.fresh("to_bool"))  # fmt: skip
        return self.mb.cast(x=var, dtype=dtype, name=self.namer.fresh(f"to_{dtype}"))

    def dtype_of(self, var: Any) -> str:
        return self.types.builtin_to_string(var.dtype)


def _build(
    ct: Any,
    manifest: Manifest,
    programs: Sequence[mil.MilProgram],
    weights: Sequence[BlobReader | None],
    options: CoreMLOptions | None = None,
    names: dict[str, str] | None = None,
    flexible: FlexibleShapes | None = None,
) -> Any:
    """The pymil program; ``names``, when given, is filled with each port's name in it."""
    options = options or CoreMLOptions()
    names = {} if names is None else names
    from coremltools.converters.mil.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, types
    from coremltools.converters.mil.mil import Program as PyProgram

    namer = Namer()
    replay = Replay(ct, namer, flexible)
    placeholders = {}
    input_names = {}
    for port in manifest.inputs:
        name = namer.fresh(port.name)
        input_names[port.name] = names[port.name] = name
        image = options.images.get(port.name)
        io = "fp16" if image is not None and image.color_layout == "G_FLOAT16" else "fp32"
        dtype = types.string_to_builtin(_port_dtype(port.dtype, options) if image is None else io)
        shape = _input_shape(ct, port, flexible)
        symbolic = shape.symbolic_shape if isinstance(shape, ct.EnumeratedShapes) else shape
        placeholders[name] = mb.placeholder(shape=symbolic, dtype=dtype)
    opset = opset_target(ct, manifest.target.opset)
    prog = PyProgram()
    with Function(placeholders, opset_version=opset) as func:
        values: dict[tuple, Any] = {
            ("input", p.name): func.inputs[input_names[p.name]] for p in manifest.inputs
        }
        replay_segments(replay, manifest, programs, weights, values)
        outputs = []
        for port in manifest.outputs:
            var = replay.cast(values[port.source.key], _port_dtype(port.dtype, options))
            names[port.name] = namer.fresh(port.name)
            outputs.append(mb.identity(x=var, name=names[port.name]))
        func.set_outputs(outputs)
        prog.add_function("main", func)
    return prog


def replay_segments(
    replay: Replay,
    manifest: Manifest,
    programs: Sequence[mil.MilProgram],
    weights: Sequence[BlobReader | None],
    values: dict[tuple, Any],
) -> None:
    """Replay every segment inside the current function: ``values`` holds the model inputs'
    vars (keyed ``("input", name)``) and gains each segment output's (``(index, value)``)."""
    from coremltools.converters.mil.mil import Builder as mb

    namer = replay.namer
    for segment, program, reader in zip(manifest.segments, programs, weights, strict=True):
        function = program.function(segment.function)
        bypass = padding_ops(function, segment)
        replay.segment = segment.index
        local: dict[str, Any] = {}
        for io in segment.inputs:
            var = replay.cast(values[io.source.key], io.mil_dtype)
            if io.padded and io.mil_name not in bypass.values():
                widths = [
                    w for s, m in zip(io.shape, io.mil_shape, strict=True) for w in (0, m - s)
                ]
                var = mb.pad(
                    x=var,
                    pad=np.array(widths, np.int32),
                    constant_val=_numpy(io.mil_dtype)(0),
                    name=namer.fresh(f"s{segment.index}_{io.mil_name}_padded"),
                )
            local[io.mil_name] = var
        _replay_function(replay, function, local, reader, f"s{segment.index}_", bypass)
        for io in segment.outputs:
            var = local[io.mil_name]
            if io.padded and io.mil_name not in bypass:
                var = mb.slice_by_size(x=var, begin=np.zeros(len(io.shape), np.int32),
                                       size=np.array(io.shape, np.int32),
                                       name=namer.fresh(f"s{segment.index}_{io.mil_name}_unpadded"))  # fmt: skip
            values[(segment.index, io.value)] = var


def padding_ops(function: mil.Function, segment: Any) -> dict[str, str]:
    """The ops that only add or strip engine I/O padding, which one function does not need:
    output name -> the variable it merely passes on (the slice of a padded input, the pad of
    a padded output). An input read by anything else keeps its padding."""
    readers: dict[str, list[mil.Operation]] = {}
    for op in function.operations:
        for name in op.variables():
            readers.setdefault(name, []).append(op)
    found: dict[str, str] = {}
    for io in segment.inputs:
        ops = readers.get(io.mil_name, [])
        if (
            io.padded
            and len(ops) == 1
            and ops[0].op == "slice_by_size"
            and ops[0].input("x") == mil.Var(io.mil_name)
        ):
            found[ops[0].outputs[0].name] = io.mil_name
    producers = function.producers
    for io in segment.outputs:
        op = producers.get(io.mil_name)
        if io.padded and op is not None and op.op == "pad" and isinstance(op.input("x"), mil.Var):
            found[io.mil_name] = op.input("x").name  # type: ignore[union-attr]
    return found


def _replay_function(
    replay: Replay,
    function: mil.Function,
    local: dict[str, Any],
    reader: BlobReader | None,
    prefix: str,
    bypass: dict[str, str],
) -> None:
    mb = replay.mb
    for op in function.operations:
        if op.outputs[0].name in bypass:  # padding for engine surfaces: pass the value on
            local[op.outputs[0].name] = local[bypass[op.outputs[0].name]]
            continue
        if op.op == "const":
            (out,) = op.outputs
            value = op.attribute("val")
            override = replay.flexible and replay.flexible.consts.get((replay.segment, out.name))
            name = replay.namer.fresh(prefix + out.name)
            var = replay.const(value, reader, name) if override is None else replay.mb.const(
                val=override, name=name)  # fmt: skip
        else:
            kwargs = {key: _argument(replay, arg, local, reader, prefix) for key, arg in op.inputs}
            builder = getattr(mb, op.op, None)
            if builder is None:
                raise AnekitError(f"Core ML has no MIL op '{op.op}'")
            var = builder(**kwargs, name=replay.namer.fresh(prefix + op.outputs[0].name))
        results = list(var) if isinstance(var, (list, tuple)) else [var]
        if len(results) != len(op.outputs):
            raise InternalError(
                f"'{op.op}' gave {len(results)} outputs in coremltools, {len(op.outputs)} in our MIL"
            )
        for binding, result in zip(op.outputs, results, strict=True):
            _check_type(replay, binding, result, op.op)
            local[binding.name] = result


def _argument(
    replay: Replay, arg: Any, local: dict[str, Any], reader: BlobReader | None, prefix: str
) -> Any:
    if isinstance(arg, mil.Var):
        return local[arg.name]
    if isinstance(arg, mil.ArgList):
        return tuple(_argument(replay, a, local, reader, prefix) for a in arg.items)
    return replay.literal(arg, reader)


def _check_type(replay: Replay, binding: mil.Binding, var: Any, op: str) -> None:
    """coremltools' inferred type must be the one our program declares (with flexible
    shapes: a fixed dimension must be the one declared at every shape)."""
    t = binding.type
    declared_shape = () if mil.is_scalar(t) else tuple(getattr(t, "shape", ()))
    dtype = getattr(t, "dtype", None)
    shape = tuple(var.shape) if var.shape is not None else ()
    flexible = replay.flexible
    if flexible is not None:
        from coremltools.converters.mil.mil.types.symbolic import is_symbolic

        everywhere = flexible.declared.get((replay.segment, binding.name), [declared_shape])
        fixed = [k for k, d in enumerate(shape) if not is_symbolic(d)]
        fits = all(len(s) == len(shape) and all(s[k] == shape[k] for k in fixed) for s in everywhere)
        if fits and dtype == replay.dtype_of(var):
            return
        written = ["?" if is_symbolic(d) else int(d) for d in shape]
        raise AnekitError(
            f"'{binding.name}' ({op}) would have the shape {written} at every enumerated shape, "
            f"but the programs compiled for them give it {[list(s) for s in everywhere]}",
            hint="export the enumerated shapes as separate packages",
        )
    shape = tuple(int(d) for d in shape)
    if dtype != replay.dtype_of(var) or declared_shape != shape:
        raise InternalError(
            f"'{binding.name}' ({op}): our MIL declares {t}, coremltools infers "
            f"{replay.dtype_of(var)}{list(shape)}"
        )
