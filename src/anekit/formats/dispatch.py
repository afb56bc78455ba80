"""The dispatch descriptor (ane-container, table 23.2 and listing 23.1): a FlatBuffer naming the
operation chain the runtime submits, one `AneInference` per engine segment bracketed by its
input and output `Cast`s, CPU segments as `CpuInference`.

The root table is the seed's `E5Program` with its four fields at vtable offsets 4, 8, 12,
16 (symbol_names, build_info, sections, format_version = 4), so a descriptor starts with
the vtable the seed gives as its tag (0c00 1400 0400 0800). The seed does not give the
inner tables' fields; anekit's are:

    table BuildInfo { keys: [string]; values: [string]; }
    table Section   { name: string; op_type: ubyte (OpType); inputs: [string];
                      outputs: [string]; program: string; src_type: string; dst_type: string; }

Written and read with the `flatbuffers` library's builder and table accessors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import flatbuffers
from flatbuffers import encode, number_types
from flatbuffers.table import Table

from anekit.errors import FormatError

FORMAT_VERSION = 4
OP_TYPES = ("Cast", "AneInference", "EirInference", "CpuInference", "BnnsCpuInference",
            "MlcCpuInference", "MpsGraphInference", "E5MinimalCpu", "Quant", "Dequant",
            "Barrier", "JitCall")  # fmt: skip
ROOT_VTABLE = bytes.fromhex("0c00140004000800")  # the seed's tag: the root table's vtable head
MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Operation:
    name: str
    op_type: str  # one of OP_TYPES
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    program: str = ""  # the .hwx (AneInference) or segment (CpuInference) it runs
    src_type: str = ""  # Cast: the element types it converts between
    dst_type: str = ""


@dataclass(frozen=True)
class DispatchDescriptor:
    operations: tuple[Operation, ...]
    build_info: tuple[tuple[str, str], ...]
    symbol_names: tuple[str, ...]
    format_version: int = FORMAT_VERSION


# --- writing ------------------------------------------------------------------------------


def _strings(builder: flatbuffers.Builder, values: Sequence[str]) -> int:
    offsets = [builder.CreateString(v) for v in values]
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def _tables(builder: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def write(descriptor: DispatchDescriptor) -> bytes:
    builder = flatbuffers.Builder(1024)
    sections = []
    for op in descriptor.operations:
        if op.op_type not in OP_TYPES:
            raise ValueError(f"unknown operation type {op.op_type!r}")
        name = builder.CreateString(op.name)
        inputs, outputs = _strings(builder, op.inputs), _strings(builder, op.outputs)
        program, src, dst = (
            builder.CreateString(s) for s in (op.program, op.src_type, op.dst_type)
        )
        builder.StartObject(7)
        builder.PrependUOffsetTRelativeSlot(0, name, 0)
        builder.PrependUOffsetTRelativeSlot(2, inputs, 0)
        builder.PrependUOffsetTRelativeSlot(3, outputs, 0)
        builder.PrependUOffsetTRelativeSlot(4, program, 0)
        builder.PrependUOffsetTRelativeSlot(5, src, 0)
        builder.PrependUOffsetTRelativeSlot(6, dst, 0)
        builder.PrependUint8Slot(1, OP_TYPES.index(op.op_type), 255)
        sections.append(builder.EndObject())
    section_vector = _tables(builder, sections)
    keys = _strings(builder, [k for k, _ in descriptor.build_info])
    values = _strings(builder, [v for _, v in descriptor.build_info])
    builder.StartObject(2)
    builder.PrependUOffsetTRelativeSlot(0, keys, 0)
    builder.PrependUOffsetTRelativeSlot(1, values, 0)
    build_info = builder.EndObject()
    names = _strings(builder, descriptor.symbol_names)
    builder.StartObject(4)
    # added last-to-first so the fields sit at table offsets 4, 8, 12, 16 as in the seed
    builder.PrependInt32Slot(3, descriptor.format_version, -1)
    builder.PrependUOffsetTRelativeSlot(2, section_vector, 0)
    builder.PrependUOffsetTRelativeSlot(1, build_info, 0)
    builder.PrependUOffsetTRelativeSlot(0, names, 0)
    builder.Finish(builder.EndObject())
    return bytes(builder.Output())


def program_for_segments(
    segments: Sequence[tuple[str, str, Sequence[str], Sequence[str]]],
    build_info: Sequence[tuple[str, str]],
) -> DispatchDescriptor:
    """(device "ane"/"cpu", program file, inputs, outputs) per segment -> the operation
    chain: Cast -> AneInference -> Cast for each engine segment, CpuInference for the CPU."""
    ops: list[Operation] = []
    for index, (device, program, inputs, outputs) in enumerate(segments):
        if device == "ane":
            engine_in = tuple(f"{v}@ane" for v in inputs)
            engine_out = tuple(f"{v}@ane" for v in outputs)
            ops.append(Operation(f"segment{index}_cast_in", "Cast", tuple(inputs), engine_in,
                                 src_type="float32", dst_type="float16"))  # fmt: skip
            ops.append(Operation(f"segment{index}_ane", "AneInference", engine_in, engine_out,
                                 program=program))  # fmt: skip
            ops.append(Operation(f"segment{index}_cast_out", "Cast", engine_out, tuple(outputs),
                                 src_type="float16", dst_type="float32"))  # fmt: skip
        else:
            ops.append(Operation(f"segment{index}_cpu", "CpuInference", tuple(inputs),
                                 tuple(outputs), program=program))  # fmt: skip
    names: dict[str, None] = {}
    for op in ops:
        names.update(dict.fromkeys((op.name, *op.inputs, *op.outputs)))
        if op.program:
            names[op.program] = None
    return DispatchDescriptor(tuple(ops), tuple(build_info), tuple(names))


# --- reading ------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes, where: str | None):
        self.data = data
        self.where = where

    def fail(self, message: str, offset: int | None = None) -> FormatError:
        return FormatError(message, where=self.where, offset=offset)

    def table(self, position: int, what: str) -> Table:
        if not 0 <= position <= len(self.data) - 4:
            raise self.fail(f"expected {what} inside the file", position)
        vtable = position - encode.Get(number_types.SOffsetTFlags.packer_type, self.data, position)
        if not 0 <= vtable <= len(self.data) - 4:
            raise self.fail(f"expected the vtable of {what} inside the file", position)
        size = encode.Get(number_types.VOffsetTFlags.packer_type, self.data, vtable)
        if size < 4 or size % 2 or vtable + size > len(self.data):
            raise self.fail(f"expected a vtable for {what} of an even size >= 4", vtable)
        return Table(bytearray(self.data), position)

    def _field(self, table: Table, slot: int, size: int, what: str) -> int | None:
        offset = table.Offset(4 + 2 * slot)
        if not offset:
            return None
        at = table.Pos + offset
        if at + size > len(self.data):
            raise self.fail(f"expected {what} inside the file", at)
        return at

    def string(self, table: Table, slot: int, what: str) -> str:
        at = self._field(table, slot, 4, what)
        if at is None:
            return ""
        return self._string_at(
            at + encode.Get(number_types.UOffsetTFlags.packer_type, self.data, at), what
        )

    def _string_at(self, at: int, what: str) -> str:
        if not 0 <= at <= len(self.data) - 4:
            raise self.fail(f"expected {what} inside the file", at)
        length = encode.Get(number_types.UOffsetTFlags.packer_type, self.data, at)
        if at + 4 + length > len(self.data):
            raise self.fail(f"expected {what} ({length} bytes) inside the file", at)
        try:
            return self.data[at + 4 : at + 4 + length].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"expected {what} in UTF-8", at) from None

    def vector(self, table: Table, slot: int, what: str) -> list[int]:
        """Positions the vector's offsets point at."""
        at = self._field(table, slot, 4, what)
        if at is None:
            return []
        start = at + encode.Get(number_types.UOffsetTFlags.packer_type, self.data, at)
        if not 0 <= start <= len(self.data) - 4:
            raise self.fail(f"expected {what} inside the file", at)
        count = encode.Get(number_types.UOffsetTFlags.packer_type, self.data, start)
        if start + 4 + 4 * count > len(self.data):
            raise self.fail(f"expected {count} entries of {what} inside the file", start)
        items = []
        for k in range(count):
            item = start + 4 + 4 * k
            items.append(item + encode.Get(number_types.UOffsetTFlags.packer_type, self.data, item))
        return items

    def strings(self, table: Table, slot: int, what: str) -> tuple[str, ...]:
        return tuple(self._string_at(p, what) for p in self.vector(table, slot, what))

    def scalar(self, table: Table, slot: int, flags, default: int, what: str) -> int:
        at = self._field(table, slot, flags.bytewidth, what)
        return default if at is None else encode.Get(flags.packer_type, self.data, at)


