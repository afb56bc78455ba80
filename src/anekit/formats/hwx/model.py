"""`HwxFile`, the decoded .hwx container, and its JSON form (the shape `anekit inspect --json` prints)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from anekit.formats.hwx.banner import Banner
from anekit.formats.hwx.container import (
    Header,
    HwxSegment,
    IoBuffer,
    LoadCommand,
    Section,
    ThreadState,
)
from anekit.formats.hwx.descriptors import TaskDescriptor
from anekit.formats.hwx.relocations import Relocation
from anekit.formats.hwx.symbols import CatalogType, Symbol, Tensor, WeightTile


@dataclass(frozen=True)
class HwxFile:
    """Everything decoded from one .hwx file; `as_dict()` is its JSON form."""

    size: int
    header: Header
    commands: tuple[LoadCommand, ...]
    segments: tuple[HwxSegment, ...]
    io_buffers: tuple[IoBuffer, ...]
    threads: tuple[ThreadState, ...]
    banner: Banner | None
    symbols: tuple[Symbol, ...]
    type_catalog: tuple[CatalogType, ...]
    tensors: tuple[Tensor, ...]
    weight_tiles: tuple[WeightTile, ...]
    generation: str | None  # e.g. "h13"; None when no register table is known for the cpusubtype
    task_descriptors: tuple[TaskDescriptor, ...]
    relocations: tuple[Relocation, ...]
    notes: tuple[str, ...]

    @property
    def sections(self) -> tuple[Section, ...]:
        return tuple(section for segment in self.segments for section in segment.sections)

    def section(self, segment: str, name: str) -> Section | None:
        return next((s for s in self.sections if s.segment == segment and s.name == name), None)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.role == "input")

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.role == "output")

    def tensor(self, name: str) -> Tensor:
        for tensor in self.tensors:
            if tensor.name == name:
                return tensor
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": "hwx",
            "size": self.size,
            "header": asdict(self.header),
            "generation": self.generation,
            "build": _build(self.banner),
            "load_commands": [_command(c) for c in self.commands],
            "segments": [_segment(s) for s in self.segments],
            "io_buffers": [asdict(b) for b in self.io_buffers],
            "threads": [
                {
                    "flavor": t.flavor,
                    "count": t.count,
                    "words": list(t.words),
                    "strings": list(t.strings),
                    "command_offset": t.command_offset,
                }
                for t in self.threads
            ],
            "type_catalog": [asdict(entry) for entry in self.type_catalog],
            "tensors": [_tensor(t) for t in self.tensors],
            "weights": [asdict(tile) for tile in self.weight_tiles],
            "task_descriptors": [_descriptor(d) for d in self.task_descriptors],
            "relocations": [asdict(r) for r in self.relocations],
            "symbols": [
                {
                    "index": s.index,
                    "name": s.name,
                    "type": s.type,
                    "sect": s.sect,
                    "desc": s.desc,
                    "value": s.value,
                }
                for s in self.symbols
            ],
            "notes": list(self.notes),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.as_dict(), indent=indent)


def _build(banner: Banner | None) -> dict[str, Any]:
    if banner is None:
        return {
            "compiler": None,
            "version": None,
            "target": None,
            "flags": [],
            "input": None,
            "output": None,
            "format": None,
            "modules": [],
        }
    return {
        "compiler": banner.compiler,
        "version": banner.version,
        "target": banner.target,
        "flags": list(banner.flags),
        "input": banner.input,
        "output": banner.output,
        "format": banner.format,
        "modules": [{"name": m.name, "properties": dict(m.properties)} for m in banner.modules],
    }


def _command(command: LoadCommand) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "cmd": command.cmd,
        "kind": command.kind,
        "offset": command.offset,
        "size": command.size,
    }
    if command.kind == "unknown":
        entry["data"] = command.data.hex()
    return entry


def _segment(segment: HwxSegment) -> dict[str, Any]:
    entry = asdict(segment)
    entry["sections"] = [asdict(section) for section in segment.sections]
    return entry


def _tensor(tensor: Tensor) -> dict[str, Any]:
    return {
        "name": tensor.name,
        "role": tensor.role,
        "shape": list(tensor.shape),
        "strides": list(tensor.strides),
        "dtype": tensor.dtype,
        "element_type_id": tensor.element_type_id,
        "axes": [asdict(axis) for axis in tensor.axes],
        "address": tensor.address,
    }


def _descriptor(descriptor: TaskDescriptor) -> dict[str, Any]:
    return {
        "index": descriptor.index,
        "offset": descriptor.offset,
        "size": descriptor.size,
        "header": list(descriptor.header),
        "next_offset": descriptor.next_offset,
        "streams": [
            {
                "name": s.name,
                "offset": s.offset,
                "header": s.header,
                "address": s.address,
                "words": list(s.words),
            }
            for s in descriptor.streams
        ],
        "fields": dict(descriptor.fields),
        "inferred_fields": dict(descriptor.inferred),
        "unknown_bits": {f"0x{address:05x}": bits for address, bits in descriptor.unknown.items()},
        "note": descriptor.note,
    }
