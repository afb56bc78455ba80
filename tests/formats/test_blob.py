"""weight.bin reader/writer, checked both ways against coremltools' MILBlob storage code."""

from __future__ import annotations

import struct
from pathlib import Path
from types import ModuleType

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from anekit.errors import FormatError
from anekit.formats.blob import DTYPES_BY_CODE, BlobReader, BlobWriter


def _load_milstorage() -> ModuleType:
    """coremltools' pybind blob module (the 'coreml' extra).

    Imported under its package name only: pybind refuses to register the same types
    twice, so loading the extension under a second name breaks every later user.
    """
    return pytest.importorskip("coremltools.libmilstoragepython")


@pytest.fixture(scope="module")
def cml() -> ModuleType:
    return _load_milstorage()


RNG = np.random.default_rng(1234)

# dtype name -> (an array of that dtype, coremltools writer/reader suffix, array as coremltools
# wants it). fp16 goes through coremltools as raw uint16 bits.
INT_RANGES = {
    "int4": (-8, 7, np.int8),
    "uint1": (0, 1, np.uint8),
    "uint2": (0, 3, np.uint8),
    "uint3": (0, 7, np.uint8),
    "uint4": (0, 15, np.uint8),
    "uint6": (0, 63, np.uint8),
    "uint8": (0, 255, np.uint8),
    "int8": (-128, 127, np.int8),
    "int16": (-(2**15), 2**15 - 1, np.int16),
    "uint16": (0, 2**16 - 1, np.uint16),
    "int32": (-(2**31), 2**31 - 1, np.int32),
    "uint32": (0, 2**32 - 1, np.uint32),
}
CML_SUFFIX = {name: name for name in INT_RANGES} | {"fp16": "fp16", "fp32": "float"}


def sample(name: str, n: int, rng: np.random.Generator = RNG) -> np.ndarray:
    if name == "fp16":
        return rng.standard_normal(n).astype(np.float16)
    if name == "fp32":
        return rng.standard_normal(n).astype(np.float32)
    low, high, kind = INT_RANGES[name]
    return rng.integers(low, high, size=n, endpoint=True, dtype=np.int64).astype(kind)


def as_cml(name: str, array: np.ndarray) -> np.ndarray:
    return array.view(np.uint16) if name == "fp16" else array


def cml_write(cml: ModuleType, path: Path, items: list[tuple[str, np.ndarray]]) -> list[int]:
    writer = cml._BlobStorageWriter(str(path))
    offsets = [getattr(writer, f"write_{CML_SUFFIX[n]}_data")(as_cml(n, a)) for n, a in items]
    del writer  # flushes and closes the file
    return offsets


def our_dtype_arg(name: str) -> str | None:
    return name if name in ("int4", "uint1", "uint2", "uint3", "uint4", "uint6") else None


ALL_CML = ["fp16", "fp32", *INT_RANGES]


@pytest.mark.parametrize("name", ALL_CML)
# n = 0 is left out: coremltools' reader raises "index out of bounds" on empty blobs, even on
# the ones its own writer wrote (checked by test_coremltools_cannot_read_empty_blobs).
@pytest.mark.parametrize("n", [1, 5, 63, 64, 130])
def test_coremltools_reads_what_we_write(cml: ModuleType, tmp_path: Path, name: str, n: int):
    array = sample(name, n)
    writer = BlobWriter()
    first = writer.add(np.arange(3, dtype=np.float16))  # a neighbour before it
    offset = writer.add(array, our_dtype_arg(name))
    last = writer.add(np.arange(7, dtype=np.int8))  # and one after it
    path = tmp_path / "weight.bin"
    writer.write(path)
    reader = cml._BlobStorageReader(str(path))
    got = getattr(reader, f"read_{CML_SUFFIX[name]}_data")(offset)
    np.testing.assert_array_equal(got, as_cml(name, array))
    assert got.dtype == as_cml(name, array).dtype or name in ("int4",) or got.dtype == np.uint8
    np.testing.assert_array_equal(
        reader.read_fp16_data(first), np.arange(3, dtype=np.float16).view(np.uint16)
    )
    np.testing.assert_array_equal(reader.read_int8_data(last), np.arange(7, dtype=np.int8))


