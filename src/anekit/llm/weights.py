"""The weights of a Hugging Face folder, read lazily and converted once to the engine's fp16.

Checkpoints are published in bf16, fp16 or fp32, in one ``model.safetensors`` or in the
shards ``model.safetensors.index.json`` lists (every file named must be a regular file
inside the folder). The ``safetensors`` library parses every header and reads each tensor
through its own typed path (``ml_dtypes`` gives numpy the bfloat16 type). Only the tensors a
model uses are read, one at a time, each checked against the memory budget first; a tensor
the model never asks for is never read.

Each tensor becomes fp16 once, here, held as float32 (the simulator computes in float32 on
fp16 values) in one read-only copy that every program of the model shares. A
value fp16 cannot hold is never saturated silently: a NaN or infinity, or a finite value
beyond fp16's largest (65504), is refused naming the tensor and the count; values too small
for fp16's smallest subnormal become zero and are counted in `Conversion`.
"""

from __future__ import annotations

from contextlib import ExitStack
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

    Use as a context manager: the files stay memory-mapped by the safetensors library only
    while it is open.
    """

    def __init__(self, folder: Path, prefixes: tuple[str, ...] = ()):
        _import_safetensors()
        self.folder, self.where = folder, str(folder)
        self.prefixes = prefixes
        self.conversion = Conversion()
        self._stack = ExitStack()
        self._entries: dict[str, tuple[Any, str, str, tuple[int, ...]]] = {}
        try:
            files = shard_files(folder)
            for path in files:
                self._open(path)
        except BaseException:
            self._stack.close()
            raise

    def _open(self, path: Path) -> None:
        from safetensors import SafetensorError, safe_open

        try:
            handle = self._stack.enter_context(safe_open(str(path), framework="numpy"))
            for key in handle.keys():
                part = handle.get_slice(key)
                dtype, shape = part.get_dtype(), tuple(int(d) for d in part.get_shape())
                short = next((key[len(p):] for p in self.prefixes if key.startswith(p)), key)
                self._entries[short] = (handle, key, dtype, shape)
        except (SafetensorError, OSError, ValueError, TypeError) as exc:
            raise ModelError(f"cannot read the safetensors file: {exc}", where=str(path)) from None

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()

    def has(self, name: str) -> bool:
        return name in self._entries

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's name and the shape its header declares (nothing is read)."""
        return {name: entry[3] for name, entry in self._entries.items()}

    def take(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``name`` of ``shape`` (checked), read now, rounded to fp16 and held as a
        read-only float32 array (the simulator's storage of fp16 values), shared with every
        program through `anekit.float16.share`."""
        entry = self._entries.get(name)
        if entry is None:
            raise ModelError(
                f"the checkpoint has no tensor '{name}'",
                hint="the folder's weights do not match its config.json",
                where=self.where,
            )
        handle, key, dtype, found = entry
        if found != shape:
            raise ModelError(
                f"tensor '{name}' has the shape {list(found)}; config.json implies {list(shape)}",
                where=self.where,
            )
        if dtype not in _DTYPES:
            raise ModelError(f"tensor '{name}' is {dtype}, not a float type (BF16, F16, F32)",
                             where=self.where)  # fmt: skip
        count = int(np.prod(shape, dtype=np.int64))
        budget.check(count * (_DTYPES[dtype] + 6), f"reading tensor '{name}'", where=self.where)
        from safetensors import SafetensorError

        try:
            source = handle.get_tensor(key)
        except (SafetensorError, OSError, ValueError, TypeError) as exc:
            raise ModelError(f"cannot read tensor '{name}': {exc}", where=self.where) from None
        half = to_fp16(source, name, self.conversion, self.where)
        del source
        self.conversion.tensors += 1
        self.conversion.bytes_read += count * _DTYPES[dtype]
        self.conversion.fp16_bytes += half.nbytes
        self.conversion.source_dtypes.add(dtype)
        return share(widen(half))


def to_fp16(source: np.ndarray, name: str, conversion: Conversion, where: str) -> np.ndarray:
    """``source`` (bf16, fp16, fp32, fp64) as fp16, block by block; refuses a NaN, an
    infinity or a value past fp16's range, naming ``name`` and how many there are."""
    flat = source.reshape(-1)
    out = np.empty(flat.shape, np.float16)
    bad = over = flushed = 0
    for start in range(0, flat.size, _BLOCK):
        block = np.asarray(flat[start : start + _BLOCK], dtype=np.float32)
        finite = np.isfinite(block)
        if not finite.all():
            bad += int(block.size - np.count_nonzero(finite))
            continue
        beyond = int(np.count_nonzero(np.abs(block) >= _FP16_OVERFLOW))
        if beyond:
            over += beyond
            continue
        converted = block.astype(np.float16)
        flushed += int(np.count_nonzero((converted == 0) & (block != 0)))
        out[start : start + block.size] = converted
    if bad:
        raise ModelError(
            f"tensor '{name}' holds {bad} NaN or infinite values",
            hint="the checkpoint is corrupt or was saved after a diverged run",
            where=where,
        )
    if over:
        raise ModelError(
            f"tensor '{name}' holds {over} values beyond fp16's range (+-{FP16_MAX:g}), which "
            "the engine cannot represent",
            hint="rescale the weights (or the layer) so they fit fp16",
            where=where,
        )
    conversion.flushed_to_zero += flushed
    return out.reshape(source.shape)


def widen(half: np.ndarray) -> np.ndarray:
    """fp16 values as float32 (exact), C-ordered."""
    out = np.empty(half.shape, np.float32)
    out[...] = half
    return out


def _import_safetensors() -> None:
    """safetensors' numpy path names bfloat16 through numpy's type registry, which only
    knows the type once ml_dtypes is imported."""
    from anekit.errors import MissingDependencyError

    try:
        import ml_dtypes  # noqa: F401
        import safetensors  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise MissingDependencyError(exc.name or "safetensors", "llm", "reading language-model weights") from None
