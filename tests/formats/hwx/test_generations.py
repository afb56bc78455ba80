"""Register maps of the later generations (H14-H17) and the instruction-stream task framing.

No .hwx of these generations is public, so the tests check (1) the maps against the
independent facts their sources give — Apple's compiler trait constants for the stride
registers, the documented H16 tile-DMA format words, the cpusubtype table of a second
project — (2) the properties that could fail (no overlapping fields, every field inside its
register, disjoint cpusubtypes, engine codes the chip database knows), and (3) the framing
on containers whose task words are written out here by hand from the documented command
layout, including every way such a file can be malformed.
"""

from __future__ import annotations

import json
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anekit import targets
from anekit.errors import FormatError
from anekit.formats import hwx
from anekit.formats.hwx.registers import generation_layout, map_document
from anekit.formats.hwx.stream_maps import STREAM_GENERATIONS, stream_map

from .helpers import fixture_bytes

CPUSUBTYPE_OFFSET = 8  # mach_header: magic, cputype, cpusubtype


def _doc(generation: str) -> dict:
    return map_document(generation, STREAM_GENERATIONS)


def container(cpusubtype: int, text_words: list[int], fixture: str = "h13_relu") -> bytes:
    """An Apple container with another cpusubtype and `text_words` as its __text bytes."""
    data = bytearray(fixture_bytes(fixture))
    struct.pack_into("<I", data, CPUSUBTYPE_OFFSET, cpusubtype)
    section = hwx.parse(fixture_bytes(fixture)).section("__TEXT", "__text")
    body = struct.pack(f"<{len(text_words)}I", *text_words)
    assert len(body) <= section.size
    data[section.offset : section.offset + section.size] = body.ljust(section.size, b"\0")
    return bytes(data)


def task(tid: int, header_words: int, commands: list[int]) -> list[int]:
    """A task: header word 0 = TID | size << 16 (in words), the rest of the header zero."""
    words = [0] * header_words + commands
    words[0] = tid | len(words) << 16
    return words


def dense(word_index: int, values: list[int]) -> list[int]:
    # bit 31 clear, bits 20:15 = count - 1, bits 14:0 = word index (the guide, section 4)
    return [(len(values) - 1) << 15 | word_index, *values]


def sparse(word_index: int, mask: int, values: list[int]) -> list[int]:
    # bit 31 set, bits 30:15 = which of the next 16 registers follow the first
    return [1 << 31 | mask << 15 | word_index, *values]


# ---------------------------------------------------------------- the maps themselves


@pytest.mark.parametrize("generation", STREAM_GENERATIONS)
def test_map_records_its_provenance(generation):
    doc = _doc(generation)
    source = doc["source"]
    assert source["repository"] == "freedomtan/coreml_to_ane_hwx"
    assert source["path"] == f"hwx_dump/{generation}_register_map.md"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert "BSD-3-Clause" in source["licence"]
    assert doc["framing_source"] and doc["header_source"] and doc["blocks_source"]


@pytest.mark.parametrize("generation", STREAM_GENERATIONS)
def test_no_two_fields_overlap_and_every_field_fits_its_register(generation):
    layout = stream_map(generation)
    assert layout.registers
    for register in layout.registers.values():
        taken = 0
        for spec in register.fields:
            assert spec.width >= 1 and spec.bit + spec.width <= 32, f"{register.name}.{spec.name}"
            assert not taken & spec.mask, f"{register.name}.{spec.name} overlaps"
            taken |= spec.mask
        assert len({spec.name for spec in register.fields}) == len(register.fields)
    words: dict[int, int] = {}
    for spec in layout.header_fields:
        assert spec.bit + spec.width <= 32 and spec.word < layout.framing.stream_start_word
        assert not words.get(spec.word, 0) & spec.mask, f"Header.{spec.name} overlaps"
        words[spec.word] = words.get(spec.word, 0) | spec.mask


@pytest.mark.parametrize("generation", STREAM_GENERATIONS)
def test_register_names_are_unique_and_inside_a_block(generation):
    layout = stream_map(generation)
    names = [register.name for register in layout.registers.values()]
    assert len(set(names)) == len(names)
    for address, register in layout.registers.items():
        assert address % 4 == 0 and register.name.split(".")[0] == layout.block_name(address)