def test_coremltools_cannot_read_empty_blobs(cml: ModuleType, tmp_path: Path):
    path = tmp_path / "weight.bin"
    (offset,) = cml_write(cml, path, [("fp16", np.zeros(0, np.float16))])
    with pytest.raises(ValueError, match="index out of bounds"):
        cml._BlobStorageReader(str(path)).read_fp16_data(offset)
    w = BlobWriter()
    w.add(np.zeros(0, np.float16))
    assert w.to_bytes() == path.read_bytes()
    assert BlobReader(path.read_bytes()).read(offset).shape == (0,)


@pytest.mark.parametrize("name", ALL_CML)
def test_we_read_what_coremltools_writes(cml: ModuleType, tmp_path: Path, name: str):
    items = [(name, sample(name, n)) for n in (0, 1, 7, 64, 129)]
    path = tmp_path / "weight.bin"
    offsets = cml_write(cml, path, items)
    with BlobReader(path) as reader:
        assert [r.offset for r in reader.records()] == offsets
        for offset, (_, array) in zip(offsets, items, strict=True):
            got = reader.read(offset)
            assert got.dtype == array.dtype
            np.testing.assert_array_equal(got, array)
            assert reader.record(offset).dtype.name == name


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(ALL_CML), st.integers(0, 100), st.integers(0, 2**32 - 1)),
        max_size=8,
    )
)
def test_byte_identical_to_coremltools_writer(cml: ModuleType, tmp_path_factory, spec):
    rng_items = [(n, sample(n, size, np.random.default_rng(seed))) for n, size, seed in spec]
    path = tmp_path_factory.mktemp("cml") / "weight.bin"
    offsets = cml_write(cml, path, rng_items)
    writer = BlobWriter()
    ours = [writer.add(a, our_dtype_arg(n)) for n, a in rng_items]
    assert ours == offsets
    assert writer.to_bytes() == path.read_bytes()


def test_identical_input_gives_identical_bytes(tmp_path: Path):
    def build() -> BlobWriter:
        w = BlobWriter()
        w.add(np.linspace(-1, 1, 100, dtype=np.float32), "fp16")
        w.add(np.arange(-8, 8, dtype=np.int8), "int4")
        w.add(np.ones(3, dtype=ml_dtypes.bfloat16))
        return w

    build().write(tmp_path / "a.bin")
    build().write(tmp_path / "b.bin")
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()


