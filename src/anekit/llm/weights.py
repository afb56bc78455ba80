"""The weights of a Hugging Face folder, read lazily and converted once to the engine's fp16.

Checkpoints are published in bf16, fp16 or fp32, in one ``model.safetensors`` or in the
shards ``model.safetensors.index.json`` lists (every file named must be a regular file
inside the folder). The ``safetensors`` library parses every header and reads each tensor
through its own typed path (``ml_dtypes`` gives numpy the bfloat16 type). Only the tensors a
model uses are read, one at a time, each checked against the memory budget first; a tensor
the model never asks for is never read.

Each tensor becomes fp16 once, here, in one read-only float16 array that every program of
the model shares: the compiler writes it to the weight files as it is (their chunks are
views of it) and the simulator's products read it in place (`anekit.simulator.gemm`). A
value fp16 cannot hold is never saturated silently: a NaN or infinity, or a finite value
beyond fp16's largest (65504), is refused naming the tensor and the count; values too small
for fp16's smallest subnormal become zero and are counted in `Conversion`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anekit import budget
from anekit.errors import ModelError
from anekit.float16 import share
from anekit.llm.files import member, read_json

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
MAX_INDEX_BYTES = 16 << 20
FP16_MAX = 65504.0
# Beyond this magnitude a float rounds to fp16 infinity (half an ulp past 65504).
_FP16_OVERFLOW = 65520.0
_BLOCK = 1 << 22  # elements converted at a time: bounds the float32 temporary to 16 MB
_DTYPES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8}  # float types the reader converts


def shard_files(folder: Path) -> list[Path]:
    """The safetensors files of ``folder`` (one file, or the shards its index lists)."""
    return sorted(set(_weight_map(folder).values()) or {_single(folder)})


def _single(folder: Path) -> Path:
    single = member(folder, SINGLE)
    if single is None:
        raise ModelError(
            f"no {SINGLE} or {INDEX} in '{folder}'",
            hint="save the model with save_pretrained(..., safe_serialization=True)",
        )
    return single


def _weight_map(folder: Path) -> dict[str, Path]:
    """Tensor name -> shard file from the index ({} for a single-file checkpoint)."""
    if member(folder, SINGLE) is not None:
        return {}
    index = member(folder, INDEX, MAX_INDEX_BYTES)
    if index is None:
        _single(folder)  # raises naming both files
    assert index is not None
    raw = read_json(index, MAX_INDEX_BYTES)
    mapping = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(mapping, dict) or not mapping:
        raise ModelError(f"{INDEX} has no weight_map object", where=str(index))
    found: dict[str, Path] = {}
    for name, file in mapping.items():
        if not isinstance(file, str) or not file or "\x00" in file or "\x00" in name:
            raise ModelError(
                f"the weight_map entry {name!r}: {file!r} is not a tensor name and a file name",
                where=str(index),
            )
        path = member(folder, file, where=str(index))
        if path is None:
            raise ModelError(f"the shard '{file}' (of tensor '{name}') is missing", where=str(index))
        found[name] = path
    return found


@dataclass
class Conversion:
    """What reading the checkpoint did: tensors and bytes read, source types, and the values
    too small for fp16 that became zero (an fp16 model's ordinary rounding, reported)."""

    tensors: int = 0
    bytes_read: int = 0
    fp16_bytes: int = 0
    source_dtypes: set[str] = field(default_factory=set)
    flushed_to_zero: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"tensors": self.tensors, "bytes_read": self.bytes_read, "fp16_bytes": self.fp16_bytes,
                "source_dtypes": sorted(self.source_dtypes), "flushed_to_zero": self.flushed_to_zero}  # fmt: skip


