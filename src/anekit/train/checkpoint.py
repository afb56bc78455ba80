"""Checkpoints: one file holding the model, the state, the optimizer and where training was.

The file is an uncompressed zip of .npy arrays (numpy's .npz, read without pickle) with
two JSON documents stored as byte arrays: ``__manifest__`` (format, step, optimizer,
trainer settings, generator state, data position, and the sha256 of every array) and
``__model__`` (the graph). It is written to a temporary file beside the target and renamed
over it, so a crash leaves the old checkpoint or the new one, never half of one; an
existing file is replaced only if it is itself an anekit checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from anekit import atomic
from anekit.errors import FormatError

FORMAT = "anekit-train-checkpoint"
VERSION = 1


def digest(array: np.ndarray) -> str:
    a = np.ascontiguousarray(array)
    return hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()


def _json_bytes(doc: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(doc, sort_keys=True).encode(), dtype=np.uint8)


def write(path: str | os.PathLike[str], manifest: Mapping, model: Mapping,
          arrays: Mapping[str, np.ndarray]) -> Path:  # fmt: skip
    path = Path(path)
    if path.exists() and not is_checkpoint(path):
        raise FormatError(
            "is not an anekit checkpoint; refusing to overwrite it", where=str(path),
            hint="choose another path",
        )  # fmt: skip
    manifest = {**manifest, "format": FORMAT, "version": VERSION,
                "checksums": {k: digest(v) for k, v in arrays.items()}}  # fmt: skip
    payload = {**arrays, "__manifest__": _json_bytes(manifest), "__model__": _json_bytes(model)}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.replace_file(path, lambda handle: np.savez(handle, **payload))
    return path


def is_checkpoint(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return "__manifest__.npy" in z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def read(path: str | os.PathLike[str]) -> tuple[dict, dict, dict[str, np.ndarray]]:
    """(manifest, model document, arrays), every checksum verified."""
    from anekit.errors import InputError
    from anekit.formats.npy import read_arrays

    path = Path(path)
    if not path.is_file():
        raise FormatError("no such checkpoint file", where=str(path))
    try:  # as untrusted as any file: headers before data, within the memory budget
        arrays = read_arrays(path, "checkpoint")
    except InputError as exc:
        raise FormatError(f"not a readable checkpoint ({exc.message})", where=str(path)) from None
    try:
        manifest = json.loads(arrays.pop("__manifest__").tobytes())
        model = json.loads(arrays.pop("__model__").tobytes())
    except (KeyError, ValueError) as exc:
        raise FormatError(
            f"the checkpoint has no readable manifest ({exc})", where=str(path)
        ) from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise FormatError(
            f"unknown checkpoint format {manifest.get('format')!r} version {manifest.get('version')!r}",
            where=str(path),
        )
    sums = manifest.get("checksums", {})
    if sorted(sums) != sorted(arrays):
        raise FormatError("the checkpoint's arrays do not match its manifest", where=str(path))
    for name, array in arrays.items():
        if digest(array) != sums[name]:
            raise FormatError(f"array '{name}' fails its checksum (the file is corrupt)",
                              where=str(path))  # fmt: skip
    return manifest, model, arrays
