"""The bundle manifest as values: ports, segments, files, and its canonical JSON."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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

    @property
    def key(self) -> tuple:
        """The value's key while a program runs: ("input", name) or (segment, value)."""
        return ("input", self.input) if self.input is not None else (self.segment, self.value)

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
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()  # one reused buffer, no copies