class Checkpoint:
    """A folder's tensors by name (the family's prefix stripped), read on `take`.

    Each tensor is read through its own short-lived ``safe_open``: the safetensors library
    memory-maps the file, and the pages a read touched stay in the process's resident memory
    while the map lives. Mapping per tensor bounds what loading holds to the largest tensor
    (its source pages and its fp16 copy), not the file (1.5 GB more for a 1B bf16 model).
    """

    def __init__(self, folder: Path, prefixes: tuple[str, ...] = ()):
        _import_safetensors()
        self.folder, self.where = folder, str(folder)
        self.prefixes = prefixes
        self.conversion = Conversion()
        self._entries: dict[str, tuple[Path, str, str, tuple[int, ...]]] = {}
        for path in shard_files(folder):
            self._index(path)

    def _index(self, path: Path) -> None:
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="numpy") as handle:
                for key in handle.keys():
                    part = handle.get_slice(key)
                    dtype, shape = part.get_dtype(), tuple(int(d) for d in part.get_shape())
                    short = next((key[len(p):] for p in self.prefixes if key.startswith(p)), key)
                    self._entries[short] = (path, key, dtype, shape)
        except (SafetensorError, OSError, ValueError, TypeError) as exc:
            raise ModelError(f"cannot read the safetensors file: {exc}", where=str(path)) from None

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing stays open between reads (kept so callers may use ``with``)."""

    def has(self, name: str) -> bool:
        return name in self._entries

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's name and the shape its header declares (nothing is read)."""
        return {name: entry[3] for name, entry in self._entries.items()}

    def take(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``name`` of ``shape`` (checked), read now, rounded to fp16 and held as a
        read-only float16 array: the model's one copy, which every program's weight file
        and the simulator read in place (`anekit.float16.share` finds it by its bytes)."""
        entry = self._entries.get(name)
        if entry is None:
            raise ModelError(
                f"the checkpoint has no tensor '{name}'",
                hint="the folder's weights do not match its config.json",
                where=self.where,
            )
        path, key, dtype, found = entry
        if found != shape:
            raise ModelError(
                f"tensor '{name}' has the shape {list(found)}; config.json implies {list(shape)}",
                where=self.where,
            )
        if dtype not in _DTYPES:
            raise ModelError(f"tensor '{name}' is {dtype}, not a float type (BF16, F16, F32)",
                             where=self.where)  # fmt: skip
        count = int(np.prod(shape, dtype=np.int64))
        block = min(count, _BLOCK)
        budget.check(count * 2 + block * (_DTYPES[dtype] * 2 + 6), f"reading tensor '{name}'",
                     where=self.where)  # fmt: skip
        half = np.empty(shape, np.float16)
        counts = _Counts(name, self.where)
        rows = max(1, _BLOCK // max(1, count // shape[0])) if shape and shape[0] else 1
        for lo in range(0, shape[0] if shape else 1, rows):
            source = self._read(path, key, name, slice(lo, min(lo + rows, shape[0])) if shape else None)
            counts.convert(source, half[lo : lo + rows] if shape else half)
            del source
        counts.check(self.conversion)
        self.conversion.tensors += 1
        self.conversion.bytes_read += count * _DTYPES[dtype]
        self.conversion.fp16_bytes += half.nbytes
        self.conversion.source_dtypes.add(dtype)
        return share(half)

    def _read(self, path: Path, key: str, name: str, rows: slice | None) -> np.ndarray:
        """Rows of one tensor (all of it for None), through a map opened for them alone."""
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="numpy") as handle:
                return handle.get_tensor(key) if rows is None else handle.get_slice(key)[rows]
        except (SafetensorError, OSError, ValueError, TypeError) as exc:
            raise ModelError(f"cannot read tensor '{name}': {exc}", where=self.where) from None


class _Counts:
    """One tensor's conversion to fp16, block by block: the values fp16 cannot hold are
    counted over the whole tensor before it is refused."""

    def __init__(self, name: str, where: str):
        self.name, self.where = name, where
        self.bad = self.over = self.flushed = 0

    def convert(self, source: np.ndarray, out: np.ndarray) -> None:
        """``source`` (bf16, fp16, fp32, fp64) rounded into the fp16 ``out`` of its shape."""
        flat, dest = source.reshape(-1), out.reshape(-1)
        for start in range(0, flat.size, _BLOCK):
            block = np.asarray(flat[start : start + _BLOCK], dtype=np.float32)
            finite = np.isfinite(block)
            if not finite.all():
                self.bad += int(block.size - np.count_nonzero(finite))
                continue
            beyond = int(np.count_nonzero(np.abs(block) >= _FP16_OVERFLOW))
            if beyond:
                self.over += beyond
                continue
            converted = block.astype(np.float16)
            self.flushed += int(np.count_nonzero((converted == 0) & (block != 0)))
            dest[start : start + block.size] = converted

    def check(self, conversion: Conversion) -> None:
        """Refuse the tensor if any value was NaN, infinite or beyond fp16's range."""
        if self.bad:
            raise ModelError(
                f"tensor '{self.name}' holds {self.bad} NaN or infinite values",
                hint="the checkpoint is corrupt or was saved after a diverged run",
                where=self.where,
            )
        if self.over:
            raise ModelError(
                f"tensor '{self.name}' holds {self.over} values beyond fp16's range "
                f"(+-{FP16_MAX:g}), which the engine cannot represent",
                hint="rescale the weights (or the layer) so they fit fp16",
                where=self.where,
            )
        conversion.flushed_to_zero += self.flushed


def _import_safetensors() -> None:
    """safetensors' numpy path names bfloat16 through numpy's type registry, which only
    knows the type once ml_dtypes is imported."""
    from anekit.errors import MissingDependencyError

    try:
        import ml_dtypes  # noqa: F401
        import safetensors  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise MissingDependencyError(exc.name or "safetensors", "llm", "reading language-model weights") from None
