"""Runtime values of the simulator: MIL dtypes to storage, literals decoded, BLOBFILE weights read safely.

Storage: fp16 values live in float32 arrays (holding fp16 values exactly), except fp16
weight files' tensors, read as float16 (one copy of a model's weights; `plan.HALF_CONSUMERS`
says who reads them so, the plan widens them for any other consumer); fp32 in float32,
fp64 in float64, integers and bool in their own numpy types (sub-byte integers unpacked to
int8/uint8), strings as Python ``str``. Scalars are 0-d arrays. Every value the simulator
hands to a kernel is read-only, so no kernel can change another op's data.

``BLOBFILE(path = string("@model_path/..."), offset = ...)`` resolves inside the program's own
directory only: the path must start with ``@model_path/``, may not contain ``..`` or be
absolute, and after following symlinks must still lie inside the directory; otherwise a
:class:`~anekit.errors.FormatError` is raised before any file outside is opened. The record
at the offset is read by :class:`~anekit.formats.blob.BlobReader`, which checks every offset
and size against the file; its dtype and element count must match the declared type.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import FormatError
from anekit.float16 import share
from anekit.formats.blob import BlobReader
from anekit.formats.mil import BlobFile, DictValue, ListValue, Scalar, Tensor, TupleValue
from anekit.formats.mil.types import DTYPES
from anekit.formats.mil.values import MODEL_PATH, WEIGHT_PATH

from .fp16 import widen_fp16

# MIL dtype -> numpy storage dtype of simulator values: each type's own, except fp16, held
# as float32 arrays of fp16 values (strings are Python str).
STORAGE: dict[str, np.dtype] = {
    name: np.dtype(np.float32) if name == "fp16" else d.numpy_dtype
    for name, d in DTYPES.items()
    if d.kind != "string"
}
FLOATS = frozenset({"fp16", "fp32", "fp64"})


def frozen(array: np.ndarray) -> np.ndarray:
    """``array`` marked read-only (in place) and returned."""
    array.flags.writeable = False
    return array


def from_literal(value: Any) -> Any:
    """A decoded scalar or tensor literal: a read-only storage array, or a str for strings."""
    if isinstance(value, Scalar):
        if isinstance(value.value, str):
            return value.value
        return frozen(np.array(value.value, dtype=STORAGE[value.dtype]))
    if isinstance(value, Tensor):
        if value.dtype == "string":
            return value.data
        data = widen_fp16(value.data) if value.dtype == "fp16" else value.data
        return share(frozen(np.array(data, dtype=STORAGE[value.dtype], order="C", copy=False)))
    raise FormatError(f"{type(value).__name__} literals are not supported by the simulator")


class BlobFiles:
    """Readers for the weight files of one program directory, each path checked and opened once."""

    def __init__(self, base_dir: str | os.PathLike[str] | None):
        self.base_dir = None if base_dir is None else Path(base_dir)
        self._readers: dict[Path, BlobReader] = {}

    def resolve(self, path: str) -> Path:
        """The file a BLOBFILE path names, guaranteed to lie inside the program directory."""
        if self.base_dir is None:
            raise FormatError(
                f"BLOBFILE {path!r} needs the program's directory",
                hint="load the program from its file, or pass base_dir=",
            )
        if not path.startswith(MODEL_PATH):
            raise FormatError(
                f"BLOBFILE path {path!r} does not start with {MODEL_PATH!r}",
                hint="weights are read only from inside the program's own directory",
            )
        relative = path[len(MODEL_PATH) :]
        parts = relative.replace("\\", "/").split("/")
        if (
            not relative
            or "\0" in relative
            or relative.startswith(("/", "\\"))
            or os.path.isabs(relative)
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise FormatError(
                f"BLOBFILE path {path!r} leaves the program directory or is not a plain "
                "relative path",
                hint=f"write it as {WEIGHT_PATH}",
            )
        base = self.base_dir.resolve()
        target = (base / Path(*parts)).resolve()  # follows symlinks without opening the target
        if not target.is_relative_to(base):
            raise FormatError(
                f"BLOBFILE path {path!r} resolves to {str(target)!r}, outside the program "
                f"directory {str(base)!r}",
                hint="symlinks out of the program directory are not followed",
            )
        if not target.is_file():
            raise FormatError(f"BLOBFILE {path!r}: no such weight file {str(target)!r}")
        return target

    def reader(self, path: str) -> tuple[BlobReader, str]:
        """The reader of the weight file a BLOBFILE path names, and the file's name."""
        target = self.resolve(path)
        reader = self._readers.get(target)
        if reader is None:
            reader = self._readers[target] = BlobReader(target)
        return reader, str(target)

    def read(self, blob: BlobFile) -> np.ndarray:
        """The tensor a BLOBFILE literal names, checked against its declared type."""
        t = blob.type
        if not t.is_static:
            raise FormatError(f"BLOBFILE tensor type {t} must have a static shape")
        reader, target = self.reader(blob.path)
        record = reader.record(blob.offset)
        if record.dtype.name != t.dtype:
            raise FormatError(
                f"BLOBFILE at offset {blob.offset} holds {record.dtype.name} data, the program "
                f"declares {t}",
                where=target,
                offset=blob.offset,
            )
        if record.count != t.size:
            raise FormatError(
                f"BLOBFILE at offset {blob.offset} holds {record.count} elements, the program "
                f"declares {t} ({t.size} elements)",
                where=target,
                offset=blob.offset,
            )
        # an fp16 tensor is a view of an in-memory weight file (a compiled model's chunks: the
        # model's own arrays), so finding its shared copy below copies nothing
        array = reader.read(blob.offset, tuple(t.shape), t.dtype, copy=t.dtype != "fp16")  # type: ignore[arg-type]
        if t.dtype == "fp16":
            # kept as fp16: the plan widens it for every consumer but a weight product or a
            # table lookup (plan.HALF_CONSUMERS), which read fp16 as it is
            array = np.asarray(array, dtype=np.float16)
        elif t.dtype in STORAGE:
            array = array.astype(STORAGE[t.dtype], copy=False)
        else:  # bf16 and fp8 have no MIL text spelling, so cannot be declared
            raise FormatError(f"BLOBFILE of {t.dtype} data is not supported")
        # one copy per process of weights equal to another program's (float16.share)
        return share(frozen(np.asarray(array, order="C")))

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


