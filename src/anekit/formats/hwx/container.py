"""The Mach-O-shaped frame of a .hwx file: header, load commands, segments and sections."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from types import MappingProxyType

from anekit.formats.hwx.binary import ByteView
from anekit.formats.hwx.binary import decode_text as _text

MAGIC = 0xBEEFFACE
HEADER_SIZE = 32

LC_SYMTAB = 0x2
LC_THREAD = 0x4
LC_IO_BUFFER = 0x6  # shaped like LC_LOADFVMLIB: names one input/output window
LC_IDENT = 0x8
LC_SEGMENT_64 = 0x19
LC_MAPPED_REGION = 0x40  # newer compilers: {name offset, pad, u64 vmaddr, name}

COMMAND_KINDS = MappingProxyType(
    {
        LC_SYMTAB: "symtab",
        LC_THREAD: "thread",
        LC_IO_BUFFER: "io_buffer",
        LC_IDENT: "identification",
        LC_SEGMENT_64: "segment",
        LC_MAPPED_REGION: "mapped_region",
    }
)

_HEADER = struct.Struct("<8I")
# After cmd/cmdsize: segname, vmaddr/vmsize/fileoff/filesize, maxprot/initprot/nsects/flags.
_SEGMENT = struct.Struct("<16s4Q4I")
_SECTION = struct.Struct("<16s16s2Q8I")
_SYMTAB = struct.Struct("<4I")
_MAPPED = struct.Struct("<2IQ")
_IO_BUFFER = struct.Struct("<3I")

S_ZEROFILL = 0x1
SECTION_TYPE_MASK = 0xFF


@dataclass(frozen=True)
class Header:
    magic: int
    cputype: int
    cpusubtype: int
    filetype: int
    ncmds: int
    sizeofcmds: int
    flags: int
    reserved: int


@dataclass(frozen=True)
class Section:
    """A section; `index` is its 1-based ordinal across all segments (what n_sect refers to)."""

    index: int
    name: str
    segment: str
    addr: int
    size: int
    offset: int
    align: int
    reloff: int
    nreloc: int
    flags: int
    has_file_data: bool

    @property
    def full_name(self) -> str:
        return f"{self.segment},{self.name}"

    def contains(self, address: int) -> bool:
        return self.addr <= address <= self.addr + self.size


@dataclass(frozen=True)
class HwxSegment:
    name: str
    vmaddr: int
    vmsize: int
    fileoff: int
    filesize: int
    maxprot: int
    initprot: int
    flags: int
    sections: tuple[Section, ...]
    command_offset: int


@dataclass(frozen=True)
class IoBuffer:
    """An input/output window named by an LC 0x6 (I/O buffer) or 0x40 (mapped region) command."""

    name: str
    address: int
    command: int
    command_offset: int


@dataclass(frozen=True)
class ThreadState:
    """An LC_THREAD: one flavor's state words, then the strings the state refers to."""

    flavor: int
    count: int
    words: tuple[int, ...]
    strings: tuple[str, ...]
    command_offset: int


@dataclass(frozen=True)
class SymtabCommand:
    symoff: int
    nsyms: int
    stroff: int
    strsize: int
    command_offset: int


@dataclass(frozen=True)
class LoadCommand:
    """Where one load command sits; `kind` is "unknown" for commands kept raw."""

    cmd: int
    kind: str
    offset: int
    size: int
    data: bytes  # the raw body (after cmd/cmdsize) for unknown commands, else b""


@dataclass(frozen=True)
class Container:
    """Everything the load commands declare, before symbols and descriptors are decoded."""

    header: Header
    commands: tuple[LoadCommand, ...]
    segments: tuple[HwxSegment, ...]
    io_buffers: tuple[IoBuffer, ...]
    threads: tuple[ThreadState, ...]
    identification: tuple[tuple[int, str], ...]  # (command offset, banner text)
    symtab: SymtabCommand | None

    @property
    def sections(self) -> tuple[Section, ...]:
        return tuple(section for segment in self.segments for section in segment.sections)


