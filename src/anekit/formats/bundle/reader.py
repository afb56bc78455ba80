"""Reading a bundle from disk as untrusted input: the manifest, every path kept inside the
bundle, sizes and sha256 digests, and every BLOBFILE of every program."""

from __future__ import annotations

import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anekit.errors import FormatError

from .model import MANIFEST, MAX_MANIFEST_BYTES, Manifest, SegmentEntry, sha256_file
from .schema import check_relative, parse_manifest


@dataclass(frozen=True)
class Bundle:
    """A bundle on disk whose manifest and files have been checked."""

    root: Path
    manifest: Manifest

    def path(self, rel: str) -> Path:
        """The file ``rel`` of the bundle, resolved inside it (FormatError otherwise)."""
        return resolve_inside(self.root, rel, str(self.root))


def resolve_inside(root: Path, rel: str, where: str, what: str = "path") -> Path:
    """``root/rel`` after resolving symlinks, refused unless it stays inside ``root``."""
    check_relative(rel, where, what)
    base = root.resolve()
    target = (base / rel).resolve()
    if target != base and base not in target.parents:
        raise FormatError(f"{what} {rel!r} leads outside the bundle (to {target})", where=where)
    return target


def read_bundle(path: str | os.PathLike[str], *, verify: bool = True) -> Bundle:
    """Read and check the bundle directory ``path`` (``verify`` also hashes every file)."""
    root = Path(path)
    where = str(root)
    if not root.is_dir():
        raise FormatError(
            "not a bundle directory" if root.exists() else "no such bundle", where=where
        )
    manifest_path = root / MANIFEST
    if manifest_path.is_symlink() or not manifest_path.is_file():
        raise FormatError(
            f"the bundle has no {MANIFEST} (or it is not a regular file)", where=where
        )
    size = manifest_path.stat().st_size
    if size > MAX_MANIFEST_BYTES:
        raise FormatError(
            f"{MANIFEST} is {size} bytes, more than {MAX_MANIFEST_BYTES}", where=where
        )
    raw = manifest_path.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise FormatError(f"{MANIFEST} is not UTF-8 text", where=where, offset=exc.start) from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{MANIFEST} is not valid JSON: {exc.msg}", where=where, line=exc.lineno,
                          column=exc.colno) from None  # fmt: skip
    except RecursionError:
        raise FormatError(f"{MANIFEST} nests too deeply", where=where) from None
    manifest = parse_manifest(data, f"{where}/{MANIFEST}")
    bundle = Bundle(root, manifest)
    # files are hashed on parallel threads (hashlib releases the GIL) while the next ones
    # are checked; errors are raised in the order of a one-by-one check all the same
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        pending: list[tuple[str, str, Future[str]]] = []

        def check_digests() -> None:
            for rel, expected, digest in pending:
                if digest.result() != expected:
                    raise FormatError(f"{rel!r} does not match its sha256 in the manifest (modified or corrupt)",
                                      where=where)  # fmt: skip

        for rel, entry in sorted(manifest.files.items()):
            try:
                file = _checked_file(bundle, rel, entry.size)
            except FormatError as exc:
                failure = exc
            else:
                if verify:
                    pending.append((rel, entry.sha256, pool.submit(sha256_file, file)))
                continue
            check_digests()  # an earlier file's digest error comes first
            raise failure
        check_digests()
    return bundle


def _checked_file(bundle: Bundle, rel: str, size: int) -> Path:
    """The manifest's file ``rel``: inside the bundle, a regular file of ``size`` bytes."""
    where = str(bundle.root)
    file = bundle.path(rel)
    if not file.exists():
        raise FormatError(f"the file {rel!r} named in the manifest is missing", where=where)
    if not file.is_file():
        raise FormatError(f"{rel!r} is not a regular file", where=where)
    actual = file.stat().st_size
    if actual != size:
        raise FormatError(f"{rel!r} has {actual} bytes, the manifest says {size}", where=where)
    return file


MODEL_PATH = "@model_path/"


def check_blobfiles(bundle: Bundle, segment: SegmentEntry, program: Any) -> None:
    """Every ``BLOBFILE`` of ``program`` (a parsed :class:`anekit.formats.mil.Program`) names
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
    with BlobReader(weights) as reader:
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
