"""Checkpoints: one file holding the model, the state, the optimizer and where training was.

The file is an uncompressed zip of .npy arrays (numpy's .npz, read without pickle) with
two JSON documents stored as byte arrays: ``__manifest__`` (format, step, optimizer,
trainer settings, generator state, data position, the sha256 of every array, and the
sha256 of itself and the model document, so that an edited step or loss scale is caught
as surely as an edited array) and ``__model__`` (the graph). It is written to a temporary file beside the target and renamed
over it, so a crash leaves the old checkpoint or the new one, never half of one; an
existing file is replaced only if it is itself an anekit checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from anekit import atomic, budget
from anekit.errors import AnekitError, FormatError

FORMAT = "anekit-train-checkpoint"
VERSION = 2  # 2: the manifest's own checksum
SELF = "manifest_sha256"


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
    manifest[SELF] = _documents_digest(manifest, model)
    payload = {**arrays, "__manifest__": _json_bytes(manifest), "__model__": _json_bytes(model)}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.replace_file(path, lambda handle: np.savez(handle, **payload))
    return path


def _documents_digest(manifest: Mapping, model: Any) -> str:
    body = {k: v for k, v in manifest.items() if k != SELF}
    text = json.dumps([body, model], sort_keys=True, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def is_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a regular file holding an anekit checkpoint (a pipe or device
    is not opened: looking never blocks)."""
    from anekit.files import open_regular

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        fd = open_regular(path, "checkpoint")
    except (OSError, AnekitError):
        return False
    try:
        with os.fdopen(fd, "rb") as handle, zipfile.ZipFile(handle) as z:
            return "__manifest__.npy" in z.namelist()
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def read(path: str | os.PathLike[str]) -> tuple[dict, dict, dict[str, np.ndarray]]:
    """(manifest, model document, arrays), every checksum verified."""
    from anekit.errors import InputError
    from anekit.files import regular_file
    from anekit.formats.npy import read_arrays

    path = regular_file(path, "checkpoint", error=FormatError)
    try:  # as untrusted as any file: headers before data, within the memory budget
        arrays = read_arrays(path, "checkpoint")
    except InputError as exc:
        raise FormatError(f"not a readable checkpoint ({exc.message})", where=str(path)) from None
    try:
        docs = [arrays.pop("__manifest__"), arrays.pop("__model__")]
        # Python's objects for parsed JSON take up to ~10 times the text
        budget.check(10 * sum(d.nbytes for d in docs), "parsing the checkpoint's documents",
                     where=str(path))  # fmt: skip
        manifest, model = (json.loads(d.tobytes()) for d in docs)
    except (KeyError, ValueError, RecursionError) as exc:
        raise FormatError(
            f"the checkpoint has no readable manifest ({exc})", where=str(path)
        ) from None
    if not isinstance(manifest, dict) or not isinstance(model, dict):
        raise FormatError("the checkpoint's manifest is not a JSON object", where=str(path))
    if manifest.get(SELF) != _documents_digest(manifest, model):
        raise FormatError("the checkpoint's manifest fails its checksum (edited or corrupt)",
                          where=str(path), hint="use another checkpoint")  # fmt: skip
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise FormatError(
            f"unknown checkpoint format {manifest.get('format')!r} version {manifest.get('version')!r}",
            where=str(path),
        )
    sums = manifest.get("checksums", {})
    if not isinstance(sums, dict) or sorted(sums) != sorted(arrays):
        raise FormatError("the checkpoint's arrays do not match its manifest", where=str(path))
    for name, array in arrays.items():
        if digest(array) != sums[name]:
            raise FormatError(f"array '{name}' fails its checksum (the file is corrupt)",
                              where=str(path))  # fmt: skip
    return manifest, model, arrays


def check_position(trainer: Any, rows: int | None) -> None:
    """The counters a checkpoint restores, checked: counts are integers of at least 0, the
    loss scale a finite number above 0, the data position inside the data order."""
    for name in ("step_count", "skipped", "epoch", "position", "good_steps"):
        value = getattr(trainer, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise FormatError(f"the checkpoint's {name} is {value!r}, not a count")
    scale = trainer.loss_scale
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale) or scale <= 0:
        raise FormatError(f"the checkpoint's loss_scale is {scale!r}, not a finite number above 0")
    if not isinstance(trainer.dynamic_scale, bool):
        raise FormatError("the checkpoint's dynamic_scale is not true or false")
    if rows is not None:
        order = trainer.order
        if order.ndim != 1 or order.dtype.kind not in "iu" or sorted(order.tolist()) != list(range(rows)):
            raise FormatError("the checkpoint's data order is not a permutation of the rows")
        if trainer.position > rows:
            raise FormatError(f"the checkpoint's data position {trainer.position} lies past its "
                              f"{rows} rows")  # fmt: skip
    if not all(isinstance(x, int | float) for x in trainer.history):
        raise FormatError("the checkpoint's loss history holds something other than numbers")
