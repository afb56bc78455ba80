"""A weight.bin held as chunks: the layout of :mod:`anekit.formats.blob` (blob storage v2)
without copying the arrays, so large models are hashed and written straight from memory;
and :class:`Conversions`, which converts each weight once, on worker threads.

The bytes are those :class:`anekit.formats.blob.BlobWriter` writes for the same arrays (the
tests check it): the header and records come from that module, the one owner of the layout.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from typing import Protocol

import numpy as np

from anekit.formats.blob import ALIGNMENT, HEADER_SIZE, RECORD_SIZE, header_bytes, record_bytes
from anekit.formats.mil import dtype_info


class Deferred(Protocol):
    """An array that will be ready later (a Future, or a view of one)."""

    def result(self) -> np.ndarray: ...


class _Ready:
    """An array that is ready now, behind the ``Deferred`` interface."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def result(self) -> np.ndarray:
        return self.array


class _ViewOf:
    """The part of a converted root array that a view of the unconverted root covered."""

    def __init__(self, root: Deferred, make: Callable[[np.ndarray], np.ndarray]):
        self.root, self.make = root, make

    def result(self) -> np.ndarray:
        return self.make(self.root.result())


# (convert an array to a stored dtype: "fp16" or "fp32")
Convert = Callable[[np.ndarray, str], np.ndarray]


class Conversions:
    """Weights converted to their stored dtype, each piece of memory once, on an executor.

    ``convert`` must work element by element (a cast, with saturation), so that converting a
    whole array and taking a view of the result equals converting the view. A request for
    an array seen before (the same constant in two segments) shares its conversion; a
    request for part of an array that was converted whole (the rows of a tied embedding
    the LM head reads, once the gather converted all of it) is a view of that conversion.
    Without an executor, conversions run at once on the calling thread.
    """

    def __init__(self, convert: Convert, executor: Executor | None = None):
        self._convert = convert
        self._executor = executor
        # keyed by the root's id; the weak reference tells a live root from a dead one
        # whose id was reused (nothing here keeps a source array alive)
        self._exact: dict[tuple, tuple[weakref.ref[np.ndarray], Deferred]] = {}
        self._whole: dict[tuple[int, str], tuple[weakref.ref[np.ndarray], Deferred]] = {}

    def submit(self, array: np.ndarray, dtype: str) -> Deferred:
        """``array`` converted to ``dtype`` (later, when there is an executor)."""
        root = _root(array)
        place = _place(array, root)
        if place is None:  # not a plain view of its root: convert on its own
            return self._start(array, dtype)
        offset, strides = place
        key = (id(root), offset, array.shape, strides, dtype)
        found = _live(self._exact.get(key), root)
        if found is not None:
            return found
        whole = _live(self._whole.get((id(root), dtype)), root)
        if whole is not None:
            done: Deferred = _ViewOf(whole, _view_maker(array.shape, offset, strides, root.size))
        else:
            done = self._start(array, dtype)
            if array.size == root.size and array.flags.c_contiguous:  # all of root, in order
                self._whole[(id(root), dtype)] = (weakref.ref(root), done)
        self._exact[key] = (weakref.ref(root), done)
        return done

    def _start(self, array: np.ndarray, dtype: str) -> Deferred:
        if self._executor is None:
            return _Ready(self._convert(array, dtype))
        return self._executor.submit(self._convert, array, dtype)


def _live(
    entry: tuple[weakref.ref[np.ndarray], Deferred] | None, root: np.ndarray
) -> Deferred | None:
    """The entry's conversion if it was made for this very root (not a dead namesake)."""
    return entry[1] if entry is not None and entry[0]() is root else None


