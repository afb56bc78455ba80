"""Patch one register word of a .hwx program (tests of the emulator's register policy)."""

from __future__ import annotations

import struct
from pathlib import Path

from anekit.formats import hwx

HWX = Path(__file__).resolve().parents[1] / "data" / "apple" / "hwx"


def register_offset(data: bytes, descriptor: int, address: int) -> int:
    """File offset of the word descriptor `descriptor` writes to register `address`."""
    program = hwx.parse(data)
    text = program.section("__TEXT", "__text")
    td = program.task_descriptors[descriptor]
    for stream in td.streams:
        if stream.address <= address < stream.address + 4 * len(stream.words):
            return text.offset + td.offset + stream.offset + 4 + (address - stream.address)
    raise KeyError(hex(address))


def with_register(name: str, address: int, update, descriptor: int = 0) -> bytes:
    """Apple's program `name` with register `address` replaced by update(old word)."""
    data = bytearray((HWX / f"h13_{name}.hwx").read_bytes())
    at = register_offset(bytes(data), descriptor, address)
    (old,) = struct.unpack_from("<I", data, at)
    struct.pack_into("<I", data, at, update(old) & 0xFFFFFFFF)
    return bytes(data)
