"""`Program`: a loaded bundle (or one MIL file) that runs its segments in order, many times.

A program runs on any backend of `anekit.runtime.backends` that runs segments: ``sim``
(default: fp16 storage between ops; CPU segments are fp32 programs and run in fp32) or
``sim-fp32`` (the same MIL widened to fp32), and later the real engine.

Values cross segment boundaries as the manifest wires them; engine I/O padding is added
before a segment runs and stripped after, and every value is handed to callers in the
model's own dtypes (floats as float32, integers as their IR width).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from anekit.atomic import locked_folder
from anekit.errors import AnekitError, FormatError, check_input_names, path_argument
from anekit.files import regular_file
from anekit.formats import mil
from anekit.formats.blob import BlobReader, ChunkedBytes
from anekit.formats.bundle import (
    REPORT,
    Bundle,
    Manifest,
    Port,
    SegmentEntry,
    SegmentIO,
    Source,
    TargetInfo,
    check_blobfiles,
    read_bundle,
)
from anekit.ir.dtypes import to_dtype
from anekit.ir.graph import Value
from anekit.ir.interpret import coerce_feed
from anekit.runtime import backends
from anekit.runtime.backends import SegmentRunner, SegmentSource

# MIL dtype of a standalone program's I/O -> the dtype callers see
_CALLER_DTYPE = {"fp16": "fp32", "fp32": "fp32", "int32": "int32", "int8": "int8",
                 "uint8": "uint8", "bool": "bool"}  # fmt: skip


class Program:
    """Segments of MIL with the manifest that wires them; see :func:`load`.

    ``programs[i]`` is segment i's parsed MIL; ``weights[i]`` its weight file (a path on
    disk, bytes in memory, or None). Each backend loads the segments on first use.
    """

    def __init__(
        self,
        manifest: Manifest,
        programs: Sequence[mil.MilProgram],
        weights: Sequence[Path | bytes | ChunkedBytes | None],
        *,
        where: str = "program",
        base_dirs: Sequence[Path | None] | None = None,
        root: Path | None = None,
        weight_map: Path | bytes | None = None,
    ):
        if not (len(programs) == len(weights) == len(manifest.segments)):
            raise AnekitError("a program needs one MIL program and weight source per segment")
        self.manifest = manifest
        self.programs = tuple(programs)
        self.weights = tuple(weights)
        self.where = where
        self._base_dirs = tuple(base_dirs) if base_dirs is not None else (None,) * len(programs)
        self._loaded: dict[str, list[SegmentRunner]] = {}
        self.root = root  # the bundle directory, for a bundle on disk
        self._weight_map_source = weight_map
        self._weight_map: Any = None
        # runners replaced by a weight update, not yet released: (backend, runner)
        self._retired: list[tuple[str, SegmentRunner]] = []
        # (st_dev, st_ino) of the bundle folder it was loaded from: an update checks that the
        # folder was not replaced since
        self.folder_id: tuple[int, int] | None = None
        self.lora_alpha: float | None = None  # the LoRA alpha compiled in, when known
        for segment, program in zip(manifest.segments, self.programs, strict=True):
            _check_signature(segment, program, where)

    # --- description ---------------------------------------------------------------------

    @property
    def inputs(self) -> tuple[Port, ...]:
        return self.manifest.inputs

    @property
    def outputs(self) -> tuple[Port, ...]:
        return self.manifest.outputs

    @property
    def target(self) -> TargetInfo:
        return self.manifest.target

    @property
    def segments(self) -> tuple[SegmentEntry, ...]:
        return self.manifest.segments

    def __repr__(self) -> str:
        ane = sum(1 for s in self.segments if s.device == "ane")
        return (
            f"Program({self.manifest.model!r}, target={self.target.name!r}, "
            f"{ane} ANE and {len(self.segments) - ane} CPU segment(s))"
        )

    # --- running -------------------------------------------------------------------------

    def run(self, feeds: Mapping[str, Any], backend: str = "sim") -> dict[str, np.ndarray]:
        """Run every segment in order; returns the model outputs keyed by name."""
        programs = self.runners(backend)
        env: dict[tuple, np.ndarray] = {
            ("input", n): a for n, a in self._check_feeds(feeds).items()
        }
        for segment, runner in zip(self.segments, programs, strict=True):
            args = {io.mil_name: to_program(env[io.source.key], io) for io in segment.inputs}
            results = runner.run(args)
            for io in segment.outputs:
                env[(segment.index, io.value)] = from_program(results[io.mil_name], io)
        return {p.name: env[p.source.key] for p in self.outputs}

    def __call__(self, **feeds: Any) -> dict[str, np.ndarray]:
        return self.run(feeds)

    def _check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return check_feeds({p.name: p for p in self.inputs}, feeds, "the program takes")

    def session(
        self, backend: str = "sim", state: Mapping[str, str] | None = None, guard: str | None = None
    ) -> Any:
        """A `anekit.runtime.session.Session`: this program loaded once on ``backend``, run
        step after step; ``state`` maps inputs to the outputs fed back into them; a step
        whose ``guard`` output is not all finite keeps the state as it was."""
        from anekit.runtime.session import Session

        return Session(self, backend, state, guard)

    def runners(self, backend: str) -> list[SegmentRunner]:
        """Each segment loaded on ``backend`` (loaded once, then shared by every run)."""
        found = self._loaded.get(backend)
        if found is None:
            chosen = backends.get(backend)
            chosen.check_available()
            found = self._loaded[backend] = [
                chosen.prepare(self.segment_source(i)) for i in range(len(self.programs))
            ]
        return found

    def segment_source(self, i: int) -> SegmentSource:
        """What a backend needs to load segment ``i``."""
        return SegmentSource(
            self.programs[i],
            self.weights[i],
            self._base_dirs[i],
            self.segments[i],
            f"{self.where}: segment {i}",
            self.target.name,
        )

    def loaded_runners(self) -> dict[str, list[SegmentRunner]]:
        """backend name -> its loaded segments, for every backend used so far."""
        return dict(self._loaded)

    # --- weights -------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        """A digest of every segment's MIL text and weight keys (Orion section 5.1): a
        weight update leaves it unchanged."""
        from anekit.codegen.weight_map import identity

        return identity(self)

    def weight_map(self) -> Any:
        """Where each source weight lies in the weight files (`anekit.codegen.weight_map`)."""
        from anekit.codegen.weight_map import read

        if self._weight_map is None:
            self._weight_map = read(self._weight_map_source, self.where, len(self.segments))
        return self._weight_map

    def weight_names(self) -> list[str]:
        """The source model's weights (ONNX initializer or builder constant names) that
        :meth:`update_weights` can change without recompiling."""
        return list(self.weight_map().weights)

    def update_weights(self, updates: Mapping[str, Any], *, verify: bool = True) -> Any:
        """Write new values of source weights into the weight files (atomically, digests
        updated, MIL untouched) and reload them where loaded; returns an `UpdateReport`."""
        from anekit.runtime.weight_update import update_weights

        return update_weights(self, updates, verify=verify)

    def check_reloadable(self) -> None:
        """Refuse, before anything is written, a weight update that a backend this program
        is loaded on cannot reload (it does not declare ``weight_reload``)."""
        for name in self._loaded:
            if not backends.get(name).capabilities.weight_reload:
                raise AnekitError(
                    f"the program is loaded on backend '{name}', which cannot reload weights",
                    where=self.where,
                    hint=f"release it first (program.release({name!r})), then update",
                )

    def replace_weights(
        self, manifest: Manifest, weights: Sequence[Path | bytes | ChunkedBytes | None], changed: Sequence[int]
    ) -> None:
        """Take new weight files for the segments ``changed`` and reload them on every
        loaded backend (sessions pick the new runners up on their next step)."""
        self.manifest = manifest
        self.weights = tuple(weights)
        for name, runners in self._loaded.items():
            chosen = backends.get(name)
            for i in changed:
                fresh = chosen.prepare(self.segment_source(i))
                # the old one's state is read from it before release: see Session._rebind
                self._retired.append((name, runners[i]))
                runners[i] = fresh

    def release(self, backend: str) -> None:
        """Unload every segment from ``backend`` (an engine program frees its slot)."""
        chosen = backends.get(backend)
        for runner in self._loaded.pop(backend, ()):
            chosen.release(runner)
        for name, runner in self._retired:
            backends.get(name).release(runner)
        self._retired.clear()

    # --- export --------------------------------------------------------------------------

    def save_mlpackage(self, path: str | os.PathLike[str], options: Any = None, **fields: Any) -> Path:
        """The whole model as one Core ML mlprogram (needs the ``coreml`` extra); ``options``
        (`anekit.codegen.coreml_options.CoreMLOptions`) or its fields as keywords: fp16 I/O,
        image inputs, class labels, metadata, compute units, deployment target."""
        from anekit.codegen.coreml_options import given_options
        from anekit.codegen.mlpackage import export_mlpackage

        options = given_options(options, fields)
        if options.enumerated_shapes:
            raise AnekitError(
                "a compiled program has the fixed shapes it was compiled for; enumerated shapes "
                "compile the model again at each",
                hint="anekit.compile(MODEL, ...).save_mlpackage(..., enumerated_shapes=...), or "
                "anekit compile MODEL --mlpackage PATH --enumerated-shape NAME=DIMS,DIMS",
            )
        readers = [_reader(w) for w in self.weights]
        try:
            return export_mlpackage(self.manifest, self.programs, readers, path, options)
        finally:
            for r in readers:
                if r is not None:
                    r.close()


def load(path: str | os.PathLike[str], *, verify: bool = True) -> Program:
    """Load a bundle directory (``NAME.anekit``) or a single MIL file (``model.mil``).

    A bundle is read as untrusted input: schema, paths, sizes, sha256 digests (``verify``)
    and every BLOBFILE are checked before anything runs.
    """
    p = path_argument(path, "the program to load")
    if p.is_dir():
        from anekit.runtime.weight_update import recover

        if (p / "manifest.json").is_file():
            recover(p)  # finish (or clear away) a weight update a killed process left
        # read under the bundle's shared lock: never half-way through a writer's update
        with locked_folder(p, exclusive=False):
            folder = os.stat(p)
            program = from_bundle(read_bundle(p, verify=verify))
        program.folder_id = (folder.st_dev, folder.st_ino)  # a recompile replaces the folder
        return program
    regular_file(p, "program", hint="pass an .anekit bundle directory or a .mil file")
    if p.suffix.lower() in _MODEL_SUFFIXES:  # a model, not a compiled program
        raise FormatError(
            f"{_MODEL_SUFFIXES[p.suffix.lower()]} is a model, not a compiled program: "
            "anekit.load reads what anekit.compile saved (an .anekit bundle) or MIL text",
            where=str(p),
            hint=f"compile it first (anekit.compile('{p}', 'm4').save('model.anekit'), or "
            f"`anekit compile {p} -o model.anekit`), or use anekit.load_or_compile('{p}', 'm4'), "
            "which compiles it once and keeps the program in the cache",
        )
    return _load_mil_file(p)


# files anekit.load is sometimes given that are models to compile, by suffix
_MODEL_SUFFIXES = {".onnx": "an ONNX file"}


def from_bundle(bundle: Bundle) -> Program:
    """A Program over the bundle's verified bytes: nothing is read from disk again."""
    programs, weights = [], []
    for segment in bundle.manifest.segments:
        program = mil.parse_bytes(bundle.read(segment.program), f"{bundle.root}/{segment.program}")
        check_blobfiles(bundle, segment, program)
        programs.append(program)
        weights.append(bundle.read(segment.weights) if segment.weights is not None else None)
    from anekit.codegen.weight_map import WEIGHT_MAP

    program = Program(
        bundle.manifest, programs, weights, where=str(bundle.root), root=bundle.root,
        weight_map=bundle.read(WEIGHT_MAP) if WEIGHT_MAP in bundle.manifest.files else None,
    )  # fmt: skip
    program.lora_alpha = _compiled_lora_alpha(bundle)
    return program


