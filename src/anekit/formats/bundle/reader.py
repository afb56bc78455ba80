"""Reading a bundle from disk as untrusted input: the manifest, every path kept inside the
bundle, sizes and sha256 digests, and every BLOBFILE of every program."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from anekit import budget
from anekit.errors import FormatError
from anekit.files import read_file, regular_file
from anekit.formats.mil.values import MODEL_PATH

from .model import MANIFEST, MAX_MANIFEST_BYTES, Manifest, SegmentEntry
from .schema import check_relative, parse_manifest


@dataclass(frozen=True)
class Bundle:
    """A bundle on disk whose manifest and files have been checked.

    ``data`` holds every file the manifest lists, as read (and hashed) once: use these
    bytes, never the files again, so that what runs is what was verified.
    """

    root: Path
    manifest: Manifest
    data: Mapping[str, bytes] = field(default_factory=dict)

    def path(self, rel: str) -> Path:
        """The file ``rel`` of the bundle, resolved inside it (FormatError otherwise)."""
        return resolve_inside(self.root, rel, str(self.root))

    def read(self, rel: str) -> bytes:
        """The verified bytes of the listed file ``rel``."""
        try:
            return self.data[rel]
        except KeyError:
            raise FormatError(f"the manifest lists no file {rel!r}", where=str(self.root)) from None


def resolve_inside(root: Path, rel: str, where: str, what: str = "path") -> Path:
    """``root/rel`` after resolving symlinks, refused unless it stays inside ``root``."""
    check_relative(rel, where, what)
    base = root.resolve()
    target = (base / rel).resolve()
    if target != base and base not in target.parents:
        raise FormatError(f"{what} {rel!r} leads outside the bundle (to {target})", where=where)
    return target


def _read_manifest(root: Path) -> Manifest:
    where = str(root)
    manifest_path = root / MANIFEST
    if manifest_path.is_symlink():
        raise FormatError(f"{MANIFEST} is a symbolic link", where=where)
    raw = read_file(manifest_path, MANIFEST, max_bytes=MAX_MANIFEST_BYTES, error=FormatError)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise FormatError(f"{MANIFEST} is not UTF-8 text", where=where, offset=exc.start) from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{MANIFEST} is not valid JSON: {exc.msg}", where=where, line=exc.lineno,
                          column=exc.colno) from None  # fmt: skip
    except RecursionError:
        raise FormatError(f"{MANIFEST} nests too deeply", where=where) from None
    return parse_manifest(data, f"{where}/{MANIFEST}")


def read_bundle(
    path: str | os.PathLike[str], *, verify: bool = True, contents: bool = True
) -> Bundle:
    """Read and check the bundle directory ``path``.

    ``contents`` reads every listed file into ``Bundle.data`` (once, through a descriptor
    checked to be a regular file); ``verify`` also checks their sha256 against the manifest,
    on those same bytes. Without ``contents`` only sizes are checked.
    """
    root = Path(path)
    where = str(root)
    if not root.is_dir():
        raise FormatError(
            "not a bundle directory" if root.exists() else "no such bundle", where=where
        )
    manifest = _read_manifest(root)
    bundle = Bundle(root, manifest, {})
    files = sorted(manifest.files.items())
    budget.check(sum(e.size for _, e in files) if contents else 0, "reading the bundle's files",
                 where=where)  # fmt: skip
    data: dict[str, bytes] = {}
    # files are hashed on parallel threads (hashlib releases the GIL) while the next ones
    # are read; errors are raised in the order of a one-by-one check all the same
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        pending: list[tuple[str, str, Future[str]]] = []

        def check_digests() -> None:
            for rel, expected, digest in pending:
                if digest.result() != expected:
                    raise FormatError(f"{rel!r} does not match its sha256 in the manifest (modified or corrupt)",
                                      where=where)  # fmt: skip

        for rel, entry in files:
            try:
                raw = _checked_file(bundle, rel, entry.size, contents)
            except FormatError as exc:
                check_digests()  # an earlier file's digest error comes first
                raise exc from None
            if raw is not None:
                data[rel] = raw
                if verify:
                    pending.append((rel, entry.sha256, pool.submit(_sha256, raw)))
        check_digests()
    return Bundle(root, manifest, MappingProxyType(data))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def not_a_bundle(root: Path) -> str | None:
    """Why the folder ``root`` cannot be proven an anekit bundle (None when it can): its
    manifest must parse, and every entry in it must be the manifest, a file the manifest
    lists, or a folder holding one. Digests are not checked: this decides what may be
    replaced, and a bundle whose files were damaged is still anekit's own."""
    try:
        manifest = _read_manifest(root)
    except FormatError as exc:
        return exc.message
    listed = {MANIFEST, *manifest.files}
    folders = {str(PurePosixPath(rel).parent) for rel in listed} - {"."}
    folders |= {str(p) for rel in folders for p in PurePosixPath(rel).parents} - {"."}
    for here, dirs, names in os.walk(root):
        rel_dir = Path(here).relative_to(root).as_posix()
        for name in (*dirs, *names):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            mode = os.lstat(Path(here) / name).st_mode
            if stat.S_ISDIR(mode) and rel in folders or stat.S_ISREG(mode) and rel in listed:
                continue
            return f"its manifest does not list '{rel}'"
    return None