def read_header(view: ByteView) -> Header:
    if len(view) < 4:
        raise view.error(
            f"expected the .hwx magic 0x{MAGIC:08x}, but the file has {len(view)} bytes", 0
        )
    magic = view.u32(0, "the .hwx magic")
    if magic != MAGIC:
        raise view.error(
            f"expected the .hwx magic 0x{MAGIC:08x} (bytes ce fa ef be), found 0x{magic:08x}", 0
        )
    header = Header(*view.unpack(_HEADER, 0, "the 32-byte .hwx header"))
    end = HEADER_SIZE + header.sizeofcmds
    if end > len(view):
        raise view.error(
            f"expected {header.sizeofcmds} bytes of load commands (sizeofcmds), but the file ends at 0x{len(view):x}",
            0x14,
        )
    if header.ncmds * 8 > header.sizeofcmds:
        raise view.error(
            f"expected ncmds={header.ncmds} load commands to fit in sizeofcmds={header.sizeofcmds} bytes",
            0x10,
        )
    return header


def read_container(view: ByteView) -> Container:
    """Walk every load command; unknown commands are kept raw, never fatal."""
    header = read_header(view)
    end = HEADER_SIZE + header.sizeofcmds
    commands: list[LoadCommand] = []
    segments: list[HwxSegment] = []
    io_buffers: list[IoBuffer] = []
    threads: list[ThreadState] = []
    identification: list[tuple[int, str]] = []
    symtab: SymtabCommand | None = None
    section_count = 0
    offset = HEADER_SIZE
    for number in range(header.ncmds):
        if offset + 8 > end:
            raise view.error(
                f"expected load command {number} of {header.ncmds} inside sizeofcmds", offset
            )
        cmd = view.u32(offset, "a load command id")
        size = view.u32(offset + 4, "a load command size")
        if size < 8 or offset + size > end:
            raise view.error(
                f"expected load command {number} (cmd 0x{cmd:x}) to have a size of at least 8 bytes "
                f"that ends inside sizeofcmds, found cmdsize {size}",
                offset + 4,
            )
        kind = COMMAND_KINDS.get(cmd, "unknown")
        data = b""
        if cmd == LC_SEGMENT_64:
            segment = _read_segment(view, offset, size, section_count)
            section_count += len(segment.sections)
            segments.append(segment)
        elif cmd in (LC_IO_BUFFER, LC_MAPPED_REGION):
            io_buffers.append(_read_io_buffer(view, cmd, offset, size))
        elif cmd == LC_THREAD:
            threads.append(_read_thread(view, offset, size))
        elif cmd == LC_IDENT:
            raw = view.bytes(offset + 8, size - 8, "the identification banner").rstrip(b"\0")
            identification.append(
                (offset, _text(view, raw, offset + 8, "the identification banner"))
            )
        elif cmd == LC_SYMTAB:
            if symtab is not None:
                raise view.error("expected one symbol table command, found a second", offset)
            symtab = _read_symtab(view, offset, size)
        else:
            data = view.bytes(offset + 8, size - 8, f"the body of load command 0x{cmd:x}")
        commands.append(LoadCommand(cmd, kind, offset, size, data))
        offset += size
    return Container(
        header,
        tuple(commands),
        tuple(segments),
        tuple(io_buffers),
        tuple(threads),
        tuple(identification),
        symtab,
    )