def _compiled_lora_alpha(bundle: Bundle) -> float | None:
    """The LoRA alpha the bundle's report records (None: compiled without LoRA). Only a
    program with adapter inputs has one, so no other load parses the report."""
    from anekit.lora import adapter_inputs

    names = [port.name for port in bundle.manifest.inputs]
    if REPORT not in bundle.manifest.files or not adapter_inputs(names):
        return None
    where = f"{bundle.root}/{REPORT}"
    try:
        report = json.loads(bundle.read(REPORT))
    except (ValueError, RecursionError):
        raise FormatError("the compile report is not JSON", where=where) from None
    alpha = report.get("lora_alpha") if isinstance(report, dict) else None
    if alpha is None:
        return None
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not (
        math.isfinite(alpha) and alpha > 0
    ):
        raise FormatError(f"lora_alpha {alpha!r} is not a number above 0", where=where)
    return float(alpha)


def _load_mil_file(path: Path) -> Program:
    """One MIL file as a one-segment program: its function's I/O, no padding, device 'ane'
    for fp16 programs and 'cpu' otherwise."""
    program = mil.parse_file(path)
    function = program.function("main")
    ins, outs = [], []
    for b in function.inputs:
        shape, dtype = _static(b.type, str(path), b.name)
        src = Source(input=b.name)
        ins.append(SegmentIO(b.name, b.name, _CALLER_DTYPE[dtype], dtype, shape, shape, src))
    types = function.types()
    for name in function.outputs:
        shape, dtype = _static(types[name], str(path), name)
        outs.append(SegmentIO(name, name, _CALLER_DTYPE[dtype], dtype, shape, shape))
    fp16 = any(io.mil_dtype == "fp16" for io in (*ins, *outs))
    segment = SegmentEntry(0, "ane" if fp16 else "cpu", path.name, None, "main",
                           len(function.operations), tuple(ins), tuple(outs), None, None)  # fmt: skip
    manifest = Manifest(
        model=path.stem,
        generator="",
        target=TargetInfo("unknown", "unknown", program.version, function.opset or ""),
        inputs=tuple(Port(io.value, io.dtype, io.shape) for io in ins),
        outputs=tuple(
            Port(io.value, io.dtype, io.shape, Source(segment=0, value=io.value)) for io in outs
        ),
        segments=(segment,),
        files={},
    )
    weights = path.parent / "weights" / "weight.bin"
    return Program(
        manifest, [program], [weights if weights.is_file() else None], where=str(path),
        base_dirs=[path.parent],
    )  # fmt: skip