def _root(array: np.ndarray) -> np.ndarray:
    """The array that owns (or first wraps) the memory ``array`` views."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _place(array: np.ndarray, root: np.ndarray) -> tuple[int, tuple[int, ...]] | None:
    """Where ``array`` lies in its C-contiguous root: element offset and element strides."""
    size = array.itemsize
    if root.dtype != array.dtype or not root.flags.c_contiguous or array.size == 0:
        return None
    offset = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    if offset < 0 or offset % size or any(s < 0 or s % size for s in array.strides):
        return None
    return offset // size, tuple(s // size for s in array.strides)


def _view_maker(
    shape: tuple[int, ...], offset: int, strides: tuple[int, ...], size: int
) -> Callable[[np.ndarray], np.ndarray]:
    """How to take, from a root of ``size`` elements converted, the view at ``offset`` /
    ``strides`` (in elements)."""

    def make(converted: np.ndarray) -> np.ndarray:
        flat = np.ascontiguousarray(converted).reshape(-1)
        if flat.size != size:
            raise ValueError(f"a converted root has {flat.size} elements, {size} expected")
        item = flat.itemsize
        return np.ndarray(shape, flat.dtype, flat, offset * item, tuple(s * item for s in strides))

    return make


class _Pending:
    """An array still being converted, with the byte size it must have."""

    def __init__(self, future: Deferred, nbytes: int, dtype: np.dtype):
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
        self._resolving = threading.Lock()  # pending chunks are resolved once, in place
        self._whole: bytes | None = None  # the joined file, once `hold` was given it

    def hold(self, data: bytes) -> None:
        """Keep the finished file as ``data`` (its bytes, joined) instead of its chunks, so
        the converted arrays are let go and one joined copy serves every reader."""
        if len(data) != self._size:
            raise ValueError(f"a weight file of {self._size} bytes cannot hold {len(data)}")
        self._whole = data
        self._chunks = []

    def __len__(self) -> int:
        return self._count

    @property
    def size(self) -> int:
        return self._size

    def add(self, array: np.ndarray, dtype: str) -> int:
        """Append ``array`` stored as ``dtype``; returns its record offset (for BLOBFILE)."""
        want = dtype_info(dtype).little_endian  # as the file stores it
        data = np.ascontiguousarray(array, dtype=want)
        if sys.byteorder != "little" and data.dtype.byteorder == "=":  # pragma: no cover
            data = data.astype(want.newbyteorder("<"))
        return self._append(memoryview(data).cast("B"), data.nbytes, dtype)

    def add_pending(self, future: Deferred, count: int, dtype: str) -> int:
        """Reserve the place of ``count`` elements of ``dtype`` that ``future`` will deliver
        (an array converted on another thread, see :class:`Conversions`); returns the
        record offset."""
        stored = dtype_info(dtype).little_endian
        nbytes = count * stored.itemsize
        return self._append(_Pending(future, nbytes, stored), nbytes, dtype)

    def add_encoded(self, data: bytes, dtype: str, padding_bits: int = 0) -> int:
        """Append data already encoded as ``dtype`` (any weight.bin type, e.g. packed uint4
        indices of a compressed weight); returns its record offset."""
        return self._append(data, len(data), dtype, padding_bits)

    def _append(
        self, chunk: bytes | memoryview | _Pending, nbytes: int, dtype: str, padding_bits: int = 0
    ) -> int:
        """A record at the next 64-byte boundary, then the data; the record's offset."""
        if self._whole is not None:
            raise ValueError("a weight file cannot grow once it holds its joined bytes")
        record_offset = -(-self._size // ALIGNMENT) * ALIGNMENT
        data_offset = record_offset + RECORD_SIZE
        if record_offset > self._size:
            self._chunks.append(bytes(record_offset - self._size))
        self._chunks.append(record_bytes(dtype, nbytes, data_offset, padding_bits))
        self._chunks.append(chunk)
        self._size = data_offset + nbytes
        self._count += 1
        return record_offset

    def chunks(self) -> list[bytes | memoryview]:
        """The file as a list of byte chunks, header first (waits for pending arrays)."""
        return list(self.stream())

    def stream(self) -> Iterator[bytes | memoryview]:
        """The chunks in order, each as soon as it is ready (pending ones resolved in place,
        so a digest can run while later arrays are still being converted)."""
        if self._whole is not None:
            yield self._whole
            return
        yield header_bytes(self._count)
        for i in range(len(self._chunks)):
            chunk = self._chunks[i]
            if isinstance(chunk, _Pending):
                with self._resolving:
                    chunk = self._chunks[i]
                    if isinstance(chunk, _Pending):
                        chunk = self._chunks[i] = chunk.result()
            yield chunk

    def to_bytes(self) -> bytes:
        return b"".join(self.chunks())

    def sha256(self) -> str:
        """The file's digest, computed chunk by chunk as conversions finish (hashlib releases
        the GIL on large chunks, so this runs well on a thread of its own)."""
        digest = hashlib.sha256()
        for chunk in self.stream():
            digest.update(chunk)
        return digest.hexdigest()
