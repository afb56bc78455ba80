"""The anekit bundle: manifest schema, canonical JSON, and a reader that treats a bundle as untrusted.

A bundle is a directory ``NAME.anekit/``::

    manifest.json                      this schema (sorted keys, no timestamps)
    report.json                        the compile report
    segments/<i>/model.mil             one MIL program per segment, in execution order
    segments/<i>/weights/weight.bin    its weights (absent when the program has none)

Manifest (``schema_version`` 1)::

    {"format": "anekit-bundle", "schema_version": 1, "generator": "anekit 0.1.0",
     "model": "name", "target": {"name", "engine", "program_version", "opset"},
     "inputs":  [{"name", "dtype", "shape"}],
     "outputs": [{"name", "dtype", "shape", "source"}],
     "segments": [{"index", "device": "ane"|"cpu", "program", "weights": path|null,
                   "function": "main", "nodes": count,
                   "inputs":  [{"value", "mil_name", "dtype", "mil_dtype", "shape", "mil_shape",
                                "source"}],
                   "outputs": [{"value", "mil_name", "dtype", "mil_dtype", "shape", "mil_shape"}],
                   "input_alloc_bytes": int|null, "output_alloc_bytes": int|null}],
     "files": {"relative/path": {"sha256": hex, "size": bytes}}}

A ``source`` is ``{"input": NAME}`` (a model input) or ``{"segment": I, "value": V}`` (output
``V`` of an earlier segment). I/O of a program carries ``shape`` (the value's) and
``mil_shape`` (the program's): padding sits at the end of each axis, the data in the leading
corner, and the runtime adds and strips it. ``dtype`` is the value's type (what callers see),
``mil_dtype`` the program's.

Reading checks everything before anything is used: the schema (clear messages naming the
field), the wiring (sources exist and come earlier), every path (relative, no ``..``, inside
the bundle after resolving symlinks, a regular file), sizes and sha256 digests, and every
``BLOBFILE`` of every program (its path inside the segment's declared weight file, its
record valid for the declared type). Errors are :class:`anekit.errors.FormatError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from anekit.errors import FormatError

FORMAT = "anekit-bundle"
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
REPORT = "report.json"
MAX_MANIFEST_BYTES = 64 << 20
MAX_RANK = 16
IR_DTYPES = frozenset({"fp32", "fp16", "int8", "uint8", "int32", "int64", "bool"})
MIL_DTYPES = frozenset({"fp16", "fp32", "int8", "uint8", "int32", "bool"})
DEVICES = ("ane", "cpu")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_NAME = re.compile(r"[^\x00-\x1f]{1,1024}\Z")


@dataclass(frozen=True)
class Source:
    """Where a value comes from: a model input, or an output of an earlier segment."""

    input: str | None = None
    segment: int | None = None
    value: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.input is not None:
            return {"input": self.input}
        return {"segment": self.segment, "value": self.value}


@dataclass(frozen=True)
class Port:
    """A model input or output: name, IR dtype, shape, and (outputs) its source."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    source: Source | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}
        if self.source is not None:
            out["source"] = self.source.to_json()
        return out


@dataclass(frozen=True)
class SegmentIO:
    """One program input or output (see the module docstring)."""

    value: str
    mil_name: str
    dtype: str
    mil_dtype: str
    shape: tuple[int, ...]
    mil_shape: tuple[int, ...]
    source: Source | None = None  # inputs only

    @property
    def padded(self) -> bool:
        return self.shape != self.mil_shape

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": self.value,
            "mil_name": self.mil_name,
            "dtype": self.dtype,
            "mil_dtype": self.mil_dtype,
            "shape": list(self.shape),
            "mil_shape": list(self.mil_shape),
        }
        if self.source is not None:
            out["source"] = self.source.to_json()
        return out


@dataclass(frozen=True)
class SegmentEntry:
    """One segment: its device, files and signature."""

    index: int
    device: str
    program: str
    weights: str | None
    function: str
    nodes: int
    inputs: tuple[SegmentIO, ...]
    outputs: tuple[SegmentIO, ...]
    input_alloc_bytes: int | None
    output_alloc_bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "device": self.device,
            "program": self.program,
            "weights": self.weights,
            "function": self.function,
            "nodes": self.nodes,
            "inputs": [p.to_json() for p in self.inputs],
            "outputs": [p.to_json() for p in self.outputs],
            "input_alloc_bytes": self.input_alloc_bytes,
            "output_alloc_bytes": self.output_alloc_bytes,
        }


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int


