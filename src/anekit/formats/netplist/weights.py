"""Weight files named by a netplist: where they may be, and bounds-checked reads of their bytes.

Path policy (the netplist names files by whatever path the machine that wrote it used):

- a relative name is resolved against the netplist's directory and must end up, after
  symlinks, inside that directory's tree; the one exception is a bare file one level up
  (`../min.weights`, as tinygrad's fixtures do), which may sit in the parent directory
  itself but not below it;
- an absolute name (e.g. a macOS temp dir, `/tmp/zero`) is read only if it lies inside
  the netplist's directory tree; anything else is reported as missing;
- a name is only opened when a unit actually reads from it, so an unused missing file
  is not an error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from anekit.errors import FormatError
from anekit.ir.dtypes import DType

MISSING_HINT = (
    "copy the weight file into the netplist's directory and name it by a relative path in Weights"
)


@dataclass(frozen=True)
class WeightRef:
    """One read a unit makes: `count` elements of `dtype` at `offset` in Weights[index]."""

    unit: str
    role: str  # kernel, scale, bias
    index: int
    offset: int
    dtype: DType
    count: int

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


@dataclass(frozen=True)
class FileStatus:
    """Where a Weights entry resolved to (for inspect), and why it cannot be read if so."""

    name: str
    path: str | None
    size: int | None
    problem: str | None


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve(name: str, directory: Path) -> tuple[Path | None, str | None]:
    """(real path, None) or (None, why the file cannot be used) under the policy above."""
    if "\0" in name:
        return None, "the name contains a NUL byte"
    root = Path(os.path.realpath(directory))
    posix = PurePosixPath(name)
    if posix.is_absolute():
        real = Path(os.path.realpath(name))
        if not _inside(real, root):
            return None, (
                "does not exist here (an absolute path outside the netplist's directory; "
                "anekit reads weight files only from the netplist's directory tree)"
            )
    else:
        parts = posix.parts
        ups = len(parts) - len(tuple(p for p in parts if p != ".."))
        if ".." in parts[ups:] or ups > 1 or (ups == 1 and len(parts) != 2):
            return None, (
                "escapes the netplist's directory (only NAME, DIR/NAME and ../NAME are read)"
            )
        real = Path(os.path.realpath(root.joinpath(*parts)))
        allowed = _inside(real, root) if ups == 0 else real.parent == root.parent
        if not allowed:
            return None, "resolves (through a link) outside the netplist's directory"
    if not real.is_file():
        return None, "does not exist" if not real.exists() else "is not a regular file"
    return real, None


@dataclass
class WeightFiles:
    """The Weights list of one network, read lazily.

    `files` maps a Weights entry to in-memory bytes (used before the disk); `directory`
    is where disk files are resolved (None: nothing is read from disk). With
    `strict=False` a read that cannot be satisfied yields zeros and is recorded in
    `problems` (inspect uses this to describe a netplist whose weights are absent).
    """

    names: tuple[str, ...]
    directory: Path | None
    files: Mapping[str, bytes] = field(default_factory=dict)
    strict: bool = True
    where: str = "netplist"
    problems: list[str] = field(default_factory=list)
    refs: list[WeightRef] = field(default_factory=list)

    def status(self, index: int) -> FileStatus:
        name = self.names[index]
        if name in self.files:
            return FileStatus(name, None, len(self.files[name]), None)
        if self.directory is None:
            return FileStatus(name, None, None, "is not available (no directory given)")
        path, problem = resolve(name, self.directory)
        if path is None:
            return FileStatus(name, None, None, problem)
        return FileStatus(name, str(path), path.stat().st_size, None)

    def load(self, ref: WeightRef, where: str) -> np.ndarray:
        """The referenced elements, or a FormatError naming the file and the bad range."""
        self.refs.append(ref)
        try:
            data = self._read(ref, where)
        except FormatError as exc:
            if self.strict:
                raise
            self.problems.append(str(exc))
            return np.zeros(ref.count, dtype=ref.dtype.numpy)
        return np.frombuffer(data, dtype=ref.dtype.numpy.newbyteorder("<")).astype(ref.dtype.numpy)

    def _read(self, ref: WeightRef, where: str) -> bytes:
        if not 0 <= ref.index < len(self.names):
            raise FormatError(
                f"weight index {ref.index} is out of range: Weights has {len(self.names)} file(s)",
                where=where,
            )
        name = self.names[ref.index]
        label = f"weight file '{name}' (Weights[{ref.index}]), read by unit '{ref.unit}',"
        if name in self.files:
            blob = self.files[name]
            self._check_range(ref, len(blob), label, where)
            return blob[ref.offset : ref.offset + ref.nbytes]
        status = self.status(ref.index)
        if status.problem is not None:
            raise FormatError(f"{label} {status.problem}", where=where, hint=MISSING_HINT)
        assert status.path is not None and status.size is not None
        self._check_range(ref, status.size, label, where)
        try:
            with open(status.path, "rb") as handle:
                handle.seek(ref.offset)
                data = handle.read(ref.nbytes)
        except OSError as exc:
            raise FormatError(
                f"{label} cannot be read: {exc.strerror or exc}", where=where
            ) from None
        if len(data) != ref.nbytes:
            raise FormatError(f"{label} changed while it was read", where=where)
        return data

    @staticmethod
    def _check_range(ref: WeightRef, size: int, label: str, where: str) -> None:
        if ref.offset + ref.nbytes > size:
            raise FormatError(
                f"{label}: {ref.role} needs {ref.nbytes} bytes ({ref.count} x {ref.dtype}) at "
                f"offset {ref.offset}, but the file has {size} bytes",
                where=where,
                offset=ref.offset,
            )