def test_cpusubtypes_are_disjoint_and_match_a_second_projects_table():
    # allbilly/ane hwx_parsing.py get_arch_name (commit 3b9a63f86e06): 4 H13, 5 H14, 6 H15,
    # 7 H16, 9 H17 — a different project from the maps' source.
    expected = {"h13": (4,), "h14": (5,), "h15": (6,), "h16": (7,), "h17": (9,)}
    found = {g: stream_map(g).cpusubtypes for g in STREAM_GENERATIONS}
    found["h13"] = generation_layout("h13").cpusubtypes
    assert found == expected


@pytest.mark.parametrize("generation", STREAM_GENERATIONS)
def test_each_generation_is_an_engine_code_of_the_chip_database(generation):
    chip = targets.get(generation)
    assert chip.engine == generation.upper()


# Apple's compiler constants (ZinHWTraits<N>) for the stride registers, as each map's
# 'Hardware Traits' table lists them: symbol -> byte address.
TRAIT_ROLE = re.compile(
    r"ANE_(L2|TILE_DMA)_(SOURCE2|SOURCE|RESULT|SRC|DST)_(\w+?)_STRIDE(2?)_OFFSET"
)


@pytest.mark.parametrize("generation", ["h14", "h16", "h17"])
def test_stride_registers_sit_where_apples_trait_constants_put_them(generation):
    layout = stream_map(generation)
    traits = _doc(generation)["traits"]
    assert len(traits) >= 22
    for address_text, symbol in traits:
        unit, which, kind, second = TRAIT_ROLE.fullmatch(symbol).groups()
        name = layout.registers[int(address_text, 16)].name
        block = "L2" if unit == "L2" else ("TileDMADst" if which == "DST" else "TileDMASrc")
        source = {"SOURCE": "Src1", "SOURCE2": "Src2", "RESULT": "Result", "DST": "Dst"}.get(
            which, "Src2" if second else "Src1"
        )
        kinds = ("Plane", "Channel") if kind in ("PLANE", "CHANNEL") else (kind.capitalize(),)
        assert name.startswith(f"{block}.{source}"), (symbol, name)
        assert any(f"{k}Stride" in name for k in kinds), (symbol, name)


def test_h16_map_agrees_with_every_trait_and_h17_is_corrected_by_them():
    assert not [entry for entry in _doc("h16")["left_out"] if "trait" in entry[2]]
    corrected = [entry for entry in _doc("h17")["left_out"] if "trait" in entry[2]]
    assert corrected, "the H17 map's stride table is a word off its traits"


# The H16 tile-DMA format words the map documents (M4 'Format Bitfield Enumeration'):
# word -> (FormatMode, MemFmt, Trunc, Shift).
H16_FORMAT_WORDS = {
    0x3103: (3, 3, 0, 1),  # FLOAT32
    0x2031: (1, 2, 3, 0),  # FLOAT16
    0x1000: (0, 1, 0, 0),  # INT8
    0x0000: (0, 0, 0, 0),  # UINT8
    0x3002: (2, 3, 0, 0),  # INT16
    0x0102: (2, 0, 0, 1),  # Packed10
}


