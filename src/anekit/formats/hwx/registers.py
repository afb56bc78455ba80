"""Per-generation task-descriptor layouts and register tables (loaded from `regs/<gen>.json`)."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources

from anekit.errors import InternalError

# Register tables we ship, by generation name. Each JSON file names the
# cpusubtype values that select it.
KNOWN_GENERATIONS = ("h13",)

_TABLE_NAME = re.compile(r"aneTD\.Header\[(\d+)\]\.(\w+)|aneRegs\.(\w+)\.(\w+(?:\[\d+\])?)\.(\w+)")


@dataclass(frozen=True)
class StreamLayout:
    """One register-write stream of the canonical descriptor: where it sits and what it writes."""

    name: str
    td_offset: int  # offset of the stream header word in the canonical descriptor
    address: int  # register byte address of the first data word
    words: int


class BitRange:
    """What a field placed at `bit` with `width` bits inside a 32-bit word can do."""

    bit: int
    width: int

    def extract(self, word: int) -> int:
        return (word >> self.bit) & ((1 << self.width) - 1)

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.bit


@dataclass(frozen=True)
class FieldSpec(BitRange):
    """One register field: `<group>.<register>.<field>` at a register address (or header byte)."""

    name: str
    group: str
    register: str
    address: int | None  # register byte address; None for descriptor-header fields
    header_offset: int | None  # byte offset of the 32-bit header word; None for stream fields
    bit: int  # first bit inside the 32-bit word
    width: int


@dataclass(frozen=True)
class GenerationLayout:
    """How one engine generation frames and names its task descriptors."""

    generation: str
    cpusubtypes: tuple[int, ...]
    descriptor_size: int
    header_size: int
    next_pointer_offset: int
    streams: tuple[StreamLayout, ...]
    fields: tuple[FieldSpec, ...]
    source: str

    def stream_name(self, address: int, words: int = 1) -> str | None:
        """The block whose registers [address, address + 4 * words) lie in: its canonical
        stream starts there, or a later compiler wrote part of it as a stream of its own
        (zin 9.x writes KernelDMASrc as 0x1f800 + 18 words and 0x1f8c8 + 12 words)."""
        for stream in self.streams:
            if stream.address <= address and address + 4 * words <= stream.address + 4 * stream.words:
                return stream.name
        return None

    @functools.cached_property
    def fields_by_address(self) -> dict[int, tuple[FieldSpec, ...]]:
        by_address: dict[int, list[FieldSpec]] = {}
        for spec in self.fields:
            if spec.address is not None:
                by_address.setdefault(spec.address, []).append(spec)
        return {address: tuple(specs) for address, specs in by_address.items()}

    @functools.cached_property
    def header_fields(self) -> tuple[FieldSpec, ...]:
        return tuple(spec for spec in self.fields if spec.header_offset is not None)


def _int(text: str | int) -> int:
    return int(text, 16) if isinstance(text, str) else int(text)


def _field_spec(
    name: str, byte: int, bit: int, width: int, streams: tuple[StreamLayout, ...], header_size: int
) -> FieldSpec:
    """Turn a table entry (byte offset in the canonical descriptor) into a register address."""
    match = _TABLE_NAME.fullmatch(name)
    if match is None:
        raise InternalError(
            f"register table entry {name!r} is not aneTD.Header[i].F or aneRegs.G.R.F"
        )
    word_byte = byte - byte % 4
    bit_in_word = (byte % 4) * 8 + bit
    if bit_in_word + width > 32:
        raise InternalError(f"register field {name} crosses a 32-bit word")
    if match.group(1) is not None:
        index, field = int(match.group(1)), match.group(2)
        if word_byte >= header_size:
            raise InternalError(f"header field {name} lies outside the descriptor header")
        return FieldSpec(
            f"Header.Word{index}.{field}",
            "Header",
            f"Word{index}",
            None,
            word_byte,
            bit_in_word,
            width,
        )
    group, register, field = match.group(3), match.group(4), match.group(5)
    for stream in streams:
        data_start = stream.td_offset + 4
        if stream.name == group and data_start <= word_byte < data_start + 4 * stream.words:
            address = stream.address + (word_byte - data_start)
            return FieldSpec(
                f"{group}.{register}.{field}", group, register, address, None, bit_in_word, width
            )
    raise InternalError(f"register field {name} lies outside the canonical {group} stream")


def map_document(generation: str, shipped: tuple[str, ...]) -> dict:
    """The shipped `regs/<generation>.json`, parsed (package data, so a bad one is our bug)."""
    if generation not in shipped:
        raise InternalError(f"no register map is shipped for generation {generation!r}")
    text = (
        resources.files("anekit.formats.hwx")
        .joinpath("regs", f"{generation}.json")
        .read_text("utf-8")
    )
    return json.loads(text)


@functools.cache
def generation_layout(generation: str) -> GenerationLayout:
    """Load the shipped layout and register table of one generation (e.g. "h13")."""
    doc = map_document(generation, KNOWN_GENERATIONS)
    descriptor = doc["descriptor"]
    header_size = _int(descriptor["header_size"])
    streams = tuple(
        StreamLayout(s["name"], _int(s["td_offset"]), _int(s["address"]), int(s["words"]))
        for s in doc["streams"]
    )
    fields = tuple(
        _field_spec(name, int(byte), int(bit), int(width), streams, header_size)
        for name, (byte, bit, width) in doc["fields"]
    )
    return GenerationLayout(
        generation=doc["generation"],
        cpusubtypes=tuple(int(x) for x in doc["cpusubtypes"]),
        descriptor_size=_int(descriptor["size"]),
        header_size=header_size,
        next_pointer_offset=_int(descriptor["next_pointer_offset"]),
        streams=streams,
        fields=fields,
        source=doc["source"],
    )


def layout_for_cpusubtype(cpusubtype: int) -> GenerationLayout | None:
    """The layout whose register table applies to `cpusubtype`, or None if none is known."""
    for generation in KNOWN_GENERATIONS:
        layout = generation_layout(generation)
        if cpusubtype in layout.cpusubtypes:
            return layout
    return None
