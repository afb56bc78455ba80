"""`read()`: decode a .hwx file from a path or bytes into an `HwxFile`."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from anekit.errors import FormatError
from anekit.formats.hwx.banner import parse_banner
from anekit.formats.hwx.binary import ByteView
from anekit.formats.hwx.container import read_container
from anekit.formats.hwx.descriptors import read_descriptors, register_locator
from anekit.formats.hwx.model import HwxFile
from anekit.formats.hwx.registers import layout_for_cpusubtype
from anekit.formats.hwx.relocations import read_relocations
from anekit.formats.hwx.stream_maps import stream_map_for_cpusubtype
from anekit.formats.hwx.stream_tasks import read_stream_tasks, stream_register_locator
from anekit.formats.hwx.symbols import read_catalog, read_symbols, read_tensors, read_weight_tiles

DESCRIPTOR_SECTION = ("__TEXT", "__text")

Source = str | os.PathLike[str] | bytes | bytearray | memoryview


def read(source: Source) -> HwxFile:
    """Decode a .hwx container; malformed input raises `FormatError` naming the offset."""
    if isinstance(source, bytes | bytearray | memoryview):
        return parse(bytes(source), where=None)
    path = Path(source)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(f"cannot read the file: {exc.strerror or exc}", where=str(path)) from None
    return parse(data, where=str(path))


def parse(data: bytes, where: str | None = None) -> HwxFile:
    view = ByteView(data, where)
    container = read_container(view)
    header = container.header
    sections = container.sections
    notes: list[str] = []
    used = sum(command.size for command in container.commands)
    if used != header.sizeofcmds:
        notes.append(
            f"load commands use {used} of the {header.sizeofcmds} bytes sizeofcmds declares"
        )

    symbols = read_symbols(view, container.symtab, sections) if container.symtab is not None else ()
    catalog = read_catalog(view, symbols)
    tensors = read_tensors(view, container, symbols, catalog)
    descriptor_section = next(
        (s for s in sections if (s.segment, s.name) == DESCRIPTOR_SECTION), None
    )
    weight_tiles = read_weight_tiles(view, symbols, sections, descriptor_section)

    layout = layout_for_cpusubtype(header.cpusubtype)
    stream_layout = stream_map_for_cpusubtype(header.cpusubtype) if layout is None else None
    if stream_layout is not None and descriptor_section is not None:
        descriptors, descriptor_notes = read_stream_tasks(view, descriptor_section, stream_layout)
    else:
        descriptors, descriptor_notes = read_descriptors(
            view, descriptor_section, layout, header.cpusubtype
        )
    notes.extend(descriptor_notes)
    known = layout or stream_layout
    generation = known.generation if known is not None else None

    relocations = read_relocations(view, sections, symbols)
    if descriptor_section is not None:
        if stream_layout is not None:
            locate = stream_register_locator(stream_layout, descriptors)
        else:
            locate = register_locator(layout, descriptors)
        located = []
        for relocation in relocations:
            if relocation.section == descriptor_section.full_name:
                index, register = locate(relocation.address)
                relocation = replace(relocation, descriptor=index, register=register)
            located.append(relocation)
        relocations = tuple(located)

    banner = None
    if container.identification:
        banner = parse_banner(container.identification[0][1])
        if len(container.identification) > 1:
            notes.append(
                f"{len(container.identification)} identification banners; the first is shown"
            )

    return HwxFile(
        size=len(data),
        header=header,
        commands=container.commands,
        segments=container.segments,
        io_buffers=container.io_buffers,
        threads=container.threads,
        banner=banner,
        symbols=symbols,
        type_catalog=catalog,
        tensors=tensors,
        weight_tiles=weight_tiles,
        generation=generation,
        task_descriptors=descriptors,
        relocations=relocations,
        notes=tuple(notes),
    )