def _static(t: Any, where: str, name: str) -> tuple[tuple[int, ...], str]:
    if isinstance(t, mil.ScalarType):
        dtype, shape = t.dtype, ()
    elif isinstance(t, mil.MilTensorType) and t.is_static:
        dtype, shape = t.dtype, tuple(int(d) for d in t.shape)  # type: ignore[arg-type]
    else:
        raise FormatError(f"'{name}' has the type {t}; only static tensors can be run", where=where)
    if dtype not in _CALLER_DTYPE:
        raise FormatError(f"'{name}' has the dtype {dtype}, which anekit cannot feed", where=where)
    return shape, dtype


def _check_signature(segment: SegmentEntry, program: mil.MilProgram, where: str) -> None:
    """The program's main function takes and returns what the manifest says."""
    function = program.function(segment.function)
    declared = {b.name: b.type for b in function.inputs}
    types = function.types()
    for kind, ports, names in (
        ("input", segment.inputs, list(declared)),
        ("output", segment.outputs, list(function.outputs)),
    ):
        if sorted(names) != sorted(p.mil_name for p in ports):
            raise FormatError(
                f"segment {segment.index}'s program has {kind}s {names}, the manifest lists "
                f"{[p.mil_name for p in ports]}",
                where=where,
            )
        for p in ports:
            t = types[p.mil_name]
            shape = () if mil.is_scalar(t) else getattr(t, "shape", None)
            if getattr(t, "dtype", None) != p.mil_dtype or tuple(shape or ()) != p.mil_shape:
                raise FormatError(
                    f"segment {segment.index}: {kind} '{p.mil_name}' is {t} in the program, "
                    f"the manifest says {p.mil_dtype}{list(p.mil_shape)}",
                    where=where,
                )


