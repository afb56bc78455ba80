"""weight.bin (MIL blob storage version 2): a bounds-checked reader and a deterministic writer.

Layout (coremltools ``mlmodel/src/MILBlob/Blob/StorageFormat.hpp``), all little-endian:

- a 64-byte file header: uint32 ``count``, uint32 ``version`` (= 2), 56 reserved bytes;
- per blob, a 64-byte record at a 64-byte boundary: uint32 sentinel ``0xDEADBEEF``,
  uint32 dtype code, uint64 ``size`` in bytes, uint64 absolute ``offset`` of the data,
  uint64 ``padding_size_in_bits`` (sub-byte types), 32 reserved bytes;
- the data right after its record; the next record starts at the next 64-byte boundary.
  The file ends right after the last blob's data (no trailing padding), as coremltools
  writes it.

``BLOBFILE(..., offset = uint64(N))`` in MIL names the offset N of the record, not of the data.

Element types returned by :meth:`BlobReader.read`: fp16/fp32/int*/uint* as the numpy type of
the same name; bf16 and the two fp8 types as ``ml_dtypes`` types (``bfloat16``,
``float8_e4m3fn``, ``float8_e5m2``); the sub-byte types are unpacked, int4 to ``int8`` and
uint1/uint2/uint3/uint4/uint6 to ``uint8``. Sub-byte values are packed least significant bit
first into a little-endian bit stream (element i occupies bits ``i*w .. i*w+w-1``), the last
byte padded with ``padding_size_in_bits`` zero bits; the element count is
``(size * 8 - padding) / w``.
"""

from __future__ import annotations

import bisect
import itertools
import math
import mmap
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from anekit import atomic, budget
from anekit.errors import AnekitError, FormatError

ALIGNMENT = 64
HEADER_SIZE = 64
RECORD_SIZE = 64
SENTINEL = 0xDEADBEEF
VERSION = 2
_UINT64_MAX = 2**64 - 1

_HEADER = struct.Struct("<II")  # count, version (56 reserved bytes follow)
_RECORD = struct.Struct("<IIQQQ")  # sentinel, dtype, size, offset, padding bits (32 reserved)


@dataclass(frozen=True)
class BlobDType:
    """One weight.bin element type: its code, MIL-style name and storage."""

    code: int
    name: str
    numpy: str  # numpy dtype string of the unpacked elements, or an ml_dtypes type name
    bits: int  # bits per stored element
    signed: bool = False  # sub-byte types only: two's complement

    @property
    def sub_byte(self) -> bool:
        return self.bits < 8

    @property
    def from_ml_dtypes(self) -> bool:
        return not self.numpy.startswith(("<", "|"))


_DTYPES = (
    BlobDType(1, "fp16", "<f2", 16),
    BlobDType(2, "fp32", "<f4", 32),
    BlobDType(3, "uint8", "|u1", 8),
    BlobDType(4, "int8", "|i1", 8),
    BlobDType(5, "bf16", "bfloat16", 16),
    BlobDType(6, "int16", "<i2", 16),
    BlobDType(7, "uint16", "<u2", 16),
    BlobDType(8, "int4", "|i1", 4, signed=True),
    BlobDType(9, "uint1", "|u1", 1),
    BlobDType(10, "uint2", "|u1", 2),
    BlobDType(11, "uint4", "|u1", 4),
    BlobDType(12, "uint3", "|u1", 3),
    BlobDType(13, "uint6", "|u1", 6),
    BlobDType(14, "int32", "<i4", 32),
    BlobDType(15, "uint32", "<u4", 32),
    BlobDType(16, "fp8_e4m3fn", "float8_e4m3fn", 8),
    BlobDType(17, "fp8_e5m2", "float8_e5m2", 8),
)
DTYPES_BY_CODE: dict[int, BlobDType] = {d.code: d for d in _DTYPES}
DTYPES_BY_NAME: dict[str, BlobDType] = {d.name: d for d in _DTYPES}


