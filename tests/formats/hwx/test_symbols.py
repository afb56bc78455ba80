"""Symbol table: the stabs type catalog, tensor shapes and strides, roles, weight tiles."""

from __future__ import annotations

import plistlib

import pytest

from anekit.errors import FormatError
from anekit.formats import hwx

from .helpers import FIXTURES, HWX_FILES, HWX_IDS, fixture_bytes

# The netplist each fixture was compiled from (its banner's -i, fixtures/README.md).
SOURCE_NETPLIST = {
    "h13_relu": "simple/neuron.plist",
    "h13_sigmoid": "simple/neuron.plist",
    "h13_conv": "simple/conv.plist",
    "h13_model_golden": "net.plist",
    "h13_gemm": "simple/gemm.plist",
    "h13_concat": "simple/concat.plist",
    "h13_sum": "plists/sum.plist",
}


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_catalog_defines_float16_as_type_5(decoded, path):
    catalog = {entry.type_id: entry for entry in decoded[path.stem].type_catalog}
    assert catalog[5].name == "float16" and catalog[5].definition == "r1;2;0"
    assert catalog[1].name == "void"
    assert catalog[2].definition == "r2;0;127"


def test_newer_compilers_extend_the_catalog(decoded):
    old = {e.name for e in decoded["h13_relu"].type_catalog}
    new = {e.name for e in decoded["h13_mul_zin7"].type_catalog}
    assert old < new and {"uint16", "packed10", "uint1"} <= new - old


@pytest.mark.parametrize("name", sorted(SOURCE_NETPLIST))
def test_tensor_shapes_match_the_source_netplist(decoded, name):
    plist = plistlib.loads((FIXTURES / "netplist" / SOURCE_NETPLIST[name]).read_bytes())
    network = plist[plist["Networks"][0]]
    f = decoded[name]
    assert [t.name for t in f.inputs] == network["Inputs"]
    assert {t.name for t in f.outputs} == set(network["Outputs"])
    for tensor in f.inputs:
        declared = network[tensor.name]
        _n, c, h, w = tensor.shape
        assert (c, h, w) == (
            declared["InputChannels"],
            declared["InputHeight"],
            declared["InputWidth"],
        )
        assert declared["InputType"] == "Float16" and tensor.dtype == "float16"
        if "InputRowStride" in declared:
            assert tensor.strides[2] == declared["InputRowStride"]
            assert tensor.strides[1] == declared["InputPlaneStride"]


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_strides_follow_the_64_byte_row_padding(decoded, path):
    for tensor in decoded[path.stem].tensors:
        n, c, h, w = tensor.shape
        sn, sc, sh, sw = tensor.strides
        assert sw == 2  # one fp16 element
        assert sh == -(-w * sw // 64) * 64  # rows padded to 64 bytes (FACTS section 4)
        assert sc == h * sh and sn == c * sc
        assert [a.axis for a in tensor.axes] == ["n", "c", "h", "w"]


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_roles_agree_with_output_suffix_and_window_protection(decoded, path):
    f = decoded[path.stem]
    windows = {s.vmaddr: s for s in f.segments if s.name == "__FVMLIB"}
    for tensor in f.tensors:
        if tensor.name.endswith("@output"):
            assert tensor.role == "output"
        window = windows[tensor.address]
        assert (window.initprot, window.maxprot) == ((2, 2) if tensor.role == "output" else (1, 1))
    assert len(f.outputs) == 1 and len(f.inputs) >= 1


def test_mul_output_without_suffix_is_an_output_by_its_write_window(decoded):
    for name in ("h13_mul_zin5", "h13_mul_zin7"):
        f = decoded[name]
        assert [t.name for t in f.outputs] == ["probs"]
        assert [t.name for t in f.inputs] == ["image", "image2"]


def test_gemm_weight_tiles_are_16_lanes_sized_by_the_descriptor(decoded):
    f = decoded["h13_gemm"]
    tiles = f.weight_tiles
    assert [t.lane for t in tiles] == list(range(16))
    assert (
        len({t.weight for t in tiles}) == 1
        and tiles[0].weight.startswith("K")
        and len(tiles[0].weight) == 65
    )
    assert all(t.live and t.section == "__TEXT,__const" for t in tiles)
    fields = f.task_descriptors[0].fields
    for tile in tiles:  # the kernel DMA buffer size of lane i, in 64-byte units, is tile i's size
        assert tile.size == fields[f"KernelDMASrc.CoeffBfrSize[{tile.lane}].MemBfrSize"] * 64
    const = f.section("__TEXT", "__const")
    assert tiles[0].file_offset == const.offset
    assert sum(t.size for t in tiles) == const.size


def test_conv_weight_tiles_use_the_64_byte_granule(decoded):
    tiles = decoded["h13_conv"].weight_tiles
    assert [t.lane for t in tiles] == [0, 1, 2]
    assert [t.address - tiles[0].address for t in tiles] == [0, 0x40, 0x80]


def test_files_without_weights_have_no_tiles(decoded):
    assert decoded["h13_relu"].weight_tiles == ()
    assert decoded["h13_sum"].weight_tiles == ()


def _corrupt_symbol_string(name: str, old: bytes, new: bytes) -> bytes:
    data = fixture_bytes(name)
    assert len(old) == len(new) and data.count(old) == 1
    return data.replace(old, new)


def test_malformed_tensor_stab_is_a_format_error(decoded):
    stab = next(s for s in decoded["h13_relu"].symbols if s.type == 0x20)
    data = _corrupt_symbol_string("h13_relu", b"ar1;0;77;15=s2w:5", b"ar1;0;77;15=s2w:X")
    with pytest.raises(FormatError) as info:
        hwx.read(data)
    assert "tensor stab" in str(info.value) and info.value.offset == stab.name_offset


def test_tensor_with_an_undefined_element_type(decoded):
    data = _corrupt_symbol_string("h13_relu", b"ar1;0;77;15=s2w:5", b"ar1;0;77;15=s2w:0")
    with pytest.raises(FormatError, match="type catalog"):
        hwx.read(data)


def test_repeated_axis_is_rejected():
    data = _corrupt_symbol_string(
        "h13_relu", b"12=s192n:ar1;0;1;13=s192c", b"12=s192n:ar1;0;1;13=s192n"
    )
    with pytest.raises(FormatError, match="repeats"):
        hwx.read(data)


def test_symbol_naming_a_missing_section(decoded):
    symbol = decoded["h13_relu"].symbols[0]
    data = bytearray(fixture_bytes("h13_relu"))
    data[symbol.entry_offset + 5] = 99
    with pytest.raises(FormatError, match="section"):
        hwx.read(bytes(data))


def test_symbol_name_offset_past_the_string_table(decoded):
    symbol = decoded["h13_relu"].symbols[3]
    data = bytearray(fixture_bytes("h13_relu"))
    data[symbol.entry_offset : symbol.entry_offset + 4] = (0x7FFFFFFF).to_bytes(4, "little")
    with pytest.raises(FormatError) as info:
        hwx.read(bytes(data))
    assert info.value.offset == symbol.entry_offset


def test_weight_symbol_outside_its_section(decoded):
    tile_symbol = next(s for s in decoded["h13_conv"].symbols if s.name.endswith("_ne_1"))
    data = bytearray(fixture_bytes("h13_conv"))
    data[tile_symbol.entry_offset + 8 : tile_symbol.entry_offset + 16] = (0x10).to_bytes(
        8, "little"
    )
    with pytest.raises(FormatError, match="inside __TEXT,__const"):
        hwx.read(bytes(data))
