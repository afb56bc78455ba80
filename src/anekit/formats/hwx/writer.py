"""Writer of .hwx containers in the shape zin_ane_compiler gives them (ane-container, and Apple's
own files in tests/data/apple/hwx): `write(HwxImage) -> bytes`.

Layout: the 32-byte header and load commands, then at file offset 0x4000 the `__TEXT`
segment (task descriptors in `__text` at the engine address 0x30000000, weight tiles in
`__const` 64-byte aligned after them), then one page-aligned `__FVMLIB` window per input
(`__const`, read) and output (`__data`, write) with no file bytes, then zero-fill scratch
windows. Relocations on `__text` point the kernel-coefficient registers at their tiles; the
first LC_THREAD holds the base-address table the descriptors index (RBase/WBase/KBase);
tensors are described by stabs-style array types over the element-type catalog.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from anekit.formats.hwx.container import (
    HEADER_SIZE,
    LC_IDENT,
    LC_IO_BUFFER,
    LC_SEGMENT_64,
    LC_SYMTAB,
    LC_THREAD,
    MAGIC,
    S_ZEROFILL,
)
from anekit.formats.hwx.h13 import DESCRIPTOR_STRIDE
from anekit.formats.hwx.symbols import N_GSYM, N_LSYM

ENGINE_BASE = 0x30000000
PAGE = 0x4000
TILE_ALIGN = 0x40
CPU_TYPE, FILE_TYPE, HEADER_FLAGS = 0x80, 0x2, 0x200000
N_SECT_EXT = 0x0F  # N_SECT | N_EXT: a symbol placed in a section
SECTION_FLAGS = {"__text": 0x128, "__const": 0x26, "input": 0x21, "output": 0x23}
# the element-type catalog zin writes, in its order (float16 is type 5)
CATALOG = ("void:t1=1", "int8:t2=r2;0;127", "uint8:t3=r1;0;255", "int16:t4=r1;-32768;32767",
           "float16:t5=r1;2;0", "float:t6=r1;4;0")  # fmt: skip
FLOAT16 = 5
BASE_TABLE_WORDS = 64  # 32 base registers of 64 bits
CHAIN_WORD, CHAIN_NEXT_SIZE = 512, 0x9C  # the thread-state words naming the descriptor chain


@dataclass(frozen=True)
class Window:
    """An input or output tensor's window: its name, role, [n, c, h, w] and byte strides."""

    name: str
    role: str  # "input" or "output"
    shape: tuple[int, int, int, int]
    strides: tuple[int, int, int, int]
    size: int


@dataclass(frozen=True)
class Tile:
    """One weight tile `K<hash>_ne_<lane>`, placed in `__const` in the order given."""

    name: str
    data: bytes


@dataclass
class HwxImage:
    """Everything a .hwx holds. `bases` maps a base-register index to a window name, or to
    "__text" / "__const" for the program's own sections."""

    cpusubtype: int
    descriptors: bytes  # the chained task descriptors, as the __text section
    tiles: list[Tile]
    windows: list[Window]
    scratch: list[tuple[str, int]]  # (name, size) zero-filled working windows
    bases: dict[int, str]
    relocations: list[tuple[int, int]]  # (__text offset of the word, __const offset it names)
    banner: str
    network: str = "net"
    tile_offsets: dict[str, int] = field(default_factory=dict)  # filled by `layout`