def _ml_dtypes() -> Any:
    """Import ml_dtypes (an onnx dependency) for bf16 and fp8, with a clear error if absent."""
    try:
        import ml_dtypes
    except ImportError as exc:  # pragma: no cover - ml_dtypes ships with onnx
        raise AnekitError(
            "bf16 and fp8 weights need the Python package 'ml_dtypes', which is not installed",
            hint="pip install ml_dtypes (it normally comes with onnx)",
        ) from exc
    return ml_dtypes


def numpy_dtype(dtype: BlobDType) -> np.dtype:
    """The numpy dtype (native byte order) of ``dtype``'s unpacked elements."""
    if dtype.from_ml_dtypes:
        return np.dtype(getattr(_ml_dtypes(), dtype.numpy))
    return np.dtype(dtype.numpy).newbyteorder("=")


def header_bytes(count: int) -> bytes:
    """The file header for ``count`` blobs."""
    return _HEADER.pack(count, VERSION).ljust(HEADER_SIZE, b"\0")


def record_bytes(dtype: str, size: int, data_offset: int, padding_bits: int = 0) -> bytes:
    """One blob's 64-byte record: ``size`` bytes of ``dtype`` data at ``data_offset``."""
    code = DTYPES_BY_NAME[dtype].code
    return _RECORD.pack(SENTINEL, code, size, data_offset, padding_bits).ljust(RECORD_SIZE, b"\0")


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


# --- sub-byte packing ---------------------------------------------------------------------


def pack_sub_byte(values: np.ndarray, bits: int) -> tuple[bytes, int]:
    """Pack integer ``values`` (already range-checked) LSB-first; returns (bytes, padding bits)."""
    flat = np.ascontiguousarray(values, dtype=np.int64).reshape(-1) & ((1 << bits) - 1)
    shifts = np.arange(bits, dtype=np.int64)
    stream = ((flat[:, None] >> shifts) & 1).astype(np.uint8).reshape(-1)
    packed = np.packbits(stream, bitorder="little")
    return packed.tobytes(), packed.size * 8 - stream.size


def unpack_sub_byte(data: bytes | memoryview, count: int, bits: int, signed: bool) -> np.ndarray:
    """Unpack ``count`` elements of ``bits`` bits each from an LSB-first bit stream."""
    stream = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    groups = stream[: count * bits].reshape(count, bits).astype(np.int16)
    values = groups @ (np.int16(1) << np.arange(bits, dtype=np.int16))
    if signed:
        values = np.where(values >= 1 << (bits - 1), values - (1 << bits), values)
        return values.astype(np.int8)
    return values.astype(np.uint8)


# --- reader ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlobRecord:
    """One blob's metadata record, validated against the file."""

    offset: int  # file offset of the 64-byte record: what BLOBFILE's offset names
    dtype: BlobDType
    data_offset: int
    size: int  # bytes of (packed) data
    padding_bits: int
    count: int  # number of elements

    @property
    def end(self) -> int:
        return self.data_offset + self.size


