"""Register maps of the instruction-stream generations (H14 and later), loaded from `regs/<gen>.json`.

H13 descriptors are fixed register groups (`registers.py`). From H14 on, a task is a header
followed by write commands, and a register is named by its byte address alone. Each map file
records its source (repository, path, commit, licence) and what of it was left out and why.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from anekit.errors import InternalError
from anekit.formats.hwx.registers import BitRange, map_document

# Shipped maps of instruction-stream generations; each names the cpusubtypes that select it.
STREAM_GENERATIONS = ("h14", "h15", "h16", "h17")

BLOCK_SPAN = 0x400  # a register block's address range (every source's blocks start 0x400 apart)


@dataclass(frozen=True)
class StreamField(BitRange):
    """One named bit range of a register (or of a task-header word)."""

    name: str
    bit: int
    width: int


@dataclass(frozen=True)
class StreamRegister:
    address: int  # byte address
    name: str  # "<Block>.<Register>"
    fields: tuple[StreamField, ...]

    @property
    def covered(self) -> int:
        mask = 0
        for spec in self.fields:
            mask |= spec.mask
        return mask


@dataclass(frozen=True)
class HeaderField(BitRange):
    name: str
    word: int
    bit: int
    width: int


@dataclass(frozen=True)
class StreamFraming:
    """How tasks follow each other in `__text` and how a write command is laid out."""

    task_size: BitRange  # in header word 0, counted in 32-bit words
    padding_step: int  # a zero task size is padding: skip this many bytes
    task_alignment: int  # the next task starts at the task's end rounded up to this
    stream_start_word: int  # the first write command's word index inside the task
    sparse_flag_bit: int
    address: BitRange  # word index of the first register written
    count: BitRange  # dense command: number of values - 1
    mask: BitRange  # sparse command: which of the next 16 registers follow the first


@dataclass(frozen=True)
class StreamMap:
    generation: str
    cpusubtypes: tuple[int, ...]
    framing: StreamFraming
    header_fields: tuple[HeaderField, ...]
    blocks: tuple[tuple[str, int], ...]  # (name, first byte address)
    registers: Mapping[int, StreamRegister]
    source: str  # "repository path @ commit (licence)"

    def block_name(self, address: int) -> str | None:
        return _block_name(self.blocks, address)

    def register_name(self, address: int) -> str:
        register = self.registers.get(address)
        if register is not None:
            return register.name
        block = self.block_name(address)
        return f"{block or 'unknown block'}@0x{address:05x}"


def _block_name(blocks: tuple[tuple[str, int], ...], address: int) -> str | None:
    for name, start in blocks:
        if start <= address < start + BLOCK_SPAN:
            return name
    return None


def _bits(bit: int, width: int) -> BitRange:
    return StreamField("", bit, width)


@functools.cache
def stream_map(generation: str) -> StreamMap:
    """Load one shipped instruction-stream map (e.g. "h16")."""
    doc = map_document(generation, STREAM_GENERATIONS)
    f = doc["framing"]
    command = f["command"]
    framing = StreamFraming(
        task_size=_bits(f["task_size"]["bit"], f["task_size"]["width"]),
        padding_step=int(f["padding_step"]),
        task_alignment=int(f["task_alignment"]),
        stream_start_word=int(f["stream_start_word"]),
        sparse_flag_bit=int(command["sparse_flag_bit"]),
        address=_bits(*command["address"]),
        count=_bits(*command["count_minus_one"]),
        mask=_bits(*command["mask"]),
    )
    blocks = tuple((name, int(start, 16)) for name, start in doc["blocks"])
    registers: dict[int, StreamRegister] = {}
    for address_text, name, fields in doc["registers"]:
        address = int(address_text, 16)
        block = _block_name(blocks, address)
        if block is None or address % 4 or address in registers:
            raise InternalError(
                f"{generation} register {name} at {address_text}: not a new word in a block"
            )
        specs = tuple(StreamField(field, int(bit), int(width)) for field, bit, width in fields)
        registers[address] = StreamRegister(address, f"{block}.{name}", specs)
    header = tuple(
        HeaderField(name, int(word), int(bit), int(width))
        for name, word, bit, width in doc["header_fields"]
    )
    source = doc["source"]
    return StreamMap(
        generation=doc["generation"],
        cpusubtypes=tuple(int(x) for x in doc["cpusubtypes"]),
        framing=framing,
        header_fields=header,
        blocks=blocks,
        registers=MappingProxyType(registers),
        source=f"{source['repository']} {source['path']} @ {source['commit'][:12]} ({source['licence']})",
    )


def stream_map_for_cpusubtype(cpusubtype: int) -> StreamMap | None:
    for generation in STREAM_GENERATIONS:
        layout = stream_map(generation)
        if cpusubtype in layout.cpusubtypes:
            return layout
    return None