def _descriptor_count(image: HwxImage) -> int:
    """Descriptors in the chain (laid DESCRIPTOR_STRIDE apart, the last unpadded)."""
    return -(-len(image.descriptors) // DESCRIPTOR_STRIDE)


def _align(value: int, to: int) -> int:
    return -(-value // to) * to


def _pad(data: bytes, to: int) -> bytes:
    return data + bytes(_align(len(data), to) - len(data))


def const_layout(tiles: list[Tile]) -> dict[str, int]:
    """Offset of each tile inside `__const` (64-byte aligned, in order)."""
    offsets, at = {}, 0
    for tile in tiles:
        offsets[tile.name] = at
        at = _align(at + len(tile.data), TILE_ALIGN)
    return offsets


def _segment(name: str, vmaddr: int, vmsize: int, fileoff: int, filesize: int, prot: int,
             flags: int, sections: list[bytes]) -> bytes:  # fmt: skip
    body = struct.pack("<16s4Q4I", name.encode(), vmaddr, vmsize, fileoff, filesize, prot, prot,
                       len(sections), flags)  # fmt: skip
    payload = body + b"".join(sections)
    return struct.pack("<II", LC_SEGMENT_64, 8 + len(payload)) + payload


def _section(name: str, segment: str, addr: int, size: int, offset: int, align: int,
             reloff: int, nreloc: int, flags: int) -> bytes:  # fmt: skip
    return struct.pack("<16s16s2Q8I", name.encode(), segment.encode(), addr, size, offset, align,
                       reloff, nreloc, flags, 0, 0, 0)  # fmt: skip


def _command(cmd: int, body: bytes) -> bytes:
    body = _pad(body, 8)
    return struct.pack("<II", cmd, 8 + len(body)) + body


def _stab(window: Window, first_id: int) -> str:
    """`name:t<id>=ar1;0;<n>;<id+1>=s<stride>n:...:5` over n, c, h, w."""
    parts = []
    for k, (axis, extent, stride) in enumerate(
        zip("nchw", window.shape, window.strides, strict=True)
    ):
        parts.append(f"ar1;0;{extent};{first_id + 1 + k}=s{stride}{axis}")
    return f"{window.name}:t{first_id}=" + ":".join(parts) + f":{FLOAT16}"


def write(image: HwxImage) -> bytes:
    text = image.descriptors
    offsets = const_layout(image.tiles)
    image.tile_offsets = offsets
    const = bytearray()
    for tile in image.tiles:
        const += bytes(offsets[tile.name] - len(const)) + tile.data
    if not const:  # zin writes an empty kernel section as one zero page, which anecc needs
        const = bytearray(PAGE)
    const_addr = ENGINE_BASE + _align(len(text), TILE_ALIGN)
    text_span = _align(const_addr - ENGINE_BASE + len(const), PAGE)
    addresses = {"__text": ENGINE_BASE, "__const": const_addr}
    at = ENGINE_BASE + text_span
    for window in image.windows:
        addresses[window.name] = at
        at += _align(window.size, PAGE)
    # the working windows share one intermediate segment (anecc takes at most one)
    scratch_start = at
    for name, size in image.scratch:
        addresses[name] = at
        at += _align(size, TILE_ALIGN)
    scratch_size = at - scratch_start

    # the fixed part of each load command first, to know where the file data starts
    relocations = b"".join(
        struct.pack("<II", offset, 2 | (2 << 25)) for offset, _ in image.relocations
    )  # section 2 (__const), 4-byte words; the word holds the __const offset (the addend)
    text_file = PAGE
    data_end = text_file + text_span
    reloff = data_end
    symoff = _align(reloff + len(relocations), 8)

    symbols: list[tuple[str, int, int, int, int]] = []  # name, type, sect, desc, value
    for tile in image.tiles:
        symbols.append((tile.name, N_SECT_EXT, 2, 2, const_addr + offsets[tile.name]))
    for k, window in enumerate(image.windows):
        desc = 2 if window.role == "input" else 0
        symbols.append((window.name, N_SECT_EXT, 3 + k, desc, addresses[window.name]))
    symbols += [(entry, N_LSYM, 0, 0, 0) for entry in CATALOG]
    next_id = len(CATALOG) + 5
    for window in image.windows:
        symbols.append((_stab(window, next_id), N_GSYM, 0, next_id, 0))
        next_id += 5
    strtab = bytearray(b"\0")
    entries = bytearray()
    for name, n_type, sect, desc, value in symbols:
        entries += struct.pack("<IBBHQ", len(strtab), n_type, sect, desc, value)
        strtab += name.encode() + b"\0"
    stroff = symoff + len(entries)
    strtab = _pad(bytes(strtab), 8)

    commands = [_segment("__PAGEZERO", 0, PAGE, 0, 0, 0, 4, [])]
    commands.append(
        _segment("__TEXT", ENGINE_BASE, text_span, text_file, text_span, 5, 0, [
            _section("__text", "__TEXT", ENGINE_BASE, len(text), text_file, 14, reloff,
                     len(image.relocations), SECTION_FLAGS["__text"]),
            _section("__const", "__TEXT", const_addr, len(const),
                     text_file + const_addr - ENGINE_BASE if const else 0, 6, 0, 0,
                     SECTION_FLAGS["__const"]),
        ])
    )  # fmt: skip
    for window in image.windows:
        prot, sect = (1, "__const") if window.role == "input" else (2, "__data")
        address = addresses[window.name]
        section = _section(sect, "__FVMLIB", address, window.size, 0, 14, 0, 0,
                           SECTION_FLAGS[window.role])  # fmt: skip
        commands.append(_segment("__FVMLIB", address, _align(window.size, PAGE), 0, 0, prot, 6,
                                 [section]))  # fmt: skip
    if image.scratch:
        section = _section("__bss", "__DATA", scratch_start, scratch_size, 0, 14, 0, 0,
                           S_ZEROFILL)  # fmt: skip
        commands.append(_segment("__DATA", scratch_start, _align(scratch_size, PAGE), 0, 0, 3,
                                 4, [section]))  # fmt: skip
    for window in image.windows:
        fixed = struct.pack("<3I", 0x14, 0, addresses[window.name])
        commands.append(_command(LC_IO_BUFFER, fixed + window.name.encode() + b"\0"))
    bases = [0] * (BASE_TABLE_WORDS // 2)
    for index, name in image.bases.items():
        bases[index] = addresses[name]
    words = b"".join(struct.pack("<Q", base) for base in bases)
    # Apple's state continues past the base table; words 512-517 hold the first descriptor's
    # address, its NextSize (0x9c) and the descriptor count, which the Asahi converter
    # (eiln/anecc, anecc_convert) reads to find the task section.
    chain = [0] * (CHAIN_WORD - BASE_TABLE_WORDS) + [ENGINE_BASE, 0, CHAIN_NEXT_SIZE,
                                                      _descriptor_count(image), 0, 0xFFFF]  # fmt: skip
    words += struct.pack(f"<{len(chain)}I", *chain)
    count = BASE_TABLE_WORDS + len(chain)
    thread = struct.pack("<II", 1, count) + words + image.network.encode() + b"\0"
    commands.append(_command(LC_THREAD, thread))
    commands.append(_command(LC_IDENT, image.banner.encode() + b"\0"))
    commands.append(
        _command(LC_SYMTAB, struct.pack("<4I", symoff, len(symbols), stroff, len(strtab)))
    )
    load = b"".join(commands)
    if HEADER_SIZE + len(load) > text_file:
        raise ValueError("load commands do not fit before the __TEXT segment")
    header = struct.pack("<8I", MAGIC, CPU_TYPE, image.cpusubtype, FILE_TYPE, len(commands),
                         len(load), HEADER_FLAGS, 0)  # fmt: skip
    out = bytearray(header + load)
    out += bytes(text_file - len(out))
    out += text
    out += bytes(const_addr - ENGINE_BASE - len(text)) + const
    out += bytes(data_end - len(out))
    out += relocations
    out += bytes(symoff - len(out)) + entries + strtab
    return bytes(out)
