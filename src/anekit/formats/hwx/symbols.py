"""The symbol table: nlist entries, the stabs type catalog, tensor shapes and weight tiles."""

from __future__ import annotations

import bisect
import re
import struct
from dataclasses import dataclass

from anekit.formats.hwx.binary import ByteView
from anekit.formats.hwx.container import Container, HwxSegment, Section, SymtabCommand

N_STAB = 0xE0
N_TYPE = 0x0E
N_SECT = 0x0E
N_GSYM = 0x20  # a tensor: its shape and byte strides as a stabs array type
N_LSYM = 0x80  # an element type of the catalog, e.g. float16:t5=r1;2;0

_NLIST = struct.Struct("<IBBHQ")
_CATALOG_ENTRY = re.compile(r"([^:]*):t(\d{1,9})(?:=(.*))?", re.DOTALL)
_TENSOR_STAB = re.compile(r"([^:]+):t(\d{1,9})=(.*)", re.DOTALL)
# One axis: ar<index type>;<low>;<extent>;<type id>=s<byte stride><axis letter>
_AXIS = re.compile(r"ar(\d{1,9});(-?\d{1,19});(\d{1,19});(\d{1,9})=s(\d{1,19})([a-z])")
_ELEMENT = re.compile(r"\d{1,9}")
_WEIGHT_TILE = re.compile(r"(K[0-9A-Fa-f]+)_ne_(\d{1,9})")

AXES = ("n", "c", "h", "w")


@dataclass(frozen=True)
class Symbol:
    index: int
    name: str
    type: int
    sect: int
    desc: int
    value: int
    entry_offset: int  # file offset of the 16-byte nlist entry
    name_offset: int  # file offset of the name in the string table

    @property
    def is_stab(self) -> bool:
        return bool(self.type & N_STAB)

    @property
    def in_section(self) -> bool:
        return not self.is_stab and (self.type & N_TYPE) == N_SECT


@dataclass(frozen=True)
class CatalogType:
    """One element type of the stabs catalog (`float16:t5=r1;2;0` -> 5, "float16", "r1;2;0")."""

    type_id: int
    name: str
    definition: str


@dataclass(frozen=True)
class TensorAxis:
    axis: str
    extent: int
    stride: int  # bytes


@dataclass(frozen=True)
class Tensor:
    """An input or output tensor: shape and byte strides in [n, c, h, w] order, element dtype."""

    name: str
    role: str  # "input", "output" or "unknown"
    shape: tuple[int, int, int, int]
    strides: tuple[int | None, int | None, int | None, int | None]
    dtype: str
    element_type_id: int
    axes: tuple[TensorAxis, ...]  # as declared, outermost first
    address: int | None  # engine virtual address of its window, when declared


@dataclass(frozen=True)
class WeightTile:
    """A named run of weight bytes (`K<sha256>_ne_<lane>`), one per engine lane."""

    name: str
    weight: str
    lane: int | None
    section: str
    address: int
    size: int
    file_offset: int
    live: bool  # desc != 0; sentinel tiles of unused lanes have desc 0 and size 0


def read_symbols(
    view: ByteView, symtab: SymtabCommand, sections: tuple[Section, ...]
) -> tuple[Symbol, ...]:
    """Every nlist entry with its name; section references are checked."""
    symbols = []
    str_end = symtab.stroff + symtab.strsize
    for index in range(symtab.nsyms):
        at = symtab.symoff + 16 * index
        strx, n_type, sect, desc, value = view.unpack(_NLIST, at, "a symbol table entry")
        if strx >= symtab.strsize:
            raise view.error(
                f"expected symbol {index}'s name offset below the string table size {symtab.strsize}, found {strx}",
                at,
            )
        name = view.cstring(symtab.stroff + strx, str_end, f"the name of symbol {index}")
        symbol = Symbol(index, name, n_type, sect, desc, value, at, symtab.stroff + strx)
        if symbol.in_section and not 1 <= sect <= len(sections):
            raise view.error(
                f"expected symbol {name!r} to name a section 1..{len(sections)}, found {sect}",
                at + 5,
            )
        symbols.append(symbol)
    return tuple(symbols)


def read_catalog(view: ByteView, symbols: tuple[Symbol, ...]) -> tuple[CatalogType, ...]:
    catalog = []
    for symbol in symbols:
        if symbol.type != N_LSYM:
            continue
        match = _CATALOG_ENTRY.fullmatch(symbol.name)
        if match is None:
            raise view.error(
                f"expected a type catalog stab name:t<id>=<definition>, found {symbol.name!r}",
                symbol.name_offset,
            )
        catalog.append(CatalogType(int(match.group(2)), match.group(1), match.group(3) or ""))
    return tuple(catalog)