def check_feeds(
    ports: Mapping[str, Port], feeds: Mapping[str, Any], takes: str, note: str = ""
) -> dict[str, np.ndarray]:
    """``feeds`` checked against ``ports`` (names, then each value's shape and dtype), as the
    ports' dtypes; errors say ``takes (name: dtype[shape], ...)note``."""
    if not isinstance(feeds, Mapping) or feeds.keys() != ports.keys():
        # the message (every port as text) only when it is needed
        sig = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in ports.values())
        check_input_names(ports, feeds, f"{takes} ({sig}){note}")
    return {n: coerce_feed(_feed_value(p), feeds[n]) for n, p in ports.items()}


@functools.lru_cache(maxsize=4096)
def _feed_value(port: Port) -> Value:
    """The graph value a port's feeds are checked against, made once per port (a Value
    costs 1.5 us to build: a streaming model's runs of ~200 us built two each)."""
    return Value(port.name, port.shape, to_dtype(port.dtype))


def to_program(array: np.ndarray, io: SegmentIO) -> np.ndarray:
    """A value as the program takes it: its MIL dtype's storage, padded to ``mil_shape``."""
    if io.mil_dtype in ("fp16", "fp32"):
        array = np.asarray(array, dtype=np.float32)
    elif io.mil_dtype != "bool":
        array = np.asarray(array)  # the simulator range-checks integers against the MIL type
    if io.padded:
        # zeros and one slice assignment (np.pad's general machinery costs ~30 us a call)
        padded = np.zeros(io.mil_shape, array.dtype)
        padded[tuple(slice(0, s) for s in io.shape)] = array
        array = padded
    return array


