"""Reading a feed from an .npy or .npz file as untrusted input.

The header is read and checked before any data: no object arrays (they would need pickle),
a size within the memory budget, and data the file can actually hold. An .npz member is
inflated only up to the size its own header declares, so a small archive that claims, or
inflates to, gigabytes costs nothing before it is refused.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from tokenize import TokenError
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from anekit import budget
from anekit.errors import InputError
from anekit.files import open_regular

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"
_MAX_HEADER = 10_000  # numpy's own default limit on a header's length
# what zipfile, zlib and numpy's header reader raise for damaged bytes
_DAMAGED = (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError, NotImplementedError,
            RuntimeError, KeyError, OverflowError)  # fmt: skip


def read_array(path: str | os.PathLike[str], what: str) -> np.ndarray:
    """The one array of the .npy or .npz file ``path`` (``what`` names it in messages)."""
    where = str(path)
    fd = open_regular(path, what, error=InputError)
    with os.fdopen(fd, "rb") as f:
        magic = f.read(6)
        f.seek(0)
        if magic == _NPY_MAGIC:
            return _read_npy(f, os.fstat(fd).st_size, what, where)
        if magic[:4] == _ZIP_MAGIC:
            return _read_npz(f, what, where)
    raise InputError(
        f"{what} '{where}' is not a readable .npy or .npz file (it starts with {magic!r})",
        hint="save the array with numpy.save(path, array)",
    )


def _header(f: BinaryIO, what: str, where: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        version = npy_format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(f, max_header_size=_MAX_HEADER)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npy_format.read_array_header_2_0(f, max_header_size=_MAX_HEADER)
        else:
            raise ValueError(f"unknown .npy version {version}")
    except (*_DAMAGED, SyntaxError, TypeError, TokenError, RecursionError) as exc:
        raise InputError(f"{what} '{where}' has no valid .npy header ({exc})") from None
    if dtype.hasobject:
        raise InputError(
            f"{what} '{where}' holds an array of Python objects ({dtype}), which anekit does not "
            "load (it would need pickle)",
            hint="save a numeric array, e.g. numpy.save(path, array.astype(numpy.float32))",
        )
    if not all(isinstance(d, int) and d >= 0 for d in shape) or dtype.itemsize == 0:
        raise InputError(
            f"{what} '{where}' declares the array {dtype}{list(shape)}, which cannot hold data"
        )
    return tuple(shape), bool(fortran), dtype


def _from_bytes(data: bytes, shape: tuple[int, ...], fortran: bool, dtype: np.dtype,
                what: str, where: str) -> np.ndarray:  # fmt: skip
    try:
        array = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    except ValueError as exc:  # dims numpy cannot index (beyond its intp), a 0-size claim
        raise InputError(f"{what} '{where}' declares {dtype}{list(shape)}: {exc}") from None
    return np.array(array, order="C")  # writable, owns its memory, C order


def _checked_size(shape: tuple[int, ...], dtype: np.dtype, what: str, where: str) -> int:
    nbytes = math.prod(shape) * dtype.itemsize
    budget.check(nbytes, f"the {dtype}{list(shape)} array of {what}", where=where)
    return nbytes


def _read_npy(f: BinaryIO, size: int, what: str, where: str) -> np.ndarray:
    shape, fortran, dtype = _header(f, what, where)
    nbytes = _checked_size(shape, dtype, what, where)
    if size - f.tell() < nbytes:
        raise InputError(
            f"{what} '{where}' is truncated: its header declares {dtype}{list(shape)} "
            f"({nbytes} bytes) but {max(size - f.tell(), 0)} bytes of data follow"
        )
    return _from_bytes(f.read(nbytes), shape, fortran, dtype, what, where)


def read_arrays(path: str | os.PathLike[str], what: str) -> dict[str, np.ndarray]:
    """Every array of the .npz archive ``path`` by name (``x.npy`` is ``x``), each checked as
    `read_array` checks one and all of them together within the memory budget."""
    where = str(path)
    fd = open_regular(path, what, error=InputError)
    with os.fdopen(fd, "rb") as f:
        if f.read(4) != _ZIP_MAGIC:
            raise InputError(
                f"{what} '{where}' is not an .npz archive",
                hint="save the arrays with numpy.savez(path, name=array, ...)",
            )
        f.seek(0)
        return _npz_members(f, what, where, only_one=False)


def _read_npz(f: BinaryIO, what: str, where: str) -> np.ndarray:
    (array,) = _npz_members(f, what, where, only_one=True).values()
    return array


def _npz_members(f: BinaryIO, what: str, where: str, *, only_one: bool) -> dict[str, np.ndarray]:
    try:
        archive = zipfile.ZipFile(f)
        members = archive.infolist()
    except _DAMAGED as exc:
        raise InputError(f"{what} '{where}' is not a readable .npz archive ({exc})") from None
    with archive:
        if only_one and len(members) != 1:
            raise InputError(
                f"{what} '{where}' is an .npz with {len(members)} arrays; pass one .npy per input"
            )
        arrays: dict[str, np.ndarray] = {}
        total = 0
        for member in members:
            name = member.filename.removesuffix(".npy")
            if not name or name in arrays:
                raise InputError(f"{what} '{where}' has an unnamed or repeated array '{name}'")
            try:
                with archive.open(member) as stream:
                    shape, fortran, dtype = _header(stream, what, f"{where}/{member.filename}")
                    nbytes = _checked_size(shape, dtype, what, where)
                    total += nbytes
                    budget.check(total, f"the arrays of {what}", where=where)
                    data = stream.read(nbytes)  # inflated up to the declared size, no further
            except _DAMAGED as exc:
                raise InputError(f"{what} '{where}' is a damaged .npz archive ({exc})") from None
            if len(data) != nbytes:
                raise InputError(
                    f"{what} '{where}' is truncated: the header of '{name}' declares "
                    f"{dtype}{list(shape)} ({nbytes} bytes) but the archive holds {len(data)}"
                )
            arrays[name] = _from_bytes(data, shape, fortran, dtype, what, f"{where}/{name}")
    return arrays