def parse_tensor_stab(view: ByteView, symbol: Symbol) -> tuple[str, tuple[TensorAxis, ...], int]:
    """`image:t11=ar1;0;1;12=s192n:...:ar1;0;77;15=s2w:5` -> name, axes, element type id."""
    expected = "a tensor stab name:t<id>=ar1;0;<extent>;<id>=s<stride><axis>:...:<element type>"
    match = _TENSOR_STAB.fullmatch(symbol.name)
    if match is None:
        raise view.error(f"expected {expected}, found {symbol.name!r}", symbol.name_offset)
    parts = match.group(3).split(":")
    axes = []
    for part in parts[:-1]:
        axis = _AXIS.fullmatch(part)
        if axis is None or int(axis.group(2)) != 0:
            raise view.error(
                f"expected {expected}; the part {part!r} is not ar1;0;<extent>;<id>=s<stride><axis>",
                symbol.name_offset,
            )
        letter = axis.group(6)
        if any(a.axis == letter for a in axes):
            raise view.error(
                f"expected each axis once in tensor stab {symbol.name!r}; {letter!r} repeats",
                symbol.name_offset,
            )
        axes.append(TensorAxis(letter, int(axis.group(3)), int(axis.group(5))))
    if not axes or _ELEMENT.fullmatch(parts[-1]) is None:
        raise view.error(f"expected {expected}, found {symbol.name!r}", symbol.name_offset)
    return match.group(1), tuple(axes), int(parts[-1])


def read_tensors(
    view: ByteView,
    container: Container,
    symbols: tuple[Symbol, ...],
    catalog: tuple[CatalogType, ...],
) -> tuple[Tensor, ...]:
    types = {entry.type_id: entry.name for entry in catalog}
    segment_of = {
        section.index: segment for segment in container.segments for section in segment.sections
    }
    placed = {symbol.name: symbol for symbol in symbols if symbol.in_section}
    buffers = {buffer.name: buffer for buffer in container.io_buffers}
    tensors = []
    for symbol in symbols:
        if symbol.type != N_GSYM:
            continue
        name, axes, element = parse_tensor_stab(view, symbol)
        if element not in types:
            raise view.error(
                f"expected tensor {name!r}'s element type t{element} to be defined in the type catalog",
                symbol.name_offset,
            )
        by_axis = {axis.axis: axis for axis in axes}
        n, c, h, w = (by_axis[a].extent if a in by_axis else 1 for a in AXES)
        sn, sc, sh, sw = (by_axis[a].stride if a in by_axis else None for a in AXES)
        shape, strides = (n, c, h, w), (sn, sc, sh, sw)
        placement = placed.get(name)
        buffer = buffers.get(name)
        segment = None
        address = None
        if placement is not None:
            segment = segment_of.get(placement.sect)
            address = placement.value
        elif buffer is not None:
            address = buffer.address
            segment = _segment_at(container.segments, address)
        tensors.append(
            Tensor(
                name,
                _role(name, segment, buffer is not None),
                shape,
                strides,
                types[element],
                element,
                axes,
                address,
            )
        )
    return tuple(tensors)


def _segment_at(segments: tuple[HwxSegment, ...], address: int) -> HwxSegment | None:
    return next(
        (s for s in segments if s.vmsize and s.vmaddr <= address < s.vmaddr + s.vmsize), None
    )


def _role(name: str, segment: HwxSegment | None, named_by_io_command: bool) -> str:
    """The engine reads input windows and writes output windows: the window's protection says which."""
    if segment is not None and segment.name == "__FVMLIB":
        if segment.initprot & 0x2:
            return "output"
        if segment.initprot & 0x1:
            return "input"
    if name.endswith("@output"):
        return "output"
    return "input" if named_by_io_command else "unknown"


def read_weight_tiles(
    view: ByteView,
    symbols: tuple[Symbol, ...],
    sections: tuple[Section, ...],
    descriptor_section: Section | None,
) -> tuple[WeightTile, ...]:
    """Symbols placed in a section with file bytes other than the descriptor section."""
    skip = descriptor_section.index if descriptor_section is not None else None
    placed = [
        s for s in symbols if s.in_section and s.sect != skip and sections[s.sect - 1].has_file_data
    ]
    starts: dict[int, list[int]] = {}
    for symbol in placed:
        starts.setdefault(symbol.sect, []).append(symbol.value)
    for values in starts.values():
        values.sort()
    tiles = []
    for symbol in placed:
        section = sections[symbol.sect - 1]
        if not section.contains(symbol.value):
            raise view.error(
                f"expected weight symbol {symbol.name!r} at 0x{symbol.value:x} inside {section.full_name} "
                f"[0x{section.addr:x}, 0x{section.addr + section.size:x}]",
                symbol.entry_offset + 8,
            )
        values = starts[symbol.sect]
        after = bisect.bisect_right(values, symbol.value)
        end = values[after] if after < len(values) else section.addr + section.size
        match = _WEIGHT_TILE.fullmatch(symbol.name)
        weight, lane = (match.group(1), int(match.group(2))) if match else (symbol.name, None)
        tiles.append(
            WeightTile(
                symbol.name,
                weight,
                lane,
                section.full_name,
                symbol.value,
                end - symbol.value,
                section.offset + symbol.value - section.addr,
                symbol.desc != 0,
            )
        )
    return tuple(tiles)
