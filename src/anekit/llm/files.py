"""The files of a model folder, read as untrusted input: regular files inside the folder
(a symlink may not lead out of it; `anekit.files` refuses pipes and devices without
blocking), bounded in size, JSON parsed with clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anekit.errors import ModelError
from anekit.files import read_file, regular_file


def member(folder: Path, name: str, max_bytes: int | None = None, where: str | None = None) -> Path | None:
    """``folder/name`` when it exists (None otherwise), checked to be a regular file inside
    the folder and at most ``max_bytes`` long."""
    resolved = (folder / name).resolve()
    if folder.resolve() not in resolved.parents:
        raise ModelError(f"'{name}' is not a file inside the model folder", where=where or str(folder))
    if not resolved.exists():
        return None
    regular_file(resolved, f"the model's '{name}'", error=ModelError)
    if max_bytes is not None and resolved.stat().st_size > max_bytes:
        raise ModelError(f"'{name}' is larger than {max_bytes} bytes", where=str(folder / name))
    return resolved


def read_json(path: Path, max_bytes: int) -> Any:
    data = read_file(path, path.name, max_bytes=max_bytes, error=ModelError)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ModelError(f"{path.name} is not valid JSON: {exc}", where=str(path)) from None
