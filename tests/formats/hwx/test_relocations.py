"""Relocations: kernel base-address slots in the descriptors pointing at weight tiles."""

from __future__ import annotations

import pytest

from anekit.errors import FormatError
from anekit.formats import hwx

from .helpers import fixture_bytes, patched


def test_gemm_has_16_kernel_relocations_into_the_weight_section(decoded):
    f = decoded["h13_gemm"]
    const = f.section("__TEXT", "__const")
    relocations = [r for r in f.relocations if r.target == const.full_name]
    assert len(relocations) == len(f.relocations) == 16
    fields = f.task_descriptors[0].fields
    for lane, relocation in enumerate(relocations):
        assert relocation.section == "__TEXT,__text"
        assert (relocation.extern, relocation.length, relocation.scattered) == (False, 2, False)
        assert relocation.symbol_index == const.index
        assert (relocation.descriptor, relocation.register) == (
            0,
            f"KernelDMASrc.CoeffBaseAddr[{lane}]",
        )
        # The patched word (the kernel base address field) is the tile's offset in the section,
        # and the symbol table places tile `lane` exactly there.
        assert relocation.addend == fields[f"KernelDMASrc.CoeffBaseAddr[{lane}].Addr"] * 64
        tile = next(t for t in f.weight_tiles if t.lane == lane)
        assert relocation.target_address == tile.address == const.addr + relocation.addend
        assert relocation.symbol == tile.name


@pytest.mark.parametrize(
    ("name", "count"),
    [("h13_conv", 3), ("h13_model_golden", 3), ("h13_sigmoid", 1), ("h13_relu", 0), ("h13_sum", 0)],
)
def test_one_relocation_per_enabled_kernel_stream(decoded, name, count):
    f = decoded[name]
    assert len(f.relocations) == count
    fields = f.task_descriptors[0].fields
    enabled = sum(fields[f"KernelDMASrc.CoeffDMAConfig[{i}].En"] for i in range(16))
    assert enabled == count
    assert {r.symbol for r in f.relocations} == {t.name for t in f.weight_tiles}


def test_sigmoid_lookup_table_is_one_unnamed_lane_tile(decoded):
    (tile,) = decoded["h13_sigmoid"].weight_tiles
    assert tile.lane is None and tile.weight == tile.name and tile.size == 0x80


def _reloc_entry_offset(decoded, name: str) -> int:
    return decoded[name].relocations[0].entry_offset


def test_relocation_naming_a_missing_section(decoded):
    at = _reloc_entry_offset(decoded, "h13_conv")
    data = patched(fixture_bytes("h13_conv"), at + 4, "I", (2 << 25) | (1 << 24) | 77)
    with pytest.raises(FormatError, match="section 1..") as info:
        hwx.read(data)
    assert info.value.offset == at + 4


def test_relocation_address_outside_the_section(decoded):
    at = _reloc_entry_offset(decoded, "h13_conv")
    with pytest.raises(FormatError, match="relocation address") as info:
        hwx.read(patched(fixture_bytes("h13_conv"), at, "I", 0x7FFFFF))
    assert info.value.offset == at


def test_external_relocation_to_a_missing_symbol(decoded):
    at = _reloc_entry_offset(decoded, "h13_conv")
    data = patched(fixture_bytes("h13_conv"), at + 4, "I", (2 << 25) | (1 << 27) | 0xFFFFFF)
    with pytest.raises(FormatError, match="symbols"):
        hwx.read(data)


def test_external_relocation_resolves_through_the_symbol(decoded):
    f = decoded["h13_conv"]
    tile = next(s for s in f.symbols if s.name.endswith("_ne_0"))
    data = patched(
        fixture_bytes("h13_conv"),
        f.relocations[0].entry_offset + 4,
        "I",
        (2 << 25) | (1 << 27) | tile.index,
    )
    relocation = hwx.read(data).relocations[0]
    assert (
        relocation.extern
        and relocation.target == tile.name
        and relocation.target_address == tile.value
    )


def test_relocation_table_past_the_end(decoded):
    f = decoded["h13_conv"]
    text_header = next(s for s in f.segments if s.name == "__TEXT").command_offset + 72
    with pytest.raises(FormatError, match="relocations"):
        hwx.read(patched(fixture_bytes("h13_conv"), text_header + 60, "I", 0x10000000))
