"""A weight.bin held as chunks: the layout of :mod:`anekit.formats.blob` (blob storage v2)
without copying the arrays, so large models are hashed and written straight from memory.

The bytes are those :class:`anekit.formats.blob.BlobWriter` writes for the same arrays (the
tests check it): a 64-byte header (count, version 2), then per blob a 64-byte record at a
64-byte boundary (sentinel, dtype code, size, data offset, padding bits) and the data.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from concurrent.futures import Future

import numpy as np

from anekit.formats.blob import (
    ALIGNMENT,
    DTYPES_BY_NAME,
    HEADER_SIZE,
    RECORD_SIZE,
    SENTINEL,
    VERSION,
)

_HEADER = struct.Struct("<II")  # count, version; 56 reserved zero bytes follow
_RECORD = struct.Struct("<IIQQQ")  # sentinel, dtype, size, data offset, padding bits
# what each stored dtype must be in memory (little-endian, as the file is)
_NUMPY = {"fp16": np.dtype("<f2"), "fp32": np.dtype("<f4")}


class _Pending:
    """An array still being converted, with the byte size it must have."""

    def __init__(self, future: Future[np.ndarray], nbytes: int, dtype: np.dtype):
        self.future, self.nbytes, self.dtype = future, nbytes, dtype

    def result(self) -> memoryview:
        data = np.ascontiguousarray(self.future.result(), dtype=self.dtype)
        if data.nbytes != self.nbytes:
            raise ValueError(
                f"a pending weight has {data.nbytes} bytes, {self.nbytes} were reserved"
            )
        return memoryview(data).cast("B")


class WeightFile:
    """Append float arrays (fp16 or fp32, kept by reference); read back chunks, bytes, digest."""

    def __init__(self) -> None:
        self._chunks: list[bytes | memoryview | _Pending] = []
        self._size = HEADER_SIZE
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def size(self) -> int:
        return self._size

    def add(self, array: np.ndarray, dtype: str) -> int:
        """Append ``array`` stored as ``dtype``; returns its record offset (for BLOBFILE)."""
        want = _NUMPY[dtype]
        data = np.ascontiguousarray(array, dtype=want)
        if sys.byteorder != "little" and data.dtype.byteorder == "=":  # pragma: no cover
            data = data.astype(want.newbyteorder("<"))
        record_offset = -(-self._size // ALIGNMENT) * ALIGNMENT
        data_offset = record_offset + RECORD_SIZE
        code = DTYPES_BY_NAME[dtype].code
        record = _RECORD.pack(SENTINEL, code, data.nbytes, data_offset, 0).ljust(RECORD_SIZE, b"\0")
        if record_offset > self._size:
            self._chunks.append(bytes(record_offset - self._size))
        self._chunks.append(record)
        self._chunks.append(memoryview(data).cast("B"))
        self._size = data_offset + data.nbytes
        self._count += 1
        return record_offset

    def add_pending(self, future: Future[np.ndarray], count: int, dtype: str) -> int:
        """Reserve the place of ``count`` elements of ``dtype`` that ``future`` will deliver
        (an array converted on another thread); returns the record offset."""
        nbytes = count * _NUMPY[dtype].itemsize
        record_offset = -(-self._size // ALIGNMENT) * ALIGNMENT
        data_offset = record_offset + RECORD_SIZE
        code = DTYPES_BY_NAME[dtype].code
        record = _RECORD.pack(SENTINEL, code, nbytes, data_offset, 0).ljust(RECORD_SIZE, b"\0")
        if record_offset > self._size:
            self._chunks.append(bytes(record_offset - self._size))
        self._chunks.append(record)
        self._chunks.append(_Pending(future, nbytes, _NUMPY[dtype]))
        self._size = data_offset + nbytes
        self._count += 1
        return record_offset

    def chunks(self) -> list[bytes | memoryview]:
        """The file as a list of byte chunks, header first (waits for pending arrays)."""
        header = _HEADER.pack(self._count, VERSION).ljust(HEADER_SIZE, b"\0")
        resolved = [c.result() if isinstance(c, _Pending) else c for c in self._chunks]
        self._chunks = resolved  # type: ignore[assignment]
        return [header, *resolved]

    def to_bytes(self) -> bytes:
        return b"".join(self.chunks())

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks():
            digest.update(chunk)
        return digest.hexdigest()
