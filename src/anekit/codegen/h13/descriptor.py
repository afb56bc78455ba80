"""Encode one H13 task descriptor from named register fields into its canonical image.

Every descriptor is written in the canonical layout Apple's compiler uses (the header, then
all seven register-write streams at their fixed offsets, 0x274 bytes), so any field of the
shipped map or of `anekit.formats.hwx.inferred` can be set by name.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping

from anekit.errors import InternalError
from anekit.formats.hwx.descriptors import COUNT_SHIFT
from anekit.formats.hwx.h13 import DESCRIPTOR_STRIDE
from anekit.formats.hwx.inferred import INFERRED
from anekit.formats.hwx.registers import GenerationLayout, generation_layout


@functools.cache
def _places() -> dict[str, tuple[int, int, int]]:
    """field name -> (byte offset of its word in the canonical descriptor, bit, width)."""
    layout = generation_layout("h13")
    places = {}
    for spec in layout.fields:
        if spec.header_offset is not None:
            places[spec.name] = (spec.header_offset, spec.bit, spec.width)
        else:
            places[spec.name] = (_word_offset(layout, spec.address), spec.bit, spec.width)
    for extra in INFERRED:
        places[extra.name] = (_word_offset(layout, extra.address), extra.bit, extra.width)
    return places


def _word_offset(layout: GenerationLayout, address: int) -> int:
    for stream in layout.streams:
        if stream.address <= address < stream.address + 4 * stream.words:
            return stream.td_offset + 4 + (address - stream.address)
    raise InternalError(f"register 0x{address:x} lies in no canonical stream")


def encode(fields: Mapping[str, int]) -> bytes:
    """The canonical descriptor image with `fields` set (every other bit zero)."""
    layout = generation_layout("h13")
    image = bytearray(layout.descriptor_size)
    for stream in layout.streams:
        header = ((stream.words - 1) << COUNT_SHIFT) | stream.address
        struct.pack_into("<I", image, stream.td_offset, header)
    places = _places()
    for name, value in fields.items():
        if name not in places:
            raise InternalError(f"no H13 register field is called {name}")
        offset, bit, width = places[name]
        if not 0 <= value < (1 << width):
            raise InternalError(f"{name} = {value} does not fit its {width} bits")
        (word,) = struct.unpack_from("<I", image, offset)
        word = (word & ~(((1 << width) - 1) << bit)) | (value << bit)
        struct.pack_into("<I", image, offset, word & 0xFFFFFFFF)
    return bytes(image)


def chain(images: list[bytes]) -> bytes:
    """Descriptors laid 0x300 apart (the last unpadded), as `__text`."""
    out = bytearray()
    for i, image in enumerate(images):
        out += image
        if i + 1 < len(images):
            out += bytes(DESCRIPTOR_STRIDE - len(image))
    return bytes(out)


def field_offset(name: str) -> int:
    """Byte offset, inside its descriptor, of the word holding field `name`."""
    return _places()[name][0]
