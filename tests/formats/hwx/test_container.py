"""Header, load commands, segments, I/O buffers and thread states of real .hwx files."""

from __future__ import annotations

import time

import pytest

from anekit.errors import FormatError
from anekit.formats import hwx

from .helpers import HWX_DIR, HWX_FILES, HWX_IDS, fixture_bytes, patched


def test_there_are_fixtures_to_test():
    assert len(HWX_FILES) >= 9


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_header_matches_the_documented_h13_values(path):
    # FACTS section 4 / ane-container table 23.9: magic, cputype 0x80, cpusubtype 4 (H13), filetype 2, flags.
    header = hwx.read(path).header
    assert header.magic == 0xBEEFFACE
    assert header.cputype == 0x80
    assert header.cpusubtype == 4
    assert header.filetype == 2
    assert header.flags == 0x200000


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_every_load_command_is_walked(path, decoded):
    f = decoded[path.stem]
    assert len(f.commands) == f.header.ncmds
    assert sum(c.size for c in f.commands) == f.header.sizeofcmds
    offsets = [c.offset for c in f.commands]
    assert offsets[0] == 32 and offsets == sorted(offsets)
    assert f.notes == ()


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_io_windows_are_page_aligned_fvmlib_segments_without_file_bytes(path, decoded):
    f = decoded[path.stem]
    windows = [s for s in f.segments if s.name == "__FVMLIB"]
    assert len(windows) == len(f.io_buffers) == len(f.tensors)
    for window in windows:
        assert window.filesize == 0 and window.fileoff == 0
        assert window.vmaddr % 0x4000 == 0
        assert window.vmaddr >= 0x30000000
        assert all(not section.has_file_data for section in window.sections)
    # Each I/O buffer command names the window at its address (an independent record of it).
    assert sorted(b.address for b in f.io_buffers) == sorted(w.vmaddr for w in windows)
    assert {b.name for b in f.io_buffers} == {t.name for t in f.tensors}


def test_text_segment_holds_descriptors_then_weights(decoded):
    f = decoded["h13_gemm"]
    text, const = f.section("__TEXT", "__text"), f.section("__TEXT", "__const")
    assert text.addr == 0x30000000 and text.has_file_data
    assert const.addr >= text.addr + text.size and const.addr % 0x40 == 0
    assert f.size >= const.offset + const.size


def test_new_compilers_name_io_windows_with_mapped_region_commands(decoded):
    old, new = decoded["h13_mul_zin5"], decoded["h13_mul_zin7"]
    assert {b.command for b in old.io_buffers} == {0x6}
    assert {b.command for b in new.io_buffers} == {0x40}
    assert [(b.name, b.address) for b in old.io_buffers] == [
        (b.name, b.address) for b in new.io_buffers
    ]
    assert [c.kind for c in new.commands].count("mapped_region") == 3


def test_unknown_commands_are_kept_raw(decoded):
    unknown = [c for c in decoded["h13_mul_zin5"].commands if c.kind == "unknown"]
    assert [c.cmd for c in unknown] == [0x31]
    assert unknown[0].data.startswith(b"src model info\0")
    assert len(unknown[0].data) == unknown[0].size - 8


@pytest.mark.parametrize("path", HWX_FILES, ids=HWX_IDS)
def test_thread_states_carry_the_tensor_names(path, decoded):
    f = decoded[path.stem]
    assert f.threads and f.threads[0].flavor == 1
    names = {s for t in f.threads for s in t.strings}
    assert {t.name for t in f.tensors} <= names
    # Flavor-1 state holds the engine address table, starting at the __TEXT base.
    assert f.threads[0].words[0] == f.section("__TEXT", "__text").addr


def test_read_accepts_bytes_and_paths_alike():
    data = fixture_bytes("h13_conv")
    assert hwx.read(data) == hwx.read(HWX_DIR / "h13_conv.hwx") == hwx.read(bytearray(data))


# ---- malformed input: always a FormatError naming the offset -------------------------------


def test_wrong_magic_names_offset_zero():
    data = patched(fixture_bytes("h13_relu"), 0, "I", 0xFEEDFACF)
    with pytest.raises(FormatError) as info:
        hwx.read(data)
    assert info.value.offset == 0 and "0xbeefface" in str(info.value)