def _checked_file(bundle: Bundle, rel: str, size: int, contents: bool) -> bytes | None:
    """The manifest's file ``rel``: inside the bundle, a regular file of ``size`` bytes;
    its bytes when ``contents``."""
    where = str(bundle.root)
    file = bundle.path(rel)
    if not os.path.lexists(file):
        raise FormatError(f"the file {rel!r} named in the manifest is missing", where=where)
    actual = regular_file(file, repr(rel), error=FormatError).stat().st_size
    raw = None
    if contents and actual == size:
        raw = read_file(file, repr(rel), max_bytes=size, error=FormatError)
        actual = len(raw)  # what was read is what counts
    if actual != size:
        raise FormatError(f"{rel!r} has {actual} bytes, the manifest says {size}", where=where)
    return raw


def check_blobfiles(bundle: Bundle, segment: SegmentEntry, program: Any) -> None:
    """Every ``BLOBFILE`` of ``program`` (a parsed :class:`anekit.formats.mil.MilProgram`) names
    the segment's declared weight file, through ``@model_path/`` inside the segment's
    directory, and a valid record of the declared type and element count."""
    from anekit.formats.blob import BlobReader
    from anekit.formats.mil import BlobFile

    where = f"{bundle.root}/{segment.program}"
    program_dir = bundle.path(segment.program).parent
    blobs = [
        value
        for function in program.functions
        for op in function.operations
        for _, value in (*op.inputs, *op.attributes)
        if isinstance(value, BlobFile)
    ]
    if not blobs:
        return
    if segment.weights is None:
        raise FormatError(
            "the program reads BLOBFILE weights but the manifest lists no weight file", where=where
        )
    weights = bundle.path(segment.weights)
    with BlobReader(bundle.read(segment.weights)) as reader:
        for blob in blobs:
            if not blob.path.startswith(MODEL_PATH):
                raise FormatError(
                    f"BLOBFILE path {blob.path!r} does not start with {MODEL_PATH!r}", where=where
                )
            target = resolve_inside(
                program_dir, blob.path[len(MODEL_PATH) :], where, "BLOBFILE path"
            )
            if target != weights:
                raise FormatError(
                    f"BLOBFILE path {blob.path!r} is not the segment's weight file {segment.weights!r}",
                    where=where,
                )
            record = reader.record(blob.offset)
            shape = blob.type.shape
            if record.dtype.name != blob.type.dtype or not all(isinstance(d, int) for d in shape):
                raise FormatError(
                    f"BLOBFILE at offset {blob.offset} holds {record.dtype.name}, the program declares "
                    f"{blob.type}",
                    where=where,
                )
            count = 1
            for d in shape:
                count *= d  # type: ignore[operator]
            if count != record.count:
                raise FormatError(
                    f"BLOBFILE at offset {blob.offset} holds {record.count} elements, the program "
                    f"declares {blob.type}",
                    where=where,
                )
