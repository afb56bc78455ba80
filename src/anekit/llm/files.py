"""The files of a model folder, read as untrusted input: regular files inside the folder
(a symlink may not lead out of it), bounded in size, JSON parsed with clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anekit.errors import ModelError


def member(folder: Path, name: str, max_bytes: int | None = None, where: str | None = None) -> Path | None:
    """``folder/name`` when it exists (None otherwise), checked to be a regular file inside
    the folder and at most ``max_bytes`` long."""
    path = folder / name
    resolved = path.resolve()
    inside = folder.resolve() in resolved.parents
    if inside and not resolved.exists():
        return None
    if not inside or not resolved.is_file():
        raise ModelError(f"'{name}' is not a regular file inside the model folder", where=where or str(folder))
    if max_bytes is not None and resolved.stat().st_size > max_bytes:
        raise ModelError(f"'{name}' is larger than {max_bytes} bytes", where=str(path))
    return resolved


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path.name} is not valid JSON: {exc}", where=str(path)) from None
