"""The shipped H13 register table and how its byte offsets map onto register addresses."""

from __future__ import annotations

import json
import re

import pytest

from anekit.formats.hwx.registers import generation_layout, layout_for_cpusubtype

from .helpers import CANONICAL_FILES, CANONICAL_IDS, FIXTURES


def test_shipped_table_is_tinygrads_unchanged():
    original = json.loads((FIXTURES / "regs" / "h13_aneregs.json").read_text())
    from importlib import resources

    shipped = json.loads(
        resources.files("anekit.formats.hwx").joinpath("regs", "h13.json").read_text()
    )
    assert shipped["fields"] == original
    assert "MIT" in shipped["source"] and "tinygrad" in shipped["source"]


def test_layout_has_258_fields_in_eight_groups():
    layout = generation_layout("h13")
    assert len(layout.fields) == 258
    assert {f.group for f in layout.fields} == {
        "Header",
        "KernelDMASrc",
        "Common",
        "TileDMASrc",
        "L2",
        "NE",
        "TileDMADst",
    }
    assert layout.descriptor_size == 0x274 and layout.header_size == 0x28
    assert (
        sum(4 + 4 * s.words for s in layout.streams) + layout.header_size == layout.descriptor_size
    )
    assert len({f.name for f in layout.fields}) == 258


def test_selected_by_cpusubtype_4_only():
    assert layout_for_cpusubtype(4).generation == "h13"
    assert layout_for_cpusubtype(5) is None


def test_known_field_addresses():
    by_name = {f.name: f for f in generation_layout("h13").fields}
    win, hin = by_name["Common.InDim.Win"], by_name["Common.InDim.Hin"]
    assert (win.address, win.bit, win.width) == (0x0, 0, 15)
    assert (hin.address, hin.bit, hin.width) == (0x0, 16, 15)
    assert by_name["KernelDMASrc.CoeffBaseAddr[0].Addr"].address == 0x1F800 + (116 - 44)
    assert by_name["Header.Word7.NextPointer"].header_offset == 28


@pytest.mark.parametrize("path", CANONICAL_FILES, ids=CANONICAL_IDS)
def test_address_decoding_equals_tinygrads_direct_byte_decoding(decoded, path):
    """Independent method: tinygrad reads each field at its byte offset in the raw descriptor."""
    original = json.loads((FIXTURES / "regs" / "h13_aneregs.json").read_text())
    f = decoded[path.stem]
    text = f.section("__TEXT", "__text")
    data = path.read_bytes()
    for descriptor in f.task_descriptors:
        raw = data[text.offset + descriptor.offset : text.offset + descriptor.offset + 0x274]
        direct = {}
        for name, (byte, bit, width) in original:
            value = (int.from_bytes(raw[byte : byte + 8].ljust(8, b"\0"), "little") >> bit) & (
                (1 << width) - 1
            )
            direct[name.removeprefix("aneRegs.")] = value
        ours = {
            re.sub(r"^Header\.Word(\d+)\.", r"aneTD.Header[\1].", k): v
            for k, v in descriptor.fields.items()
        }
        assert ours == direct
