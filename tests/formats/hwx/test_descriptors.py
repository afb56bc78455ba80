"""The task-descriptor chain: headers, register-write streams and decoded fields."""

from __future__ import annotations

import pytest

from anekit.errors import FormatError
from anekit.formats import hwx

from .helpers import CANONICAL_FILES, CANONICAL_IDS, HWX_FILES, HWX_IDS, fixture_bytes, patched

# FACTS section 4: the stream header words of h13_relu.hwx and their word counts.
RELU_STREAMS = [
    (0xF401F800, 62),
    (0x3C000000, 16),
    (0x6C013800, 28),
    (0x44004800, 18),
    (0x0C008800, 4),
    (0x1000C800, 5),
    (0x18017800, 7),
]
H13_STREAM_ORDER = ["KernelDMASrc", "Common", "TileDMASrc", "L2", "Planar", "NE", "TileDMADst"]


def test_relu_stream_headers_match_facts(decoded):
    (descriptor,) = decoded["h13_relu"].task_descriptors
    assert [(s.header, len(s.words)) for s in descriptor.streams] == RELU_STREAMS
    assert [s.name for s in descriptor.streams] == H13_STREAM_ORDER
    for stream in descriptor.streams:  # bits 31:26 = count - 1, bits 25:0 = register address
        assert stream.header >> 26 == len(stream.words) - 1
        assert stream.header & 0x3FFFFFF == stream.address


@pytest.mark.parametrize("path", CANONICAL_FILES, ids=CANONICAL_IDS)
def test_h13_descriptors_are_0x274_bytes_with_seven_streams(decoded, path):
    f = decoded[path.stem]
    assert f.generation == "h13"
    text = f.section("__TEXT", "__text")
    for descriptor in f.task_descriptors:
        assert descriptor.size == 0x274 and descriptor.note is None
        assert [s.name for s in descriptor.streams] == H13_STREAM_ORDER
        assert descriptor.streams[0].offset == descriptor.offset + 0x28
        assert descriptor.offset + descriptor.size <= text.size
    assert f.task_descriptors[-1].offset + 0x274 == text.size


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_first_descriptor_input_dims_match_an_input_tensor(decoded, path):
    f = decoded[path.stem]
    fields = f.task_descriptors[0].fields
    dims = {(t.shape[3], t.shape[1], t.shape[2]) for t in f.inputs}
    assert (
        fields["Common.InDim.Win"],
        fields["Common.Cin.Cin"],
        fields["Common.InDim.Hin"],
    ) in dims
    if len(f.inputs) == 1:
        (single,) = f.inputs
        assert fields["Common.InDim.Win"] == single.shape[3]
        assert fields["Common.Cin.Cin"] == single.shape[1]


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_tile_dma_strides_match_the_symbol_table_strides(decoded, path):
    # DMA strides are 26-bit fields at bit 6 (ane-container), i.e. in 64-byte units.
    f = decoded[path.stem]
    (output,) = f.outputs
    for descriptor in f.task_descriptors:
        fields = descriptor.fields
        source = (
            fields["TileDMASrc.DepthStride.Stride"] * 64,
            fields["TileDMASrc.PlaneStride.PlaneStride"] * 64,
            fields["TileDMASrc.RowStride.Stride"] * 64,
        )
        assert source in {t.strides[:3] for t in f.inputs}
        destination = (
            fields["TileDMADst.DepthStride.DepthStride"] * 64,
            fields["TileDMADst.PlaneStride.PlaneStride"] * 64,
            fields["TileDMADst.RowStride.RowStride"] * 64,
        )
        assert destination == output.strides[:3]


def test_concat_chains_two_descriptors_whose_outputs_add_up(decoded):
    f = decoded["h13_concat"]
    first, second = f.task_descriptors
    assert (first.offset, first.next_offset) == (0, 0x300)
    assert (second.offset, second.next_offset) == (0x300, None)
    assert first.header[7] == 0x300
    # Header word 0: the last descriptor of the network carries the end-of-network bit.
    assert (first.fields["Header.Word0.EON"], second.fields["Header.Word0.EON"]) == (0, 1)
    assert (first.fields["Header.Word0.TID"], second.fields["Header.Word0.TID"]) == (0, 1)
    (output,) = f.outputs
    assert first.fields["Common.Cout.Cout"] + second.fields["Common.Cout.Cout"] == output.shape[1]
    assert {first.fields["Common.Cin.Cin"], second.fields["Common.Cin.Cin"]} == {
        t.shape[1] for t in f.inputs
    }


def test_single_descriptors_end_the_network(decoded):
    for name in ("h13_relu", "h13_conv", "h13_gemm"):
        (descriptor,) = decoded[name].task_descriptors
        assert descriptor.fields["Header.Word0.EON"] == 1 and descriptor.next_offset is None