@dataclass(frozen=True)
class TargetInfo:
    name: str
    engine: str
    program_version: str
    opset: str


@dataclass(frozen=True)
class Manifest:
    """A validated manifest (build one, or read one with :func:`parse_manifest`)."""

    model: str
    generator: str
    target: TargetInfo
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    segments: tuple[SegmentEntry, ...]
    files: Mapping[str, FileEntry]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "generator": self.generator,
            "model": self.model,
            "target": asdict(self.target),
            "inputs": [p.to_json() for p in self.inputs],
            "outputs": [p.to_json() for p in self.outputs],
            "segments": [s.to_json() for s in self.segments],
            "files": {k: asdict(v) for k, v in sorted(self.files.items())},
        }

    def to_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    def referenced_files(self) -> Iterator[str]:
        for s in self.segments:
            yield s.program
            if s.weights is not None:
                yield s.weights


def canonical_json(data: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, fixed indentation, a final newline."""
    return (json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- schema validation ------------------------------------------------------------------------


class _Checker:
    """Reads fields out of parsed JSON with messages that name the field's path."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, path: str, message: str, hint: str | None = None) -> FormatError:
        return FormatError(f"manifest field '{path}': {message}", where=self.where, hint=hint)

    def obj(
        self, data: Any, path: str, required: set[str], optional: set[str] = frozenset()
    ) -> dict:  # type: ignore[assignment]
        if not isinstance(data, dict):
            raise self.fail(path, f"expected an object, found {_kind(data)}")
        missing = sorted(required - data.keys())
        if missing:
            raise self.fail(path, f"missing key(s) {missing}")
        unknown = sorted(data.keys() - required - optional)
        if unknown:
            raise self.fail(path, f"unknown key(s) {unknown}")
        return data

    def str_(
        self, data: Any, path: str, choices: frozenset[str] | tuple[str, ...] | None = None
    ) -> str:
        if not isinstance(data, str) or not _NAME.match(data):
            raise self.fail(
                path, f"expected a non-empty string without control characters, found {_kind(data)}"
            )
        if choices is not None and data not in choices:
            raise self.fail(path, f"{data!r} is not one of {sorted(choices)}")
        return data

    def int_(self, data: Any, path: str, low: int = 0, high: int = 2**63 - 1) -> int:
        if not isinstance(data, int) or isinstance(data, bool) or not low <= data <= high:
            raise self.fail(path, f"expected an integer in [{low}, {high}], found {data!r}")
        return data

    def list_(self, data: Any, path: str, limit: int = 1 << 20) -> list:
        if not isinstance(data, list):
            raise self.fail(path, f"expected a list, found {_kind(data)}")
        if len(data) > limit:
            raise self.fail(path, f"has {len(data)} entries, more than {limit}")
        return data

    def shape(self, data: Any, path: str) -> tuple[int, ...]:
        dims = self.list_(data, path, MAX_RANK)
        return tuple(self.int_(d, f"{path}[{i}]", 0, 2**31 - 1) for i, d in enumerate(dims))

    def source(self, data: Any, path: str) -> Source:
        if isinstance(data, dict) and "input" in data:
            self.obj(data, path, {"input"})
            return Source(input=self.str_(data["input"], f"{path}.input"))
        self.obj(data, path, {"segment", "value"})
        return Source(
            segment=self.int_(data["segment"], f"{path}.segment"),
            value=self.str_(data["value"], f"{path}.value"),
        )

    def path(self, data: Any, path: str) -> str:
        text = self.str_(data, path)
        check_relative(text, self.where, f"manifest field '{path}': path")
        return text


def check_relative(text: str, where: str, what: str = "path") -> PurePosixPath:
    """A bundle path: relative, POSIX, no '..', no empty or '.' parts, no backslashes."""
    pure = PurePosixPath(text)
    bad = (
        not text
        or text.startswith("/")
        or "\\" in text
        or ":" in text
        or pure.is_absolute()
        or any(part in ("", ".", "..") for part in text.split("/"))
    )
    if bad:
        raise FormatError(
            f"{what} {text!r} must be relative to the bundle, without '..' or '.' parts",
            where=where,
        )
    return pure


def _kind(data: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(data), type(data).__name__)  # fmt: skip


def _io(c: _Checker, data: Any, path: str, with_source: bool) -> SegmentIO:
    keys = {"value", "mil_name", "dtype", "mil_dtype", "shape", "mil_shape"}
    c.obj(data, path, keys | ({"source"} if with_source else set()))
    shape, mil_shape = (
        c.shape(data["shape"], f"{path}.shape"),
        c.shape(data["mil_shape"], f"{path}.mil_shape"),
    )
    if len(shape) != len(mil_shape) or any(m < s for s, m in zip(shape, mil_shape, strict=False)):
        raise c.fail(
            f"{path}.mil_shape", f"{list(mil_shape)} does not hold the shape {list(shape)}"
        )
    return SegmentIO(
        value=c.str_(data["value"], f"{path}.value"),
        mil_name=c.str_(data["mil_name"], f"{path}.mil_name"),
        dtype=c.str_(data["dtype"], f"{path}.dtype", IR_DTYPES),
        mil_dtype=c.str_(data["mil_dtype"], f"{path}.mil_dtype", MIL_DTYPES),
        shape=shape,
        mil_shape=mil_shape,
        source=c.source(data["source"], f"{path}.source") if with_source else None,
    )


def _segment(c: _Checker, data: Any, i: int) -> SegmentEntry:
    path = f"segments[{i}]"
    keys = {"index", "device", "program", "weights", "function", "nodes", "inputs", "outputs",
            "input_alloc_bytes", "output_alloc_bytes"}  # fmt: skip
    c.obj(data, path, keys)
    if c.int_(data["index"], f"{path}.index") != i:
        raise c.fail(
            f"{path}.index", f"is {data['index']}, expected {i} (segments are listed in order)"
        )
    allocs = [
        None if data[k] is None else c.int_(data[k], f"{path}.{k}", 0, 2**40)
        for k in ("input_alloc_bytes", "output_alloc_bytes")
    ]
    return SegmentEntry(
        index=i,
        device=c.str_(data["device"], f"{path}.device", DEVICES),
        program=c.path(data["program"], f"{path}.program"),
        weights=None if data["weights"] is None else c.path(data["weights"], f"{path}.weights"),
        function=c.str_(data["function"], f"{path}.function"),
        nodes=c.int_(data["nodes"], f"{path}.nodes"),
        inputs=tuple(_io(c, d, f"{path}.inputs[{k}]", True) for k, d in enumerate(c.list_(data["inputs"], f"{path}.inputs"))),
        outputs=tuple(_io(c, d, f"{path}.outputs[{k}]", False) for k, d in enumerate(c.list_(data["outputs"], f"{path}.outputs"))),
        input_alloc_bytes=allocs[0],
        output_alloc_bytes=allocs[1],
    )  # fmt: skip


def parse_manifest(data: Any, where: str = MANIFEST) -> Manifest:
    """A Manifest from parsed JSON, checking the schema and the wiring between segments."""
    c = _Checker(where)
    top = {"format", "schema_version", "generator", "model", "target", "inputs", "outputs",
           "segments", "files"}  # fmt: skip
    if isinstance(data, dict) and data.get("format") != FORMAT:
        raise c.fail(
            "format",
            f"expected {FORMAT!r}, found {data.get('format')!r}",
            hint="is this an anekit bundle?",
        )
    c.obj(data, "", top)
    version = c.int_(data["schema_version"], "schema_version")
    if version != SCHEMA_VERSION:
        raise c.fail("schema_version", f"is {version}; this anekit reads version {SCHEMA_VERSION}",
                     hint="upgrade anekit to read bundles written by a newer version")  # fmt: skip
    t = c.obj(data["target"], "target", {"name", "engine", "program_version", "opset"})
    target = TargetInfo(
        *(c.str_(t[k], f"target.{k}") for k in ("name", "engine", "program_version", "opset"))
    )
    inputs = []
    for i, d in enumerate(c.list_(data["inputs"], "inputs")):
        c.obj(d, f"inputs[{i}]", {"name", "dtype", "shape"})
        inputs.append(Port(c.str_(d["name"], f"inputs[{i}].name"), c.str_(d["dtype"], f"inputs[{i}].dtype", IR_DTYPES),
                           c.shape(d["shape"], f"inputs[{i}].shape")))  # fmt: skip
    outputs = []
    for i, d in enumerate(c.list_(data["outputs"], "outputs")):
        c.obj(d, f"outputs[{i}]", {"name", "dtype", "shape", "source"})
        outputs.append(Port(c.str_(d["name"], f"outputs[{i}].name"), c.str_(d["dtype"], f"outputs[{i}].dtype", IR_DTYPES),
                            c.shape(d["shape"], f"outputs[{i}].shape"), c.source(d["source"], f"outputs[{i}].source")))  # fmt: skip
    segments = tuple(_segment(c, d, i) for i, d in enumerate(c.list_(data["segments"], "segments")))
    files_data = data["files"]
    if not isinstance(files_data, dict):
        raise c.fail("files", f"expected an object, found {_kind(files_data)}")
    files: dict[str, FileEntry] = {}
    for rel, entry in files_data.items():
        path = f"files[{rel!r}]"
        c.path(rel, path)
        c.obj(entry, path, {"sha256", "size"})
        digest = entry["sha256"]
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise c.fail(f"{path}.sha256", "expected 64 lowercase hexadecimal digits")
        files[rel] = FileEntry(digest, c.int_(entry["size"], f"{path}.size"))
    manifest = Manifest(
        model=c.str_(data["model"], "model"),
        generator=c.str_(data["generator"], "generator"),
        target=target,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        segments=segments,
        files=files,
    )
    _check_wiring(c, manifest)
    return manifest


def _check_wiring(c: _Checker, m: Manifest) -> None:
    model_inputs = {p.name: p for p in m.inputs}
    if len(model_inputs) != len(m.inputs):
        raise c.fail("inputs", "names are not unique")
    produced: dict[tuple[int, str], SegmentIO] = {}

    def resolve(src: Source, path: str, shape: tuple[int, ...], dtype: str, before: int) -> None:
        if src.input is not None:
            port = model_inputs.get(src.input)
            if port is None:
                raise c.fail(path, f"names the model input {src.input!r}, which does not exist")
            found_shape, found_dtype = port.shape, port.dtype
        else:
            assert src.segment is not None and src.value is not None
            if src.segment >= before:
                raise c.fail(path, f"reads segment {src.segment}, which does not run before it")
            out = produced.get((src.segment, src.value))
            if out is None:
                raise c.fail(path, f"segment {src.segment} has no output {src.value!r}")
            found_shape, found_dtype = out.shape, out.dtype
        if found_shape != shape or found_dtype != dtype:
            raise c.fail(
                path,
                f"connects a {found_dtype}{list(found_shape)} value to a {dtype}{list(shape)} one",
            )

    for s in m.segments:
        for kind, ports in (("inputs", s.inputs), ("outputs", s.outputs)):
            names = [p.mil_name for p in ports]
            if len(set(names)) != len(names):
                raise c.fail(f"segments[{s.index}].{kind}", "MIL names are not unique")
        for k, p in enumerate(s.inputs):
            assert p.source is not None
            resolve(p.source, f"segments[{s.index}].inputs[{k}].source", p.shape, p.dtype, s.index)
        for p in s.outputs:
            produced[(s.index, p.value)] = p
    for i, port in enumerate(m.outputs):
        assert port.source is not None
        resolve(port.source, f"outputs[{i}].source", port.shape, port.dtype, len(m.segments))
    listed = set(m.files)
    for rel in m.referenced_files():
        if rel not in listed:
            raise c.fail("files", f"has no sha256 for {rel!r}, which a segment uses")


# --- reading a bundle from disk ---------------------------------------------------------------


@dataclass(frozen=True)
class Bundle:
    """A bundle on disk whose manifest and files have been checked."""

    root: Path
    manifest: Manifest

    def path(self, rel: str) -> Path:
        """The file ``rel`` of the bundle, resolved inside it (FormatError otherwise)."""
        return resolve_inside(self.root, rel, str(self.root))


def resolve_inside(root: Path, rel: str, where: str, what: str = "path") -> Path:
    """``root/rel`` after resolving symlinks, refused unless it stays inside ``root``."""
    check_relative(rel, where, what)
    base = root.resolve()
    target = (base / rel).resolve()
    if target != base and base not in target.parents:
        raise FormatError(f"{what} {rel!r} leads outside the bundle (to {target})", where=where)
    return target


def read_bundle(path: str | os.PathLike[str], *, verify: bool = True) -> Bundle:
    """Read and check the bundle directory ``path`` (``verify`` also hashes every file)."""
    root = Path(path)
    where = str(root)
    if not root.is_dir():
        raise FormatError(
            "not a bundle directory" if root.exists() else "no such bundle", where=where
        )
    manifest_path = root / MANIFEST
    if manifest_path.is_symlink() or not manifest_path.is_file():
        raise FormatError(
            f"the bundle has no {MANIFEST} (or it is not a regular file)", where=where
        )
    size = manifest_path.stat().st_size
    if size > MAX_MANIFEST_BYTES:
        raise FormatError(
            f"{MANIFEST} is {size} bytes, more than {MAX_MANIFEST_BYTES}", where=where
        )
    raw = manifest_path.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise FormatError(f"{MANIFEST} is not UTF-8 text", where=where, offset=exc.start) from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{MANIFEST} is not valid JSON: {exc.msg}", where=where, line=exc.lineno,
                          column=exc.colno) from None  # fmt: skip
    except RecursionError:
        raise FormatError(f"{MANIFEST} nests too deeply", where=where) from None
    manifest = parse_manifest(data, f"{where}/{MANIFEST}")
    bundle = Bundle(root, manifest)
    for rel, entry in sorted(manifest.files.items()):
        file = bundle.path(rel)
        if not file.exists():
            raise FormatError(f"the file {rel!r} named in the manifest is missing", where=where)
        if not file.is_file():
            raise FormatError(f"{rel!r} is not a regular file", where=where)
        actual = file.stat().st_size
        if actual != entry.size:
            raise FormatError(
                f"{rel!r} has {actual} bytes, the manifest says {entry.size}", where=where
            )
        if verify and sha256_file(file) != entry.sha256:
            raise FormatError(f"{rel!r} does not match its sha256 in the manifest (modified or corrupt)",
                              where=where)  # fmt: skip
    return bundle


