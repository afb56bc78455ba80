"""Checking a parsed manifest: every field's type and range (errors name the field's path),
relative paths, and the wiring between segments."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from anekit.errors import FormatError

from .model import (
    _NAME,
    _SHA256,
    DEVICES,
    FORMAT,
    IR_DTYPES,
    MANIFEST,
    MAX_RANK,
    MIL_DTYPES,
    SCHEMA_VERSION,
    FileEntry,
    Manifest,
    Port,
    SegmentEntry,
    SegmentIO,
    Source,
    TargetInfo,
)


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