@pytest.mark.parametrize("size", [0, 3, 4, 31])
def test_truncated_header(size):
    with pytest.raises(FormatError):
        hwx.read(fixture_bytes("h13_relu")[:size])


def test_huge_ncmds_fails_fast_instead_of_looping():
    start = time.perf_counter()
    with pytest.raises(FormatError) as info:
        hwx.read(patched(fixture_bytes("h13_relu"), 0x10, "I", 0xFFFFFFFF))
    assert info.value.offset == 0x10
    assert time.perf_counter() - start < 1.0


def test_sizeofcmds_past_the_end():
    with pytest.raises(FormatError) as info:
        hwx.read(patched(fixture_bytes("h13_relu"), 0x14, "I", 0x7FFFFFFF))
    assert info.value.offset == 0x14


def test_zero_cmdsize_is_rejected(decoded):
    data = fixture_bytes("h13_relu")
    second = decoded["h13_relu"].commands[1].offset
    with pytest.raises(FormatError) as info:
        hwx.read(patched(data, second + 4, "I", 0))
    assert info.value.offset == second + 4


def test_huge_section_count_is_rejected(decoded):
    text = next(s for s in decoded["h13_relu"].segments if s.name == "__TEXT")
    with pytest.raises(FormatError) as info:
        hwx.read(patched(fixture_bytes("h13_relu"), text.command_offset + 64, "I", 0xFFFFFFFF))
    assert "section headers" in str(info.value)


def test_section_past_the_end_of_the_file(decoded):
    text = next(s for s in decoded["h13_relu"].segments if s.name == "__TEXT")
    const_header = text.command_offset + 72 + 80  # second section header
    with pytest.raises(FormatError) as info:
        hwx.read(patched(fixture_bytes("h13_relu"), const_header + 40, "Q", 1 << 40))
    assert "__TEXT,__const" in str(info.value)


def test_symbol_count_of_two_to_the_32_fails_fast(decoded):
    symtab = next(c for c in decoded["h13_gemm"].commands if c.kind == "symtab")
    start = time.perf_counter()
    with pytest.raises(FormatError) as info:
        hwx.read(patched(fixture_bytes("h13_gemm"), symtab.offset + 12, "I", 0xFFFFFFFF))
    assert info.value.offset == symtab.offset + 8
    assert time.perf_counter() - start < 1.0


def test_io_buffer_name_offset_outside_the_command(decoded):
    buffer = decoded["h13_relu"].io_buffers[0]
    with pytest.raises(FormatError):
        hwx.read(patched(fixture_bytes("h13_relu"), buffer.command_offset + 8, "I", 0x1000))


def test_thread_word_count_larger_than_the_command(decoded):
    thread = decoded["h13_relu"].threads[0]
    with pytest.raises(FormatError) as info:
        hwx.read(patched(fixture_bytes("h13_relu"), thread.command_offset + 12, "I", 0x40000000))
    assert info.value.offset == thread.command_offset + 12


def test_non_utf8_segment_name():
    data = bytearray(fixture_bytes("h13_relu"))
    data[0x28] = 0xFF  # first byte of "__PAGEZERO"
    with pytest.raises(FormatError) as info:
        hwx.read(bytes(data))
    assert info.value.offset == 0x28


def test_missing_file_and_directory_are_format_errors(tmp_path):
    with pytest.raises(FormatError, match="cannot read"):
        hwx.read(tmp_path / "absent.hwx")
    with pytest.raises(FormatError, match="cannot read"):
        hwx.read(tmp_path)


def test_segments_are_read_whatever_their_name(decoded):
    # Newer compilers add a __DEBUG segment: nothing in the reader depends on segment names
    # except __FVMLIB windows and the __TEXT,__text descriptors.
    data = fixture_bytes("h13_relu").replace(
        b"__PAGEZERO\0\0\0\0\0\0", b"__DEBUG".ljust(16, b"\0"), 1
    )
    f = hwx.read(data)
    assert [s.name for s in f.segments][0] == "__DEBUG"
    assert f.tensors == decoded["h13_relu"].tensors
    assert f.task_descriptors == decoded["h13_relu"].task_descriptors