def is_dispatch(head: bytes) -> bool:
    """A FlatBuffer whose root table's vtable starts as the seed's tag."""
    if len(head) < 8:
        return False
    root = int.from_bytes(head[:4], "little")
    if root + 4 > len(head):
        return False
    vtable = root - int.from_bytes(head[root : root + 4], "little", signed=True)
    return 0 <= vtable and head[vtable : vtable + 8] == ROOT_VTABLE


def parse(data: bytes, where: str | None = None) -> DispatchDescriptor:
    if len(data) > MAX_BYTES:
        raise FormatError(f"a dispatch descriptor over {MAX_BYTES >> 20} MiB", where=where)
    if not is_dispatch(data):
        raise FormatError(
            "expected a dispatch descriptor: a FlatBuffer whose root vtable starts "
            "0c 00 14 00 04 00 08 00 (E5Program)",
            where=where,
            offset=0,
        )
    r = _Reader(bytes(data), where)
    root = r.table(int.from_bytes(data[:4], "little"), "the E5Program root table")
    names = r.strings(root, 0, "the symbol names")
    info_at = r._field(root, 1, 4, "the build info")
    build: tuple[tuple[str, str], ...] = ()
    if info_at is not None:
        info = r.table(info_at + int.from_bytes(data[info_at : info_at + 4], "little"), "BuildInfo")
        keys, values = r.strings(info, 0, "build keys"), r.strings(info, 1, "build values")
        if len(keys) != len(values):
            raise r.fail(
                f"expected as many build values as keys ({len(keys)}), found {len(values)}"
            )
        build = tuple(zip(keys, values, strict=True))
    ops = []
    for k, position in enumerate(r.vector(root, 2, "the sections")):
        section = r.table(position, f"section {k}")
        code = r.scalar(section, 1, number_types.Uint8Flags, 255, f"section {k}'s op_type")
        if code >= len(OP_TYPES):
            raise r.fail(
                f"section {k} has op_type {code}; the known types are 0..{len(OP_TYPES) - 1}"
            )
        ops.append(
            Operation(
                r.string(section, 0, f"section {k}'s name"),
                OP_TYPES[code],
                r.strings(section, 2, f"section {k}'s inputs"),
                r.strings(section, 3, f"section {k}'s outputs"),
                r.string(section, 4, f"section {k}'s program"),
                r.string(section, 5, f"section {k}'s source type"),
                r.string(section, 6, f"section {k}'s destination type"),
            )
        )
    version = r.scalar(root, 3, number_types.Int32Flags, 0, "format_version")
    return DispatchDescriptor(tuple(ops), build, names, version)


def read(path: str | os.PathLike[str]) -> DispatchDescriptor:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(f"cannot read the file: {exc.strerror or exc}", where=str(path)) from None
    return parse(data, str(path))