def test_relu_and_sigmoid_differ_in_the_ne_nonlinear_mode(decoded):
    relu = decoded["h13_relu"].task_descriptors[0].fields
    sigmoid = decoded["h13_sigmoid"].task_descriptors[0].fields
    assert relu["NE.MACCfg.NonlinearMode"] != sigmoid["NE.MACCfg.NonlinearMode"]
    differing = {name for name in relu if relu[name] != sigmoid[name]}
    assert "NE.MACCfg.NonlinearMode" in differing
    # Everything about the shape is the same: the two netplists differ only in the activation.
    for name in ("Common.InDim.Win", "Common.Cin.Cin", "Common.Cout.Cout", "Common.OutDim.Wout"):
        assert relu[name] == sigmoid[name]


def test_output_dims_match_the_output_tensor(decoded):
    for name in ("h13_relu", "h13_conv", "h13_gemm", "h13_sum", "h13_mul_zin7"):
        f = decoded[name]
        (output,) = f.outputs
        fields = f.task_descriptors[0].fields
        assert fields["Common.OutDim.Wout"] == output.shape[3]
        assert fields["Common.Cout.Cout"] == output.shape[1]


def test_unknown_generation_decodes_to_raw_words_with_a_note():
    data = patched(fixture_bytes("h13_relu"), 8, "I", 10)  # H18: no map is shipped
    f = hwx.read(data)
    assert f.generation is None
    (descriptor,) = f.task_descriptors
    assert (
        descriptor.fields == {}
        and "no register table is known for cpusubtype 10" in descriptor.note
    )
    text = f.section("__TEXT", "__text")
    raw = data[text.offset : text.offset + text.size]
    assert list(descriptor.streams[0].words) == [
        int.from_bytes(raw[i : i + 4], "little") for i in range(0, len(raw), 4)
    ]
    assert any("no register table" in note for note in f.notes)


def test_backward_next_pointer_is_rejected():
    data = patched(fixture_bytes("h13_concat"), 0x4000 + 0x300 + 0x1C, "I", 0x100)
    with pytest.raises(FormatError) as info:
        hwx.read(data)
    assert info.value.offset == 0x4000 + 0x300 + 0x1C


def test_next_pointer_past_the_section_is_rejected():
    with pytest.raises(FormatError, match="next-descriptor offset"):
        hwx.read(patched(fixture_bytes("h13_relu"), 0x4000 + 0x1C, "I", 0x10000))


def test_stream_longer_than_its_descriptor_is_rejected():
    # Claim 64 words for the last stream (TileDMADst): it would run past the section end.
    data = patched(fixture_bytes("h13_relu"), 0x4000 + 0x254, "I", (63 << 26) | 0x17800)
    with pytest.raises(FormatError) as info:
        hwx.read(data)
    assert info.value.offset == 0x4000 + 0x254


def test_stream_at_an_unknown_address_is_kept_with_a_note():
    data = patched(
        fixture_bytes("h13_relu"), 0x4000 + 0x228, "I", (3 << 26) | 0x3F000
    )  # Planar -> unknown
    f = hwx.read(data)
    (descriptor,) = f.task_descriptors
    assert descriptor.streams[4].name is None and "0x3f000" in descriptor.note
    assert descriptor.fields["Common.InDim.Win"] == 77


def test_next_pointer_into_its_own_header_is_rejected():
    # A chain of overlapping descriptors could otherwise make tens of thousands of them.
    with pytest.raises(FormatError, match="past this descriptor's header"):
        hwx.read(patched(fixture_bytes("h13_relu"), 0x4000 + 0x1C, "I", 0x4))


def test_concat_second_descriptor_writes_after_the_first_ones_channels(decoded):
    f = decoded["h13_concat"]
    first, second = f.task_descriptors
    (output,) = f.outputs
    channel_stride = output.strides[1]
    # The first pass writes input_0's channels from the start of the output window; the
    # second pass's destination base skips exactly those channels.
    assert first.fields["TileDMADst.BaseAddr.Addr"] == 0
    assert (
        second.fields["TileDMADst.BaseAddr.Addr"] * 64
        == first.fields["Common.Cout.Cout"] * channel_stride
    )
    # Header word 1 announces the size of the next descriptor, in words, minus one.
    assert first.fields["Header.Word1.NextSize"] == second.size // 4 - 1
    assert second.fields["Header.Word1.NextSize"] == 0


def test_zin9_writes_a_compact_descriptor_with_kernel_dma_in_two_streams(decoded):
    (descriptor,) = decoded["h13_mul_zin9"].task_descriptors
    assert descriptor.size == 0x1F8 and descriptor.note is None
    kernel = [(s.address, len(s.words)) for s in descriptor.streams if s.name == "KernelDMASrc"]
    assert kernel == [(0x1F800, 18), (0x1F8C8, 12)]  # the base/size words 0x1f848-0x1f8c4 omitted
    assert [s.name for s in descriptor.streams][2:] == H13_STREAM_ORDER[1:]
    assert descriptor.inferred["KernelDMASrc.Hint[0].Const"] == 0x80
