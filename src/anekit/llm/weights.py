"""The weights of a Hugging Face folder: every tensor of its safetensors files, as float32.

Sharded checkpoints list their shards in ``model.safetensors.index.json``; every file named
must be a regular file inside the folder. The ``safetensors`` library checks each header.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from anekit.errors import ModelError
from anekit.llm.files import member, read_json

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
MAX_INDEX_BYTES = 16 << 20


def shard_files(folder: Path) -> list[Path]:
    """The safetensors files of ``folder`` (one file, or the shards its index lists)."""
    single = member(folder, SINGLE)
    if single is not None:
        return [single]
    index = member(folder, INDEX, MAX_INDEX_BYTES)
    if index is None:
        raise ModelError(
            f"no {SINGLE} or {INDEX} in '{folder}'",
            hint="save the model with save_pretrained(..., safe_serialization=True)",
        )
    try:
        names = sorted(set(read_json(index, MAX_INDEX_BYTES)["weight_map"].values()))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ModelError(f"{INDEX} has no valid weight_map ({exc})", where=str(index)) from None
    if not all(isinstance(n, str) for n in names):
        raise ModelError("weight_map values must be file names", where=str(index))
    found = [member(folder, n, where=str(index)) for n in names]
    missing = [n for n, p in zip(names, found, strict=True) if p is None]
    if missing:
        raise ModelError(f"the shards {missing} are missing", where=str(index))
    return [p for p in found if p is not None]


def read_weights(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of the folder's safetensors files, float32, keyed by its name."""
    from safetensors import SafetensorError, safe_open

    tensors: dict[str, np.ndarray] = {}
    for path in shard_files(folder):
        try:
            with safe_open(str(path), framework="numpy") as f:
                for key in f.keys():
                    tensors[key] = _float32(f.get_tensor(key), key, path)
        except (SafetensorError, OSError, ValueError, TypeError) as exc:
            if isinstance(exc, ModelError):
                raise
            raise ModelError(f"cannot read the safetensors file: {exc}", where=str(path)) from None
    return tensors


def _float32(array: np.ndarray, key: str, path: Path) -> np.ndarray:
    if array.dtype.kind != "f" and array.dtype.name != "bfloat16":
        raise ModelError(f"tensor '{key}' is {array.dtype}, not a float", where=str(path))
    return np.asarray(array, dtype=np.float32)


class WeightSet:
    """Named tensors with the family's prefix stripped; ``take`` checks each tensor's shape."""

    def __init__(self, tensors: Mapping[str, np.ndarray], prefixes: tuple[str, ...], where: str):
        self._tensors: dict[str, np.ndarray] = {}
        for key, value in tensors.items():
            short = next((key[len(p):] for p in prefixes if key.startswith(p)), key)
            self._tensors[short] = value
        self.where = where

    def has(self, name: str) -> bool:
        return name in self._tensors

    def take(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        array = self._tensors.get(name)
        if array is None:
            raise ModelError(
                f"the checkpoint has no tensor '{name}'",
                hint="the folder's weights do not match its config.json",
                where=self.where,
            )
        if tuple(array.shape) != shape:
            raise ModelError(
                f"tensor '{name}' has the shape {list(array.shape)}; config.json implies {list(shape)}",
                where=self.where,
            )
        return array