@pytest.mark.parametrize("word", sorted(H16_FORMAT_WORDS))
def test_h16_tile_dma_format_words_decode_to_their_documented_fields(word):
    data = container(7, task(1, 9, dense(0x4D68 // 4, [word, word])))
    fields = hwx.parse(data).task_descriptors[0].fields
    for src in ("Src1Fmt", "Src2Fmt"):
        got = tuple(
            fields[f"TileDMASrc.{src}.{f}"] for f in ("FormatMode", "MemFmt", "Trunc", "Shift")
        )
        assert got == H16_FORMAT_WORDS[word]


# The guide (freedomtan/coreml_to_ane_hwx GUIDE_ANE_HWX_FORMAT.md §5, a different document
# from the maps) gives the convolution word's bits: Kw 5:0, Kh 11:6, Sx 14:13, Sy 16:15,
# Px 21:17, Py 26:22, at 0x20 on H14/H15 and 0x28 on H16+, and H14's packed InDim.
CONV_BITS = {(0, 6), (6, 6), (13, 2), (15, 2), (17, 5), (22, 5)}


@pytest.mark.parametrize("generation, address", [("h14", 0x20), ("h16", 0x28)])
def test_conv_word_sits_where_the_guide_puts_it(generation, address):
    register = stream_map(generation).registers[address]
    assert register.name == "Common.ConvCfg"
    assert CONV_BITS <= {(f.bit, f.width) for f in register.fields}


def test_h14_packs_width_and_height_into_one_word_as_the_guide_says():
    register = stream_map("h14").registers[0x0]
    assert {(f.bit, f.width) for f in register.fields} == {(0, 15), (16, 15)}
    assert stream_map("h14").registers[0x8].name == "Common.ChannelCfg"


# ---------------------------------------------------------------- framing


def test_dense_and_sparse_commands_write_the_registers_they_name():
    commands = dense(0, [0x21, 77, 3]) + sparse(0x4900 // 4, 0b101, [0x1, 0x2, 0x3])
    f = hwx.parse(container(7, task(5, 9, commands)))
    assert f.generation == "h16"
    (td,) = f.task_descriptors
    written = {s.address + 4 * i: w for s in td.streams for i, w in enumerate(s.words)}
    # mask bit b selects the register b + 1 words past the first
    assert written == {0x0: 0x21, 0x4: 77, 0x8: 3, 0x4900: 1, 0x4904: 2, 0x490C: 3}
    assert td.fields["Header.Word0.TID"] == 5 and td.fields["Header.Word0.TaskSize"] == 9 + 4 + 4
    assert td.fields["Common.ChannelCfg.InFmt"] == 1 and td.fields["Common.ChannelCfg.OutFmt"] == 2
    assert td.fields["Common.InWidth.Win"] == 77 and td.fields["Common.InHeight.Hin"] == 3
    assert td.fields["NE.KernelCfg.Fmt"] == 1


def test_padding_is_skipped_and_tasks_start_on_16_byte_boundaries():
    first = task(1, 9, dense(0x14 // 4, [9]))  # 11 words: the next task starts at 48
    second = task(2, 9, dense(0x18 // 4, [8]))
    words = (
        [1, 0, 0, 0] + first + [0] * (12 - len(first)) + second
    )  # a 16-byte signature block first
    f = hwx.parse(container(7, words))
    assert [td.offset for td in f.task_descriptors] == [16, 64]
    assert [td.fields["Header.Word0.TID"] for td in f.task_descriptors] == [1, 2]
    assert f.task_descriptors[1].fields["Common.OutHeight.Hout"] == 8
    assert any("padding" in note for note in f.notes)


def test_bits_no_field_names_are_reported_raw():
    # NE.KernelCfg names bits 0-1, 2, 4-7, 8, 10, 15, 16, 21-23 and 24: bits 3 and 31 are
    # nobody's; 0x7000 lies past every block.
    commands = dense(0x4900 // 4, [0x80000009]) + dense(0x7000 // 4, [0x1234])
    td = hwx.parse(container(7, task(1, 9, commands))).task_descriptors[0]
    assert td.fields["NE.KernelCfg.Fmt"] == 1
    assert dict(td.unknown) == {0x4900: 0x80000008, 0x7000: 0x1234}
    assert td.streams[1].name is None


def test_h14_addresses_are_word_indices_into_its_own_block_layout():
    # H14's tile-DMA destination block starts at 0x1500 (the map's OLD addresses)
    # (its TileDMADst block starts at 0x1500); Apple's trait puts the row stride at 0x1508,
    # a register with no bit fields, so its value is reported raw
    td = hwx.parse(container(5, task(1, 8, dense(0x1508 // 4, [0x40])))).task_descriptors[0]
    assert td.streams[0].name == "TileDMADst"
    assert stream_map("h14").registers[0x1508].name == "TileDMADst.DstRowStride"
    assert dict(td.unknown) == {0x1508: 0x40}


def test_a_relocation_is_located_at_the_register_its_word_writes():
    # Apple's sigmoid relocates __text offset 0x74 = word 29; a dense command at word 9 puts
    # its value 19 there, which lands on register 0x5500 + 4 * 19 = 0x554c
    data = container(7, task(1, 9, dense(0x5500 // 4, list(range(30)))), "h13_sigmoid")
    (relocation,) = hwx.parse(data).relocations
    assert relocation.address == 0x74 and relocation.descriptor == 0
    assert relocation.register == "KernelDMASrc.CoeffDMAConfig11"


def test_the_emulator_refuses_a_later_generation_by_name():
    from anekit.emulator import EngineProgram

    with pytest.raises(FormatError, match=r"runs H13 programs.*cpusubtype 7 \(h16\)"):
        EngineProgram(container(7, task(1, 9, dense(0, [1]))))


@pytest.mark.parametrize("cpusubtype", [1, 3, 10, 0x1234])
def test_generations_without_a_map_stay_raw_and_labelled_unknown(cpusubtype):
    f = hwx.parse(container(cpusubtype, task(1, 9, dense(0, [1]))))
    assert f.generation is None
    (td,) = f.task_descriptors
    assert td.fields == {} and td.streams[0].name is None
    assert any(f"cpusubtype {cpusubtype}" in note and "raw" in note for note in f.notes)


def test_h13_still_selects_the_fixed_layout():
    for name in ("h13_relu", "h13_mul_zin7"):
        f = hwx.parse(fixture_bytes(name))
        assert (
            f.generation == "h13"
            and f.task_descriptors[0].fields["Header.Word7.NextPointer"] is not None
        )


# ---------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    "words, message",
    [
        ([1 | 500 << 16], "task size"),  # runs past the end of __text
        ([1 | 3 << 16, 0, 0], "task size"),  # shorter than its header
        (task(1, 9, [5 << 15 | 0, 1, 2]), "values inside the task"),  # dense count past the end
        (
            task(1, 9, [1 << 31 | 0xFFFF << 15, 1]),
            "values inside the task",
        ),  # sparse mask past the end
    ],
)
def test_malformed_tasks_are_format_errors(words, message):
    with pytest.raises(FormatError, match=message):
        hwx.parse(container(7, words))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cpusubtype=st.sampled_from([5, 6, 7, 9]),
    words=st.lists(st.integers(0, 0xFFFFFFFF), min_size=1, max_size=40),
    size=st.integers(0, 60),
)
def test_arbitrary_task_words_decode_or_raise_format_error(cpusubtype, words, size):
    words = [words[0] & 0xFFFF | size << 16, *words[1:]]
    try:
        f = hwx.parse(container(cpusubtype, words))
    except FormatError:
        return
    for td in f.task_descriptors:
        assert td.size % 4 == 0 and td.offset % 16 == 0


# ---------------------------------------------------------------- anekit inspect


def test_inspect_names_the_generation_its_chip_its_map_and_the_unknown_bits(tmp_path, capsys):
    from anekit.cli import main

    path = tmp_path / "h16_task.hwx"
    path.write_bytes(container(7, task(3, 9, dense(0x4900 // 4, [0x80000009]))))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert ".hwx container" in out and "H16 (m4) (cpusubtype 7)" in out
    assert "register map: freedomtan/coreml_to_ane_hwx hwx_dump/h16_register_map.md" in out
    assert "KernelCfg: Fmt=1" in out
    assert "register 0x04900 NE.KernelCfg: bits 0x80000008 (unknown)" in out
    assert main(["inspect", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["generation"] == "h16" and doc["register_map"]["chip"] == "m4"
    assert doc["task_descriptors"][0]["unknown_bits"] == {"0x04900": 0x80000008}


def test_the_docs_generation_table_counts_what_is_shipped():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[3] / "docs" / "engine.md").read_text()
    for generation in STREAM_GENERATIONS:
        layout = stream_map(generation)
        fields = sum(len(r.fields) for r in layout.registers.values())
        row = next(
            line for line in docs.splitlines() if line.startswith(f"| {generation.upper()} |")
        )
        assert f"| {layout.cpusubtypes[0]} |" in row
        assert f"{len(layout.registers)} registers, {fields} fields" in row