def from_program(array: np.ndarray, io: SegmentIO) -> np.ndarray:
    """A program result as the model's value: padding stripped, the value's own dtype."""
    array = np.asarray(array)
    if io.padded:
        array = array[tuple(slice(0, s) for s in io.shape)]
    # np.asarray keeps a scalar's rank 0 (np.ascontiguousarray makes it shape [1])
    return np.asarray(array, dtype=_numpy_dtype(io.dtype), order="C")


@functools.lru_cache(maxsize=64)
def _numpy_dtype(name: str) -> np.dtype:
    """A value dtype's numpy dtype, looked up once (1.5 us a call: two per streaming step)."""
    return to_dtype(name).numpy


def _reader(weights: Path | bytes | ChunkedBytes | None) -> BlobReader | None:
    return None if weights is None else BlobReader(weights)


def from_contents(contents: Any, *, where: str = "compiled model") -> Program:
    """A Program over a bundle built in memory (`anekit.codegen.bundle.BundleContents`)."""
    manifest: Manifest = contents.manifest
    # weight files as their chunks (the compiler's arrays), never joined into a second copy
    weights = [None if s.weights is None else contents.payload[s.weights].buffer()
               for s in manifest.segments]  # fmt: skip
    from anekit.codegen.weight_map import WEIGHT_MAP

    files = contents.files
    raw = files[WEIGHT_MAP] if WEIGHT_MAP in files else None
    return Program(manifest, contents.programs, weights, where=where, weight_map=raw)
