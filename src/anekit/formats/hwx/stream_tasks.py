"""Task descriptors of the instruction-stream generations (H14 and later), decoded by name.

A task is header words (word 0 holds its size in words) followed by write commands: a dense
command writes count+1 consecutive registers, a sparse one writes its first register and then
those of the next 16 its mask selects. Framing and maps are the public record's
(`regs/<gen>.json` names the sources); no real file of these generations is public, so
whatever a map does not name is reported raw, never guessed.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from types import MappingProxyType

from anekit.formats.hwx.binary import ByteView
from anekit.formats.hwx.container import Section
from anekit.formats.hwx.descriptors import Stream, TaskDescriptor
from anekit.formats.hwx.stream_maps import StreamMap


def read_stream_tasks(
    view: ByteView, section: Section, layout: StreamMap
) -> tuple[tuple[TaskDescriptor, ...], tuple[str, ...]]:
    """The tasks of `section` in order, decoded with `layout`; notes about what was skipped."""
    if not section.has_file_data:
        raise view.error(
            f"expected {section.full_name} (the task descriptors) to have bytes in the file",
            section.offset,
        )
    framing = layout.framing
    tasks: list[TaskDescriptor] = []
    padding = 0
    offset = 0
    while offset + 4 <= section.size:  # every step advances, so work is bounded by the section
        size_words = framing.task_size.extract(view.u32(section.offset + offset, "a task header"))
        if size_words == 0:
            padding += 1
            offset += framing.padding_step
            continue
        size = 4 * size_words
        if size_words < framing.stream_start_word or offset + size > section.size:
            raise view.error(
                f"expected a task size between {framing.stream_start_word} words and the end of "
                f"{section.full_name} (0x{section.size - offset:x} bytes left), found {size_words} words",
                section.offset + offset,
            )
        tasks.append(_read_task(view, section, layout, len(tasks), offset, size_words))
        offset += -(-size // framing.task_alignment) * framing.task_alignment
    notes = [f"{layout.generation} tasks framed by the public record (unverified on a real file)"]
    if padding:
        notes.append(
            f"{padding} zero-size blocks of {framing.padding_step} bytes skipped as padding"
        )
    return tuple(tasks), tuple(notes)


def _read_task(
    view: ByteView, section: Section, layout: StreamMap, index: int, offset: int, size_words: int
) -> TaskDescriptor:
    framing = layout.framing
    words = view.words(section.offset + offset, size_words, "a task")
    header = words[: framing.stream_start_word]
    streams: list[Stream] = []
    at = framing.stream_start_word
    while at < size_words:
        command = words[at]
        first = framing.address.extract(command)
        if (command >> framing.sparse_flag_bit) & 1:
            mask = framing.mask.extract(command)
            targets = [first] + [first + 1 + b for b in range(16) if mask >> b & 1]
        else:
            targets = list(range(first, first + framing.count.extract(command) + 1))
        if at + 1 + len(targets) > size_words:
            raise view.error(
                f"expected write command 0x{command:08x} of task {index} to have its {len(targets)} "
                f"values inside the task ({size_words} words)",
                section.offset + offset + 4 * at,
            )
        values = words[at + 1 : at + 1 + len(targets)]
        streams.extend(_runs(layout, offset + 4 * at, command, targets, values))
        at += 1 + len(targets)
    fields, unknown = _decode(layout, header, streams)
    return TaskDescriptor(
        index, offset, 4 * size_words, header, tuple(streams), fields, None, None,
        MappingProxyType({}), unknown,
    )  # fmt: skip


def _runs(
    layout: StreamMap, offset: int, command: int, targets: list[int], values: tuple[int, ...]
) -> list[Stream]:
    """One `Stream` per run of consecutive registers a command writes (a sparse mask has gaps)."""
    runs: list[Stream] = []
    start = 0
    for i in range(1, len(targets) + 1):
        if i == len(targets) or targets[i] != targets[i - 1] + 1:
            address = 4 * targets[start]
            runs.append(
                Stream(layout.block_name(address), offset, command, address, values[start:i])
            )
            start = i
    return runs


def _decode(
    layout: StreamMap, header: tuple[int, ...], streams: list[Stream]
) -> tuple[Mapping[str, int], Mapping[int, int]]:
    """Named header and register fields; per register, the set bits no field names."""
    fields: dict[str, int] = {}
    for spec in layout.header_fields:
        if spec.word < len(header):
            fields[f"Header.Word{spec.word}.{spec.name}"] = spec.extract(header[spec.word])
    registers: dict[int, int] = {}
    for stream in streams:
        for i, word in enumerate(stream.words):
            registers[stream.address + 4 * i] = word  # a later write to a register wins
    unknown: dict[int, int] = {}
    for address, word in registers.items():
        register = layout.registers.get(address)
        covered = 0
        if register is not None:
            for spec in register.fields:
                fields[f"{register.name}.{spec.name}"] = spec.extract(word)
            covered = register.covered
        if stray := word & ~covered & 0xFFFFFFFF:
            unknown[address] = stray
    return MappingProxyType(fields), MappingProxyType(unknown)


def stream_register_locator(
    layout: StreamMap, tasks: tuple[TaskDescriptor, ...]
) -> Callable[[int], tuple[int | None, str | None]]:
    """A function: offset in `__text` -> (task index, register name) for relocations."""

    starts = [td.offset for td in tasks]  # increasing: tasks are read in file order

    def locate(section_offset: int) -> tuple[int | None, str | None]:
        at = bisect.bisect_right(starts, section_offset) - 1
        for td in tasks[max(at, 0) : at + 1]:
            if td.offset <= section_offset < td.offset + td.size:
                if section_offset < td.offset + 4 * len(td.header):
                    return td.index, f"Header.Word{(section_offset - td.offset) // 4}"
                for stream in td.streams:
                    first = stream.offset + 4 + 4 * _values_before(td, stream)
                    if first <= section_offset < first + 4 * len(stream.words):
                        address = stream.address + (section_offset - first) // 4 * 4
                        return td.index, layout.register_name(address)
                return td.index, None
        return None, None

    return locate


def _values_before(td: TaskDescriptor, run: Stream) -> int:
    """How many values of the same command precede `run` (a sparse command has several runs)."""
    count = 0
    for stream in td.streams:
        if stream is run:
            return count
        if stream.offset == run.offset:
            count += len(stream.words)
    return count