def _read_segment(view: ByteView, offset: int, size: int, first_index: int) -> HwxSegment:
    if size < 8 + _SEGMENT.size:
        raise view.error(
            f"expected a segment command of at least {8 + _SEGMENT.size} bytes, found {size}",
            offset + 4,
        )
    raw_name, vmaddr, vmsize, fileoff, filesize, maxprot, initprot, nsects, flags = view.unpack(
        _SEGMENT, offset + 8, "a segment command"
    )
    name = _text(view, raw_name.split(b"\0", 1)[0], offset + 8, "a segment name")
    if nsects * _SECTION.size > size - 8 - _SEGMENT.size:
        raise view.error(
            f"expected {nsects} section headers of 80 bytes inside a {size}-byte segment command",
            offset + 64,
        )
    if filesize and fileoff + filesize > len(view):
        raise view.error(
            f"expected segment {name} (file bytes 0x{fileoff:x}+0x{filesize:x}) to lie inside the {len(view)}-byte file",
            offset + 48,
        )
    sections = []
    for i in range(nsects):
        at = offset + 8 + _SEGMENT.size + i * _SECTION.size
        sect, seg, addr, sect_size, sect_off, align, reloff, nreloc, sect_flags, *_ = view.unpack(
            _SECTION, at, "a section header"
        )
        sect_name = _text(view, sect.split(b"\0", 1)[0], at, "a section name")
        seg_name = _text(view, seg.split(b"\0", 1)[0], at + 16, "a section's segment name")
        has_data = filesize > 0 and sect_off != 0 and (sect_flags & SECTION_TYPE_MASK) != S_ZEROFILL
        if has_data and sect_off + sect_size > len(view):
            raise view.error(
                f"expected section {seg_name},{sect_name} (file bytes 0x{sect_off:x}+0x{sect_size:x}) to lie inside the file",
                at + 48,
            )
        if nreloc and reloff + 8 * nreloc > len(view):
            raise view.error(
                f"expected {nreloc} relocations of 8 bytes at 0x{reloff:x} inside the file", at + 56
            )
        sections.append(
            Section(
                first_index + i + 1,
                sect_name,
                seg_name,
                addr,
                sect_size,
                sect_off,
                align,
                reloff,
                nreloc,
                sect_flags,
                has_data,
            )
        )
    return HwxSegment(
        name, vmaddr, vmsize, fileoff, filesize, maxprot, initprot, flags, tuple(sections), offset
    )


def _read_io_buffer(view: ByteView, cmd: int, offset: int, size: int) -> IoBuffer:
    if cmd == LC_IO_BUFFER:
        name_offset, _minor, address = view.unpack(_IO_BUFFER, offset + 8, "an I/O buffer command")
        fixed = 8 + _IO_BUFFER.size
    else:
        name_offset, _pad, address = view.unpack(_MAPPED, offset + 8, "a mapped-region command")
        fixed = 8 + _MAPPED.size
    if not fixed <= name_offset < size:
        raise view.error(
            f"expected the name offset of load command 0x{cmd:x} inside [{fixed}, {size}), found {name_offset}",
            offset + 8,
        )
    name = view.cstring(offset + name_offset, offset + size, "an I/O buffer name")
    return IoBuffer(name, address, cmd, offset)


def _read_thread(view: ByteView, offset: int, size: int) -> ThreadState:
    if size < 16:
        raise view.error(
            f"expected a thread command of at least 16 bytes, found {size}", offset + 4
        )
    flavor = view.u32(offset + 8, "a thread flavor")
    count = view.u32(offset + 12, "a thread state word count")
    if 16 + 4 * count > size:
        raise view.error(
            f"expected {count} thread state words inside a {size}-byte thread command", offset + 12
        )
    words = view.words(offset + 16, count, "thread state words")
    tail = view.bytes(offset + 16 + 4 * count, size - 16 - 4 * count, "thread state strings")
    strings = tuple(
        _text(view, piece, offset + 16 + 4 * count, "a thread state string")
        for piece in tail.split(b"\0")
        if piece
    )
    return ThreadState(flavor, count, words, strings, offset)


def _read_symtab(view: ByteView, offset: int, size: int) -> SymtabCommand:
    if size < 8 + _SYMTAB.size:
        raise view.error(f"expected a symbol table command of 24 bytes, found {size}", offset + 4)
    symoff, nsyms, stroff, strsize = view.unpack(_SYMTAB, offset + 8, "a symbol table command")
    if symoff + 16 * nsyms > len(view):
        raise view.error(
            f"expected {nsyms} symbols of 16 bytes at 0x{symoff:x} inside the file", offset + 8
        )
    if stroff + strsize > len(view):
        raise view.error(
            f"expected a {strsize}-byte string table at 0x{stroff:x} inside the file", offset + 16
        )
    return SymtabCommand(symoff, nsyms, stroff, strsize, offset)
