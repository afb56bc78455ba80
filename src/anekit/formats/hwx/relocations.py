"""Relocations: which descriptor words the loader patches, and which section or tile they point at."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from anekit.formats.hwx.binary import ByteView
from anekit.formats.hwx.container import Section
from anekit.formats.hwx.symbols import Symbol

_ENTRY = struct.Struct("<II")
R_SCATTERED = 0x80000000


@dataclass(frozen=True)
class Relocation:
    """One relocation_info (or scattered_relocation_info) entry, resolved against the file."""

    section: str  # "<segment>,<section>" whose bytes are patched
    address: int  # r_address: offset of the patched bytes inside that section
    symbol_index: int  # r_symbolnum: a section ordinal (extern=0) or a symbol index (extern=1)
    pcrel: bool
    length: int  # log2 of the patched size in bytes
    extern: bool
    type: int
    scattered: bool
    entry_offset: int  # file offset of the 8-byte entry
    addend: int  # the value stored in the patched bytes
    target: str | None  # the section or symbol pointed at (None for absolute)
    target_address: int | None
    symbol: str | None  # the symbol (e.g. a weight tile) placed exactly at target_address
    descriptor: int | None = None  # index of the task descriptor holding the patched word
    register: str | None = None  # "<group>.<register>" of the patched word, when known


def read_relocations(
    view: ByteView, sections: tuple[Section, ...], symbols: tuple[Symbol, ...]
) -> tuple[Relocation, ...]:
    placed: dict[tuple[int, int], Symbol] = {}
    for symbol in symbols:
        if symbol.in_section:
            key = (symbol.sect, symbol.value)
            if key not in placed or (placed[key].desc == 0 and symbol.desc != 0):
                placed[key] = symbol
    relocations = []
    for section in sections:
        for number in range(section.nreloc):
            at = section.reloff + 8 * number
            first, second = view.unpack(_ENTRY, at, "a relocation entry")
            if first & R_SCATTERED:
                relocations.append(_scattered(view, section, sections, placed, at, first, second))
            else:
                relocations.append(
                    _plain(view, section, sections, symbols, placed, at, first, second)
                )
    return tuple(relocations)


def _patched_value(view: ByteView, section: Section, address: int, length: int, at: int) -> int:
    size = 1 << length
    if not section.has_file_data or address < 0 or address + size > section.size:
        raise view.error(
            f"expected relocation address 0x{address:x} (+{size} bytes) inside the file bytes of "
            f"{section.full_name} (size 0x{section.size:x})",
            at,
        )
    return int.from_bytes(view.bytes(section.offset + address, size, "relocated bytes"), "little")


def _plain(
    view: ByteView,
    section: Section,
    sections: tuple[Section, ...],
    symbols: tuple[Symbol, ...],
    placed: dict[tuple[int, int], Symbol],
    at: int,
    first: int,
    info: int,
) -> Relocation:
    address = first
    symbolnum, pcrel, length = info & 0xFFFFFF, (info >> 24) & 1, (info >> 25) & 3
    extern, rtype = (info >> 27) & 1, info >> 28
    addend = _patched_value(view, section, address, length, at)
    symbol_name = None
    if extern:
        if symbolnum >= len(symbols):
            raise view.error(
                f"expected an external relocation to name one of {len(symbols)} symbols, found {symbolnum}",
                at + 4,
            )
        target_symbol = symbols[symbolnum]
        target, target_address, symbol_name = (
            target_symbol.name,
            target_symbol.value + addend,
            target_symbol.name,
        )
    elif symbolnum == 0:  # R_ABS
        target, target_address = None, addend
    else:
        if symbolnum > len(sections):
            raise view.error(
                f"expected a relocation to name a section 1..{len(sections)}, found {symbolnum}",
                at + 4,
            )
        target_section = sections[symbolnum - 1]
        target, target_address = target_section.full_name, target_section.addr + addend
        hit = placed.get((symbolnum, target_address))
        symbol_name = hit.name if hit is not None else None
    return Relocation(
        section.full_name,
        address,
        symbolnum,
        bool(pcrel),
        length,
        bool(extern),
        rtype,
        False,
        at,
        addend,
        target,
        target_address,
        symbol_name,
    )


def _scattered(
    view: ByteView,
    section: Section,
    sections: tuple[Section, ...],
    placed: dict[tuple[int, int], Symbol],
    at: int,
    first: int,
    value: int,
) -> Relocation:
    address, rtype, length, pcrel = (
        first & 0xFFFFFF,
        (first >> 24) & 0xF,
        (first >> 28) & 3,
        (first >> 30) & 1,
    )
    addend = _patched_value(view, section, address, length, at)
    target_section = next(
        (s for s in sections if s.size and s.addr <= value < s.addr + s.size), None
    )
    hit = placed.get((target_section.index, value)) if target_section is not None else None
    return Relocation(
        section.full_name,
        address,
        0,
        bool(pcrel),
        length,
        False,
        rtype,
        True,
        at,
        addend,
        target_section.full_name if target_section is not None else None,
        value,
        hit.name if hit is not None else None,
    )