class WeightBytes(BlobFiles):
    """The one weight file of a program without a directory (its bytes in memory, or a
    verified path): every ``@model_path/...`` BLOBFILE reads it, decoded straight into the simulator's shared
    values, so no inlined copy of the fp16 literals is kept beside them."""

    def __init__(self, data: bytes | memoryview | os.PathLike[str] | None):
        super().__init__(None)
        self._data = data
        self._reader: BlobReader | None = None

    def reader(self, path: str) -> tuple[BlobReader, str]:
        if self._data is None:
            raise FormatError(f"BLOBFILE {path!r} but the program has no weight file")
        if not path.startswith(MODEL_PATH):
            raise FormatError(f"BLOBFILE path {path!r} does not start with {MODEL_PATH!r}")
        if self._reader is None:
            self._reader = BlobReader(self._data)
        return self._reader, "the program's weight file"

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def decode_value(value: Any, blobs: BlobFiles) -> Any:
    """A MIL literal (scalar, tensor or BLOBFILE) as a simulator value."""
    if isinstance(value, BlobFile):
        return blobs.read(value)
    if isinstance(value, (ListValue, TupleValue, DictValue)):
        raise FormatError(
            f"{type(value).__name__.removesuffix('Value').lower()} literals are not supported "
            "by the simulator"
        )
    return from_literal(value)


def literal_dtype(value: Any) -> str:
    """The MIL element dtype of a scalar, tensor or BLOBFILE literal."""
    if isinstance(value, (Scalar, Tensor, BlobFile)):
        return value.dtype
    raise FormatError(f"{type(value).__name__} literals are not supported by the simulator")
