"""The binary readers under fuzz: Apple's .hwx files, and weight.bin files from coremltools' writer."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from format_fuzzer import FIXTURES
from format_fuzzer.engine import Field, FuzzTarget

# ---- the .hwx target ---------------------------------------------------------------------


def _hwx_decode(data: bytes) -> Any:
    from anekit.formats import hwx

    return hwx.read(data).to_json()


def _hwx_fields(data: bytes) -> list[Field]:
    """Every header, command, segment, section, symtab, relocation and descriptor field."""
    from anekit.formats import hwx

    f = hwx.read(data)
    fields = [Field(4 * i, 4, f"header[{i}]") for i in range(8)]
    for command in f.commands:
        fields += [Field(command.offset, 4, "cmd"), Field(command.offset + 4, 4, "cmdsize")]
        if command.kind in ("io_buffer", "mapped_region"):
            fields += [
                Field(command.offset + 8, 4, "io name offset"),
                Field(command.offset + 16, 4, "io address"),
            ]
        elif command.kind == "thread":
            fields += [
                Field(command.offset + 8, 4, "thread flavor"),
                Field(command.offset + 12, 4, "thread count"),
            ]
        elif command.kind == "symtab":
            fields += [Field(command.offset + 8 + 4 * i, 4, f"symtab[{i}]") for i in range(4)]
    for segment in f.segments:
        at = segment.command_offset
        fields += [Field(at + 24 + 8 * i, 8, f"{segment.name} range[{i}]") for i in range(4)]
        fields += [
            Field(at + 56 + 4 * i, 4, f"{segment.name} prot/nsects/flags[{i}]") for i in range(4)
        ]
        for i, section in enumerate(segment.sections):
            base = at + 72 + 80 * i
            fields += [
                Field(base + 32, 8, f"{section.full_name} addr"),
                Field(base + 40, 8, f"{section.full_name} size"),
            ]
            fields += [
                Field(base + 48 + 4 * k, 4, f"{section.full_name} word[{k}]") for k in range(5)
            ]
    for symbol in f.symbols:
        fields += [
            Field(symbol.entry_offset, 4, "n_strx"),
            Field(symbol.entry_offset + 5, 1, "n_sect"),
            Field(symbol.entry_offset + 8, 8, "n_value"),
        ]
    for relocation in f.relocations:
        fields += [
            Field(relocation.entry_offset, 4, "r_address"),
            Field(relocation.entry_offset + 4, 4, "r_info"),
        ]
    text = f.section("__TEXT", "__text")
    if text is not None:
        for descriptor in f.task_descriptors:
            base = text.offset + descriptor.offset
            fields += [
                Field(base + 4 * i, 4, f"td header[{i}]") for i in range(len(descriptor.header))
            ]
            fields += [
                Field(text.offset + s.offset, 4, f"stream header {s.name}")
                for s in descriptor.streams
            ]
    return fields


def _hwx_boundaries(data: bytes) -> list[int]:
    from anekit.formats import hwx

    f = hwx.read(data)
    points = {0, 4, 8, 16, 20, 24, 28, 32, f.size - 1}
    for command in f.commands:
        points.update((command.offset, command.offset + 8, command.offset + command.size - 1))
    for section in f.sections:
        if section.has_file_data:
            points.update(
                (section.offset, section.offset + section.size - 1, section.offset + section.size)
            )
        if section.nreloc:
            points.update((section.reloff, section.reloff + 8 * section.nreloc - 1))
    symtab = next((c for c in f.commands if c.kind == "symtab"), None)
    if symtab is not None and f.symbols:
        first = f.symbols[0]
        points.update((first.entry_offset, f.symbols[-1].entry_offset + 15, first.name_offset))
    text = f.section("__TEXT", "__text")
    if text is not None:
        for descriptor in f.task_descriptors:
            points.update(text.offset + s.offset for s in descriptor.streams)
            points.add(text.offset + descriptor.offset + 0x1C)
    return sorted(p for p in points if 0 <= p < f.size)


def hwx_fixtures() -> list[tuple[str, bytes]]:
    """Apple's .hwx programs, named by file stem."""
    return [(path.stem, path.read_bytes()) for path in sorted((FIXTURES / "hwx").glob("*.hwx"))]


