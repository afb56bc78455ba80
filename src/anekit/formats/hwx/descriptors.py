"""The task-descriptor chain in `__TEXT,__text`: headers, register-write streams, decoded fields."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from anekit.formats.hwx.binary import ByteView
from anekit.formats.hwx.container import Section
from anekit.formats.hwx.inferred import INFERRED
from anekit.formats.hwx.registers import GenerationLayout

COUNT_SHIFT = 26  # stream header word: bits 31:26 = word count - 1
ADDRESS_MASK = (1 << COUNT_SHIFT) - 1  # bits 25:0 = register byte address


@dataclass(frozen=True)
class Stream:
    """One register-write stream: a header word, then `words` written from `address` upward."""

    name: str | None  # from the generation's stream table; None if the address is not known
    offset: int  # offset of the header word inside the descriptor section
    header: int
    address: int
    words: tuple[int, ...]


@dataclass(frozen=True)
class TaskDescriptor:
    index: int
    offset: int  # inside the descriptor section
    size: int
    header: tuple[int, ...]  # the header words (empty when the layout is unknown)
    streams: tuple[Stream, ...]
    fields: Mapping[str, int]  # "<group>.<register>.<field>" -> value, in register-table order
    next_offset: int | None  # where the chain continues; None at its end
    note: str | None
    # fields outside the shipped map, named in formats/hwx/inferred.py (nonzero only)
    inferred: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # register address -> bits set that no field (mapped or inferred) covers
    unknown: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))


def read_descriptors(
    view: ByteView, section: Section | None, layout: GenerationLayout | None, cpusubtype: int
) -> tuple[tuple[TaskDescriptor, ...], tuple[str, ...]]:
    """The descriptor chain and any notes about it (unknown generation, short streams)."""
    if section is None:
        return (), ("no __TEXT,__text section: the file declares no task descriptors",)
    if not section.has_file_data:
        raise view.error(
            f"expected {section.full_name} (the task descriptors) to have bytes in the file",
            section.offset,
        )
    if layout is None:
        words = view.words(section.offset, section.size // 4, "the task descriptor section")
        note = (
            f"no register table is known for cpusubtype {cpusubtype}; "
            f"the {section.full_name} section is shown as raw 32-bit words"
        )
        raw = Stream(None, 0, 0, 0, words)
        return (
            TaskDescriptor(0, 0, section.size, (), (raw,), MappingProxyType({}), None, note),
        ), (note,)
    descriptors = []
    notes = []
    offset = 0
    while True:
        descriptor = _read_descriptor(view, section, layout, len(descriptors), offset)
        descriptors.append(descriptor)
        if descriptor.note:
            notes.append(f"descriptor {descriptor.index}: {descriptor.note}")
        following = descriptor.next_offset
        if following is None:
            break
        offset = following
    return tuple(descriptors), tuple(notes)


def _read_descriptor(
    view: ByteView, section: Section, layout: GenerationLayout, index: int, offset: int
) -> TaskDescriptor:
    base = section.offset
    if offset + layout.header_size > section.size:
        raise view.error(
            f"expected a {layout.header_size}-byte task descriptor header at 0x{offset:x} inside {section.full_name} "
            f"(size 0x{section.size:x})",
            base + offset,
        )
    header = view.words(base + offset, layout.header_size // 4, "a task descriptor header")
    following = header[layout.next_pointer_offset // 4]
    first_allowed = offset + layout.header_size
    if following and not (first_allowed <= following < section.size and following % 4 == 0):
        raise view.error(
            f"expected the next-descriptor offset to point past this descriptor's header and inside "
            f"{section.full_name} (0x{first_allowed:x} <= next < 0x{section.size:x}, 4-byte aligned), "
            f"found 0x{following:x}",
            base + offset + layout.next_pointer_offset,
        )
    bound = following or section.size
    streams = []
    position = offset + layout.header_size
    # a descriptor holds each block's stream once, a block possibly split in two (zin 9.x)
    for _ in range(2 * len(layout.streams)):
        if position + 4 > bound:
            break
        word = view.u32(base + position, "a register-write stream header")
        if word == 0:  # padding after the last stream
            break
        count, address = (word >> COUNT_SHIFT) + 1, word & ADDRESS_MASK
        if position + 4 + 4 * count > bound:
            raise view.error(
                f"expected {count} register words after stream header 0x{word:08x} to end before 0x{bound:x}",
                base + position,
            )
        words = view.words(base + position + 4, count, "register-write stream words")
        streams.append(Stream(layout.stream_name(address, count), position, word, address, words))
        position += 4 + 4 * count
    note = None
    present = {s.name for s in streams if s.name}
    if len(present) < len(layout.streams):
        note = (
            f"{len(present)} of {len(layout.streams)} {layout.generation} register streams present"
        )
    unknown = [f"0x{s.address:x}" for s in streams if s.name is None]
    if unknown:
        note = (
            (note + "; ") if note else ""
        ) + f"streams at unknown register addresses {', '.join(unknown)}"
    fields = decode_fields(layout, header, streams)
    inferred, unknown = decode_unmapped(layout, streams)
    return TaskDescriptor(
        index, offset, position - offset, header, tuple(streams), fields, following or None, note,
        inferred, unknown,
    )  # fmt: skip


def decode_fields(
    layout: GenerationLayout, header: tuple[int, ...], streams: list[Stream]
) -> Mapping[str, int]:
    """Every field of the register table whose register this descriptor writes."""
    registers: dict[int, int] = {}
    for stream in streams:
        for i, word in enumerate(stream.words):
            registers[stream.address + 4 * i] = word
    fields: dict[str, int] = {}
    for spec in layout.fields:
        if spec.header_offset is not None:
            if spec.header_offset // 4 < len(header):
                fields[spec.name] = spec.extract(header[spec.header_offset // 4])
        elif spec.address in registers:
            fields[spec.name] = spec.extract(registers[spec.address])
    return MappingProxyType(fields)


def decode_unmapped(
    layout: GenerationLayout, streams: list[Stream]
) -> tuple[Mapping[str, int], Mapping[int, int]]:
    """The inferred fields (nonzero) and, per register, the set bits no field covers."""
    covered: dict[int, int] = {}
    for spec in layout.fields:
        if spec.address is not None:
            covered[spec.address] = covered.get(spec.address, 0) | spec.mask
    extras = INFERRED if layout.generation == "h13" else ()
    for extra in extras:
        covered[extra.address] = covered.get(extra.address, 0) | extra.mask
    inferred: dict[str, int] = {}
    unknown: dict[int, int] = {}
    for stream in streams:
        for i, word in enumerate(stream.words):
            address = stream.address + 4 * i
            stray = word & ~covered.get(address, 0) & 0xFFFFFFFF
            if stray:
                unknown[address] = stray
    words = {stream.address + 4 * i: w for stream in streams for i, w in enumerate(stream.words)}
    for extra in extras:
        if extra.address in words and (value := extra.extract(words[extra.address])):
            inferred[extra.name] = value
    return MappingProxyType(inferred), MappingProxyType(unknown)


def register_locator(
    layout: GenerationLayout | None, descriptors: tuple[TaskDescriptor, ...]
) -> Callable[[int], tuple[int | None, str | None]]:
    """A function: offset in the descriptor section -> (descriptor index, "<group>.<register>")."""
    starts = [
        descriptor.offset for descriptor in descriptors
    ]  # strictly increasing along the chain

    def locate(section_offset: int) -> tuple[int | None, str | None]:
        at = bisect.bisect_right(starts, section_offset) - 1
        if at < 0:
            return None, None
        descriptor = descriptors[at]
        if section_offset >= descriptor.offset + descriptor.size:
            return None, None
        if layout is None:
            return descriptor.index, None
        relative = section_offset - descriptor.offset
        if relative < layout.header_size:
            return descriptor.index, f"Header.Word{relative // 4}"
        for stream in descriptor.streams:
            first = stream.offset + 4
            if stream.offset <= section_offset < first:
                return descriptor.index, f"{stream.name or 'unknown'} stream header"
            if first <= section_offset < first + 4 * len(stream.words):
                address = stream.address + (section_offset - first) // 4 * 4
                specs = layout.fields_by_address.get(address)
                if specs:
                    return descriptor.index, f"{specs[0].group}.{specs[0].register}"
                return descriptor.index, f"{stream.name or 'unknown'}@0x{address:x}"
        return descriptor.index, None

    return locate