class ChunkedBytes:
    """A weight.bin held as the chunks it was built from (header, records, each array's
    bytes), never joined: a compiled model's weights stay where the compiler found them (a
    language model's one fp16 copy). Reads within one chunk are views; ``bytes()`` joins."""

    def __init__(self, chunks: Sequence[bytes | memoryview]):
        self._chunks = tuple(memoryview(c).cast("B") for c in chunks)
        self._starts = list(itertools.accumulate((len(c) for c in self._chunks), initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    def __bytes__(self) -> bytes:
        return b"".join(self._chunks)

    def __getitem__(self, where: slice) -> memoryview | bytes:
        start, stop, _ = where.indices(len(self))
        stop = max(start, stop)
        i = bisect.bisect_right(self._starts, start) - 1
        if i < len(self._chunks) and stop <= self._starts[i + 1]:
            return self._chunks[i][start - self._starts[i] : stop - self._starts[i]]
        parts, at = [], start
        while at < stop:
            j = bisect.bisect_right(self._starts, at) - 1
            end = min(stop, self._starts[j + 1])
            parts.append(self._chunks[j][at - self._starts[j] : end - self._starts[j]])
            at = end
        return b"".join(parts)

    def release(self) -> None:
        """Nothing to release: the chunks belong to their arrays."""


class BlobReader:
    """Reads a weight.bin from a path or from bytes; every offset and size is checked.

    Use as a context manager (or call :meth:`close`) when opened from a path: the file is
    memory-mapped. Arrays returned by :meth:`read` are independent copies.
    """

    def __init__(self, source: str | os.PathLike[str] | bytes | bytearray | memoryview | ChunkedBytes):
        self._mmap: mmap.mmap | None = None
        self._records: dict[int, BlobRecord] = {}
        self._buf: memoryview | ChunkedBytes
        if isinstance(source, ChunkedBytes):
            self.where = "weight.bin"
            self._buf = source
        elif isinstance(source, (bytes, bytearray, memoryview)):
            self.where = "weight.bin"
            self._buf = memoryview(source).cast("B")
        else:
            self.where = os.fspath(source)
            self._buf = self._map(Path(source))
        try:
            self._records = self._read_chain()
        except BaseException:
            self.close()
            raise

    def _map(self, path: Path) -> memoryview:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    return memoryview(b"")
                self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise FormatError(f"cannot read weight file: {exc.strerror}", where=self.where) from exc
        return memoryview(self._mmap)

    def close(self) -> None:
        """Release the memory map (no-op for readers over bytes)."""
        self._buf.release()
        self._buf = memoryview(b"")
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def size(self) -> int:
        """Size of the file in bytes."""
        return len(self._buf)

    def _error(self, message: str, offset: int, hint: str | None = None) -> FormatError:
        return FormatError(message, where=self.where, offset=offset, hint=hint)

    def _read_chain(self) -> dict[int, BlobRecord]:
        if self.size < HEADER_SIZE:
            raise self._error(
                f"truncated header: the file has {self.size} bytes, a weight.bin header needs 64",
                0,
            )
        count, version = _HEADER.unpack(self._buf[0 : _HEADER.size])
        if version != VERSION:
            raise self._error(f"unsupported blob storage version {version} (expected {VERSION})", 4)
        # Each record takes at least 64 bytes, so the count alone can be checked up front.
        if HEADER_SIZE + count * RECORD_SIZE > self.size:
            raise self._error(
                f"header announces {count} blobs but a {self.size}-byte file holds at most "
                f"{(self.size - HEADER_SIZE) // RECORD_SIZE}",
                0,
            )
        records: dict[int, BlobRecord] = {}
        offset = HEADER_SIZE
        for _ in range(count):
            record = self.record(offset)
            records[offset] = record
            offset = _align(record.end)
        return records

    def record(self, offset: int) -> BlobRecord:
        """The validated record at file ``offset`` (a BLOBFILE offset)."""
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise self._error(f"blob offset must be an integer, not {offset!r}", 0)
        cached = self._records.get(offset)
        if cached is not None:
            return cached
        if offset < HEADER_SIZE or offset % ALIGNMENT:
            raise self._error(
                f"blob offset {offset} is not a record position "
                "(records start at 64 or later, on 64-byte boundaries)",
                offset,
            )
        if offset + RECORD_SIZE > self.size:
            raise self._error(
                f"blob record at {offset} runs past the end of the {self.size}-byte file", offset
            )
        sentinel, code, size, data_offset, padding = _RECORD.unpack(self._buf[offset : offset + _RECORD.size])
        if sentinel != SENTINEL:
            raise self._error(f"bad blob sentinel 0x{sentinel:08x} (expected 0xdeadbeef)", offset)
        dtype = DTYPES_BY_CODE.get(code)
        if dtype is None:
            raise self._error(f"unknown blob dtype code {code} (known: 1 to 17)", offset + 4)
        if data_offset % ALIGNMENT or data_offset < offset + RECORD_SIZE:
            raise self._error(
                f"blob data offset {data_offset} must be 64-byte aligned and follow its record",
                offset + 16,
            )
        if data_offset + size > _UINT64_MAX:
            raise self._error(f"blob data offset {data_offset} + size {size} overflows", offset + 8)
        if data_offset + size > self.size:
            raise self._error(
                f"blob data [{data_offset}, {data_offset + size}) runs past the end of the "
                f"{self.size}-byte file",
                offset + 8,
            )
        count = self._element_count(dtype, size, padding, offset)
        return BlobRecord(offset, dtype, data_offset, size, padding, count)

    def _element_count(self, dtype: BlobDType, size: int, padding: int, offset: int) -> int:
        if not dtype.sub_byte:
            if padding:
                raise self._error(
                    f"{dtype.name} blob has padding_size_in_bits {padding} (only sub-byte types pad)",
                    offset + 24,
                )
            if size % (dtype.bits // 8):
                raise self._error(
                    f"{dtype.name} blob size {size} is not a multiple of {dtype.bits // 8}",
                    offset + 8,
                )
            return size // (dtype.bits // 8)
        if padding >= 8 or padding > size * 8 or (size * 8 - padding) % dtype.bits:
            raise self._error(
                f"{dtype.name} blob: {size} bytes with {padding} padding bits is not a whole "
                f"number of {dtype.bits}-bit elements",
                offset + 24,
            )
        return (size * 8 - padding) // dtype.bits

    def records(self) -> tuple[BlobRecord, ...]:
        """Every record announced by the header, in file order."""
        return tuple(self._records.values())

    def __len__(self) -> int:
        return len(self._records)

    def read(
        self, offset: int, shape: tuple[int, ...] | None = None, dtype: str | None = None,
        *, copy: bool = True,
    ) -> np.ndarray:  # fmt: skip
        """The array stored at record ``offset``: 1-D, or reshaped to ``shape`` if given.

        ``dtype`` (a name such as ``fp16`` or ``int4``, as a MIL ``BLOBFILE``'s tensor type
        states it) is checked against the record's own type. ``copy=False``: a read-only
        view of the source's bytes where that is safe (a reader over bytes or chunks in
        memory, not a memory-mapped file, which closing unmaps; a type numpy holds as
        stored), else a copy.
        """
        record = self.record(offset)
        if dtype is not None and dtype != record.dtype.name:
            raise self._error(
                f"expected a {dtype} blob at offset {offset}, the record holds {record.dtype.name}",
                offset + 4,
            )
        data = self._buf[record.data_offset : record.end]
        kind = record.dtype
        budget.check(record.count * max(numpy_dtype(kind).itemsize, 1),
                     f"decoding the {kind.name} weight at offset {offset}")  # fmt: skip
        if kind.sub_byte:
            array = unpack_sub_byte(data, record.count, kind.bits, kind.signed)
        elif kind.from_ml_dtypes:  # ml_dtypes types are native (little-endian) order
            bits = np.dtype(f"<u{kind.bits // 8}")
            array = (
                np.frombuffer(data, dtype=bits)
                .astype(bits.newbyteorder("="))
                .view(numpy_dtype(kind))
            )
        else:
            array = np.frombuffer(data, dtype=np.dtype(kind.numpy))
            in_place = not copy and self._mmap is None and array.dtype == numpy_dtype(kind)
            array = array if in_place else array.astype(numpy_dtype(kind))
        del data
        if shape is None:
            return array
        dims = tuple(shape)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims) or (
            math.prod(dims) != record.count
        ):
            raise self._error(
                f"blob holds {record.count} {kind.name} elements, which cannot take the shape "
                f"{list(dims)}",
                offset,
            )
        return array.reshape(dims)


# --- writer ---------------------------------------------------------------------------------


def _infer_dtype(array: np.ndarray) -> BlobDType:
    kind = array.dtype
    for d in _DTYPES:
        if d.sub_byte:
            continue
        if d.from_ml_dtypes:
            if kind.name == d.numpy:
                return d
        elif kind == np.dtype(d.numpy):
            return d
    ml_sub_byte = {"int4": "int4", "uint4": "uint4", "uint2": "uint2", "uint1": "uint1"}
    if kind.name in ml_sub_byte:  # ml_dtypes' own sub-byte types
        return DTYPES_BY_NAME[ml_sub_byte[kind.name]]
    raise FormatError(
        f"weight.bin cannot store {kind} arrays",
        hint="cast to float16 or float32, or pass dtype= (fp16, fp32, bf16, int8, int4, ...)",
    )


_ML_FLOATS = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
_ML_INTEGERS = ("int4", "uint4", "int2", "uint2", "uint1")


def _encode(array: np.ndarray, dtype: BlobDType) -> tuple[bytes, int]:
    """Raw little-endian bytes and padding bits of ``array`` stored as ``dtype``."""
    kind = array.dtype
    is_integer = kind.kind in "iub" or kind.name in _ML_INTEGERS
    is_float = kind.kind == "f" or kind.name in _ML_FLOATS
    if dtype.name.startswith(("fp", "bf")):
        if not (is_float or is_integer):
            raise FormatError(f"{dtype.name} blobs need numeric values, got a {kind} array")
        stored = array.astype(numpy_dtype(dtype))
        if not dtype.from_ml_dtypes:
            stored = stored.astype(np.dtype(dtype.numpy))
        return stored.tobytes(), 0
    if not is_integer:
        raise FormatError(
            f"{dtype.name} blobs need integer values, got a {kind} array",
            hint="round and cast the array to an integer type first",
        )
    values = array.astype(np.int64)
    signed = dtype.signed or (not dtype.sub_byte and np.dtype(dtype.numpy).kind == "i")
    low, high = (
        (-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1)
        if signed
        else (
            0,
            (1 << dtype.bits) - 1,
        )
    )
    if values.size and (int(values.min()) < low or int(values.max()) > high):
        raise FormatError(
            f"values outside the {dtype.name} range [{low}, {high}]",
            hint="clip or requantize the array first",
        )
    if dtype.sub_byte:
        return pack_sub_byte(values, dtype.bits)
    return values.astype(np.dtype(dtype.numpy)).tobytes(), 0


def encode(array: np.ndarray, dtype: str) -> tuple[bytes, int]:
    """``array`` stored as the weight.bin type named ``dtype`` (range-checked, sub-byte
    types packed): its bytes and the padding bits of its last byte."""
    return _encode(array, DTYPES_BY_NAME[dtype])


class BlobWriter:
    """Builds a weight.bin in memory: :meth:`add` arrays, then :meth:`write` or :meth:`to_bytes`.

    The bytes depend only on the sequence of arrays added (no timestamps, zeroed reserved
    fields) and equal what coremltools' ``_BlobStorageWriter`` writes for the same sequence.
    """

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = HEADER_SIZE
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, array: np.ndarray, dtype: str | None = None) -> int:
        """Append ``array`` (flattened in C order) and return its record offset for BLOBFILE.

        ``dtype`` names the stored type (``fp16``, ``fp32``, ``bf16``, ``int8``, ``int4``,
        ``uint6``, ...); by default it follows the array's own dtype. Floating types are cast
        (rounding to nearest); integer types require integer values within range.
        """
        array = np.asarray(array)
        if dtype is None:
            kind = _infer_dtype(array)
        elif dtype in DTYPES_BY_NAME:
            kind = DTYPES_BY_NAME[dtype]
        else:
            raise FormatError(
                f"unknown weight.bin dtype {dtype!r}",
                hint="one of " + ", ".join(DTYPES_BY_NAME),
            )
        payload, padding = _encode(array.reshape(-1), kind)
        record_offset = _align(self._size)
        data_offset = record_offset + RECORD_SIZE
        self._chunks.append(bytes(record_offset - self._size))
        self._chunks.append(record_bytes(kind.name, len(payload), data_offset, padding))
        self._chunks.append(payload)
        self._size = data_offset + len(payload)
        self._count += 1
        return record_offset

    def _header(self) -> bytes:
        return header_bytes(self._count)

    def to_bytes(self) -> bytes:
        """The whole file."""
        return self._header() + b"".join(self._chunks)

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the file atomically: a temporary file in the same directory, then rename."""

        def write(handle: BinaryIO) -> None:
            handle.write(self._header())
            for chunk in self._chunks:
                handle.write(chunk)

        atomic.replace_file(path, write)