def hwx_target() -> FuzzTarget:
    return FuzzTarget(
        name="hwx",
        fixtures=hwx_fixtures,
        decode=_hwx_decode,
        fields=_hwx_fields,
        boundaries=_hwx_boundaries,
    )


# ---- the weight.bin target (files written by coremltools' own MILBlob writer) -------------


def _weight_bin_fixtures() -> list[tuple[str, bytes]]:
    """Two weight.bin files from coremltools' `_BlobStorageWriter`: every dtype it writes."""
    import numpy as np

    try:
        from coremltools.libmilstoragepython import _BlobStorageWriter
    except ImportError as exc:
        raise SystemExit(
            f"the weight.bin target needs coremltools (pip install 'anekit[coreml]'): {exc}"
        ) from None
    rng = np.random.default_rng(0)
    groups = {
        "coremltools_wide": [
            ("fp16", rng.standard_normal(37).astype(np.float16)),
            ("float", rng.standard_normal(19).astype(np.float32)),
            ("int8", rng.integers(-128, 128, 33).astype(np.int8)),
            ("uint8", rng.integers(0, 256, 70).astype(np.uint8)),
            ("int16", rng.integers(-999, 999, 9).astype(np.int16)),
            ("uint16", rng.integers(0, 999, 9).astype(np.uint16)),
            ("int32", rng.integers(-999, 999, 5).astype(np.int32)),
            ("uint32", rng.integers(0, 999, 5).astype(np.uint32)),
        ],
        "coremltools_sub_byte": [
            ("int4", rng.integers(-8, 8, 13).astype(np.int8)),
            ("uint1", rng.integers(0, 2, 13).astype(np.uint8)),
            ("uint2", rng.integers(0, 4, 13).astype(np.uint8)),
            ("uint3", rng.integers(0, 8, 13).astype(np.uint8)),
            ("uint4", rng.integers(0, 16, 13).astype(np.uint8)),
            ("uint6", rng.integers(0, 64, 13).astype(np.uint8)),
        ],
    }
    fixtures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, arrays in groups.items():
            path = Path(tmp) / f"{name}.bin"
            writer = _BlobStorageWriter(str(path))
            for dtype, array in arrays:
                getattr(writer, f"write_{dtype}_data")(array)
            del writer  # the file is complete once the writer is destroyed
            fixtures.append((name, path.read_bytes()))
    return fixtures


def _weight_bin_decode(data: bytes) -> Any:
    from anekit.formats.blob import BlobReader

    with BlobReader(data) as reader:
        return [reader.read(record.offset) for record in reader.records()]


def _weight_bin_records(data: bytes) -> list[int]:
    from anekit.formats.blob import BlobReader

    with BlobReader(data) as reader:
        return [record.offset for record in reader.records()]


def _weight_bin_fields(data: bytes) -> list[Field]:
    fields = [Field(0, 4, "count"), Field(4, 4, "version")]
    for at in _weight_bin_records(data):
        fields += [Field(at, 4, "sentinel"), Field(at + 4, 4, "dtype"), Field(at + 8, 8, "size")]
        fields += [Field(at + 16, 8, "data offset"), Field(at + 24, 8, "padding bits")]
    return fields


def _weight_bin_boundaries(data: bytes) -> list[int]:
    points = {0, 8, 63, 64}
    for at in _weight_bin_records(data):
        points.update((at, at + 32, at + 63, at + 64))
    return sorted(p for p in points if p < len(data))


def weight_bin_target() -> FuzzTarget:
    return FuzzTarget(
        "weight.bin",
        _weight_bin_fixtures,
        _weight_bin_decode,
        _weight_bin_fields,
        _weight_bin_boundaries,
    )