def test_write_replaces_atomically_and_leaves_no_temporary(tmp_path: Path):
    path = tmp_path / "weight.bin"
    path.write_bytes(b"old contents")
    w = BlobWriter()
    w.add(np.arange(4, dtype=np.float16))
    w.write(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weight.bin"]
    with BlobReader(path) as r:
        np.testing.assert_array_equal(r.read(64), np.arange(4, dtype=np.float16))


def test_header_and_record_layout_match_the_spec():
    w = BlobWriter()
    assert w.add(np.array([1.0, 2.0, 3.0], dtype=np.float16)) == 64
    assert w.add(np.array([5], dtype=np.uint8), "uint3") == 192
    data = w.to_bytes()
    assert struct.unpack_from("<II", data, 0) == (2, 2)
    assert data[8:64] == bytes(56)
    assert struct.unpack_from("<IIQQQ", data, 64) == (0xDEADBEEF, 1, 6, 128, 0)
    assert data[96:128] == bytes(32)
    assert data[128:134] == np.array([1, 2, 3], "<f2").tobytes()
    assert data[134:192] == bytes(58)  # zero padding up to the next record
    assert struct.unpack_from("<IIQQQ", data, 192) == (0xDEADBEEF, 12, 1, 256, 5)
    assert data[256:] == bytes([5])  # no trailing padding after the last blob
    assert len(data) == 257


@pytest.mark.parametrize(
    ("name", "numpy_type"),
    [
        ("bf16", ml_dtypes.bfloat16),
        ("fp8_e4m3fn", ml_dtypes.float8_e4m3fn),
        ("fp8_e5m2", ml_dtypes.float8_e5m2),
    ],
)
def test_ml_dtypes_types_round_trip(cml: ModuleType, tmp_path: Path, name: str, numpy_type):
    values = np.array([0.0, 1.0, -2.0, 0.5, 3.0, -0.25], dtype=np.float32)
    w = BlobWriter()
    before = w.add(np.arange(5, dtype=np.int16))
    offset = w.add(values, name)
    after = w.add(np.arange(9, dtype=np.float32))
    path = tmp_path / "weight.bin"
    w.write(path)
    with BlobReader(path) as r:
        got = r.read(offset)
        assert got.dtype == np.dtype(numpy_type)
        np.testing.assert_array_equal(got.astype(np.float32), values)
        assert r.record(offset).dtype.code == {"bf16": 5, "fp8_e4m3fn": 16, "fp8_e5m2": 17}[name]
    # The stored bits, derived independently of ml_dtypes: bf16 is the top half of fp32; the
    # fp8 encodings of 1.0 are 0x38 (e4m3fn: bias 7) and 0x3c (e5m2: bias 15).
    raw = path.read_bytes()
    data_at = offset + 64
    if name == "bf16":
        expect = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
        assert raw[data_at : data_at + 12] == expect
    else:
        assert raw[data_at + 1] == {"fp8_e4m3fn": 0x38, "fp8_e5m2": 0x3C}[name]
    # coremltools walks past the record to its neighbours.
    reader = cml._BlobStorageReader(str(path))
    np.testing.assert_array_equal(reader.read_int16_data(before), np.arange(5, dtype=np.int16))
    np.testing.assert_array_equal(reader.read_float_data(after), np.arange(9, dtype=np.float32))


def test_ml_dtypes_arrays_are_inferred():
    w = BlobWriter()
    w.add(np.array([1, -3], dtype=ml_dtypes.int4))
    w.add(np.array([1.5], dtype=ml_dtypes.bfloat16))
    r = BlobReader(w.to_bytes())
    assert [x.dtype.name for x in r.records()] == ["int4", "bf16"]
    np.testing.assert_array_equal(r.read(64), np.array([1, -3], np.int8))


def test_all_seventeen_codes_are_known():
    assert sorted(DTYPES_BY_CODE) == list(range(1, 18))


def test_read_with_shape():
    w = BlobWriter()
    offset = w.add(np.arange(12, dtype=np.uint8) % 8, "uint3")
    r = BlobReader(w.to_bytes())
    assert r.read(offset, (3, 4)).shape == (3, 4)
    np.testing.assert_array_equal(r.read(offset, (3, 4)).ravel(), np.arange(12) % 8)
    for bad in [(5,), (3, "?"), (-3, -4), (12.0,)]:
        with pytest.raises(FormatError, match="cannot take the shape"):
            r.read(offset, bad)


@pytest.mark.parametrize(
    ("array", "dtype", "match"),
    [
        (np.array([8]), "int4", "range"),
        (np.array([-1]), "uint2", "range"),
        (np.array([300]), "uint8", "range"),
        (np.array([0.5]), "int8", "integer values"),
        (np.array([1.0]), "fp64", "unknown weight.bin dtype"),
        (np.array([1.0], dtype=np.float64), None, "cannot store float64"),
        (np.array([True]), None, "cannot store bool"),
        (np.array(["a"]), "fp16", "numeric values"),
    ],
)
def test_writer_rejects_what_it_cannot_store(array, dtype, match):
    with pytest.raises(FormatError, match=match):
        BlobWriter().add(array, dtype)


# --- hostile files -------------------------------------------------------------------------


def valid_file() -> bytearray:
    w = BlobWriter()
    w.add(np.arange(10, dtype=np.float16))
    w.add(np.arange(3, dtype=np.uint8), "uint4")
    return bytearray(w.to_bytes())


def patched(fmt: str, at: int, value: int) -> bytes:
    data = valid_file()
    struct.pack_into(fmt, data, at, value)
    return bytes(data)


HOSTILE = {
    "empty": (b"", "truncated header", 0),
    "truncated header": (bytes(valid_file()[:40]), "truncated header", 0),
    "version 1": (patched("<I", 4, 1), "version 1", 4),
    "count larger than the file": (patched("<I", 0, 1000), "announces 1000 blobs", 0),
    "count one too many": (patched("<I", 0, 3), "runs past the end", None),
    "bad sentinel": (patched("<I", 64, 0xCAFEBABE), "sentinel", 64),
    "unknown dtype": (patched("<I", 68, 18), "unknown blob dtype code 18", 68),
    "dtype zero": (patched("<I", 68, 0), "unknown blob dtype code 0", 68),
    "offset past the end": (patched("<Q", 80, 1 << 20), "past the end", 72),
    "size past the end": (patched("<Q", 72, 4096), "past the end", 72),
    "size overflows": (patched("<Q", 72, 2**64 - 1), "overflows", 72),
    "offset near 2**64": (patched("<Q", 80, 2**64 - 64), "past the end", 72),
    "unaligned data": (patched("<Q", 80, 136), "64-byte aligned", 80),
    "data inside its record": (patched("<Q", 80, 64), "follow its record", 80),
    "odd fp16 size": (patched("<Q", 72, 19), "multiple of 2", 72),
    "padding on fp16": (patched("<Q", 88, 4), "only sub-byte", 88),
    "sub-byte padding too large": (patched("<Q", 192 + 24, 9), "whole number", 216),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_files_raise_format_error(case: str, tmp_path: Path):
    data, match, offset = HOSTILE[case]
    with pytest.raises(FormatError, match=match) as info:
        BlobReader(data)
    if offset is not None:
        assert info.value.offset == offset
    path = tmp_path / "weight.bin"
    path.write_bytes(data)
    with pytest.raises(FormatError, match=match):
        BlobReader(path)


@pytest.mark.parametrize("offset", [0, 32, 100, 128, 2**64, -64, 1 << 40])
def test_reading_a_non_record_offset_is_a_format_error(offset: int):
    r = BlobReader(bytes(valid_file()))
    with pytest.raises(FormatError):
        r.read(offset)


def test_missing_file_is_a_format_error(tmp_path: Path):
    with pytest.raises(FormatError, match="cannot read"):
        BlobReader(tmp_path / "absent.bin")


def test_records_beyond_the_count_are_still_readable_by_offset():
    # coremltools reads any record by its offset; so do we, with the same checks.
    data = patched("<I", 0, 1)
    r = BlobReader(data)
    assert len(r) == 1
    np.testing.assert_array_equal(r.read(192), np.arange(3, dtype=np.uint8))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_corruption_only_raises_format_error(data):
    blob = valid_file()
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(blob) - 1))
        blob[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    try:
        r = BlobReader(bytes(blob[:cut]))
        for record in r.records():
            r.read(record.offset)
        r.read(data.draw(st.integers(0, 2**64)))
    except FormatError:
        pass


def test_read_checks_the_expected_dtype():
    w = BlobWriter()
    offset = w.add(np.arange(4, dtype=np.float32))
    r = BlobReader(w.to_bytes())
    assert r.read(offset, (2, 2), dtype="fp32").shape == (2, 2)
    with pytest.raises(
        FormatError, match="expected a fp16 blob at offset 64, the record holds fp32"
    ):
        r.read(offset, dtype="fp16")