MODEL_PATH = "@model_path/"


def check_blobfiles(bundle: Bundle, segment: SegmentEntry, program: Any) -> None:
    """Every ``BLOBFILE`` of ``program`` (a parsed :class:`anekit.formats.mil.Program`) names
    the segment's declared weight file, through ``@model_path/`` inside the segment's
    directory, and a valid record of the declared type and element count."""
    from anekit.formats.blob import BlobReader
    from anekit.formats.mil import BlobFile

    where = f"{bundle.root}/{segment.program}"
    program_dir = bundle.path(segment.program).parent
    blobs = [
        value
        for function in program.functions
        for op in function.operations
        for _, value in (*op.inputs, *op.attributes)
        if isinstance(value, BlobFile)
    ]
    if not blobs:
        return
    if segment.weights is None:
        raise FormatError(
            "the program reads BLOBFILE weights but the manifest lists no weight file", where=where
        )
    weights = bundle.path(segment.weights)
    with BlobReader(weights) as reader:
        for blob in blobs:
            if not blob.path.startswith(MODEL_PATH):
                raise FormatError(
                    f"BLOBFILE path {blob.path!r} does not start with {MODEL_PATH!r}", where=where
                )
            target = resolve_inside(
                program_dir, blob.path[len(MODEL_PATH) :], where, "BLOBFILE path"
            )
            if target != weights:
                raise FormatError(
                    f"BLOBFILE path {blob.path!r} is not the segment's weight file {segment.weights!r}",
                    where=where,
                )
            record = reader.record(blob.offset)
            shape = blob.type.shape
            if record.dtype.name != blob.type.dtype or not all(isinstance(d, int) for d in shape):
                raise FormatError(
                    f"BLOBFILE at offset {blob.offset} holds {record.dtype.name}, the program declares "
                    f"{blob.type}",
                    where=where,
                )
            count = 1
            for d in shape:
                count *= d  # type: ignore[operator]
            if count != record.count:
                raise FormatError(
                    f"BLOBFILE at offset {blob.offset} holds {record.count} elements, the program "
                    f"declares {blob.type}",
                    where=where,
                )
