"""A program cache by content, shared by processes (seed 001 section 4.2).

Entries are compiled bundles, keyed by what they are: the sha256 of every segment's MIL
text and weight file, the target and the anekit version (:func:`content_key`). A second
index maps what was compiled (the imported graph's structure and weight bytes, the target,
the compile options) to an entry, so :func:`cached` (``anekit.load_or_compile``) finds a model compiled before
without running the compiler.

Layout under the cache directory (``ANEKIT_CACHE_DIR``, else the user cache directory)::

    .lock                      flock: shared to read, exclusive to insert, evict or clear
    entries/<content key>/     a bundle (manifest.json, segments/, weights.json, ...)
    entries/<content key>/.used   its mtime is the entry's last use (LRU)
    sources/<source key>       the content key the source compiled to

Inserting writes the bundle into a private temporary directory and renames it into place
under the exclusive lock (a concurrent writer of the same entry finds it there and drops
its copy). The cache is bounded by ``ANEKIT_CACHE_MAX_BYTES`` (default 2 GiB): after an
insert the least recently used entries are removed until it fits. A hit reads the whole
bundle into memory under the shared lock (digests verified), so an eviction afterwards
cannot pull files from under a running program. Only names this module writes are ever
deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import AnekitError
from anekit.formats.bundle import MANIFEST, read_bundle
from anekit.version import __version__

DEFAULT_MAX_BYTES = 2 << 30
_KEY = re.compile(r"^[0-9a-f]{64}$")
_USED = ".used"


def default_dir() -> Path:
    """``ANEKIT_CACHE_DIR``, else ``~/Library/Caches/anekit`` on macOS, else
    ``$XDG_CACHE_HOME/anekit`` (``~/.cache/anekit``)."""
    env = os.environ.get("ANEKIT_CACHE_DIR")
    if env:
        return Path(env)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "anekit"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "anekit"


def default_max_bytes() -> int:
    raw = os.environ.get("ANEKIT_CACHE_MAX_BYTES")
    if raw is None:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise AnekitError(
            f"ANEKIT_CACHE_MAX_BYTES is {raw!r}", hint="set it to a byte count, e.g. 2147483648"
        )
    return value


@dataclass(frozen=True)
class CacheInfo:
    directory: Path
    entries: int
    bytes: int
    max_bytes: int


class ProgramCache:
    """Compiled bundles by content under ``directory`` (see the module docstring)."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, max_bytes: int | None = None
    ):
        self.directory = Path(directory) if directory is not None else default_dir()
        self.max_bytes = default_max_bytes() if max_bytes is None else int(max_bytes)

    # --- the lock --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        import fcntl  # POSIX (macOS, Linux): the platforms anekit's runtime serves

        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # releases the lock

    @property
    def _entries(self) -> Path:
        return self.directory / "entries"

    @property
    def _sources(self) -> Path:
        return self.directory / "sources"

    # --- lookups ---------------------------------------------------------------------------

    def get(self, key: str) -> Any | None:
        """The entry ``key`` as a Program held in memory, or None."""
        if not _KEY.match(key):
            raise AnekitError(f"{key!r} is not a cache key (64 hex digits)")
        with self._locked(exclusive=False):
            entry = self._entries / key
            if not (entry / MANIFEST).is_file():
                return None
            program = _in_memory(entry)
            _touch(entry)
        return program

    def lookup_source(self, source_key: str) -> str | None:
        """The content key a source compiled to, if the cache has it."""
        path = self._sources / source_key
        try:
            key = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return key if _KEY.match(key) else None

    def put(self, contents: Any, source_key: str | None = None) -> str:
        """Insert a bundle built in memory (`BundleContents`); returns its content key."""
        from anekit.codegen.bundle import write_bundle

        key = content_key(contents.manifest)
        self._entries.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".insert.", dir=self._entries))
        try:
            write_bundle(contents, staging / "bundle")
            _touch(staging / "bundle")
            with self._locked(exclusive=True):
                entry = self._entries / key
                if not (entry / MANIFEST).is_file():
                    if entry.exists():  # a broken entry of this key: ours replaces it
                        shutil.rmtree(entry)
                    os.replace(staging / "bundle", entry)
                if source_key is not None:
                    self._sources.mkdir(exist_ok=True)
                    tmp = self._sources / f".{source_key}.{os.getpid()}.tmp"
                    tmp.write_text(key, encoding="ascii")
                    os.replace(tmp, self._sources / source_key)
                self._evict(keep=key)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return key

    # --- size ------------------------------------------------------------------------------

    def _listing(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, path) of every entry."""
        found = []
        if not self._entries.is_dir():
            return found
        for entry in self._entries.iterdir():
            if not _KEY.match(entry.name) or not entry.is_dir() or entry.is_symlink():
                continue
            size = sum(
                p.stat().st_size for p in entry.rglob("*") if p.is_file() and not p.is_symlink()
            )
            try:
                used = (entry / _USED).stat().st_mtime
            except OSError:
                used = 0.0
            found.append((used, size, entry))
        return found

    def _evict(self, keep: str | None) -> None:
        listing = sorted(self._listing(), key=lambda e: (e[0], e[2].name))
        total = sum(size for _, size, _ in listing)
        for _, size, entry in listing:
            if total <= self.max_bytes:
                break
            if entry.name == keep:
                continue
            shutil.rmtree(entry, ignore_errors=True)
            total -= size
        live = {e.name for e in self._entries.iterdir()} if self._entries.is_dir() else set()
        if self._sources.is_dir():  # forget sources whose entry is gone
            for source in self._sources.iterdir():
                if _KEY.match(source.name) and self.lookup_source(source.name) not in live:
                    source.unlink(missing_ok=True)

    def info(self) -> CacheInfo:
        with self._locked(exclusive=False):
            listing = self._listing()
        return CacheInfo(
            self.directory, len(listing), sum(s for _, s, _ in listing), self.max_bytes
        )

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        with self._locked(exclusive=True):
            listing = self._listing()
            for _, _, entry in listing:
                shutil.rmtree(entry, ignore_errors=True)
            if self._sources.is_dir():
                for source in self._sources.iterdir():
                    if _KEY.match(source.name):
                        source.unlink(missing_ok=True)
        return len(listing)


def content_key(manifest: Any) -> str:
    """sha256 of the anekit version, the target and every segment's MIL text and weights."""
    parts = {
        "anekit": __version__,
        "target": [
            manifest.target.name,
            manifest.target.engine,
            manifest.target.program_version,
            manifest.target.opset,
        ],  # fmt: skip
        "segments": [
            [
                manifest.files[s.program].sha256,
                None if s.weights is None else manifest.files[s.weights].sha256,
            ]  # fmt: skip
            for s in manifest.segments
        ],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def source_key(graph: Any, target: str, options: Mapping[str, Any]) -> str:
    """sha256 of what a compile takes: the graph (structure, types, weight bytes), the
    target, the options (``repr`` of each) and the anekit version."""
    h = hashlib.sha256()
    h.update(
        json.dumps([__version__, target, sorted((k, repr(v)) for k, v in options.items())]).encode()
    )
    h.update(repr([(v.name, v.shape, str(v.dtype)) for v in graph.inputs]).encode())
    h.update(repr(graph.output_names).encode())
    for n in graph.nodes:
        attrs = sorted((k, _canonical(v)) for k, v in n.attrs.items())
        h.update(repr((n.op, n.name, n.inputs, n.outputs, attrs)).encode())
    for name in sorted(graph.constants):
        array = np.ascontiguousarray(graph.constants[name])
        h.update(repr((name, array.dtype.str, array.shape)).encode())
        h.update(memoryview(array).cast("B"))
    return h.hexdigest()


def _canonical(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, hashlib.sha256(value.tobytes()).hexdigest())
    if isinstance(value, (list, tuple)):
        return tuple(_canonical(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _canonical(v)) for k, v in value.items()))
    return repr(value)


def cached(
    cache: ProgramCache,
    graph: Any,
    target: str,
    options: Mapping[str, Any],
    compile_graph: Callable[[Any], Any],
) -> Any:
    """A Program for ``graph`` from ``cache`` when it was compiled before (same graph,
    weights, target, options and anekit version), else ``compile_graph(graph)``'s program,
    inserted. The program is held in memory; ``program.cache_key`` names its entry."""
    skey = source_key(graph, str(target), options)
    key = cache.lookup_source(skey)
    if key is not None:
        program = cache.get(key)
        if program is not None:
            program.cache_key = key
            return program
    compiled = compile_graph(graph)
    key = cache.put(compiled.bundle, skey)
    program = compiled.program
    program.cache_key = key
    return program


def _in_memory(entry: Path) -> Any:
    """A cached bundle read whole (digests verified) into a Program that needs no files."""
    from anekit.codegen.weight_map import WEIGHT_MAP
    from anekit.formats import mil
    from anekit.runtime.program import Program

    bundle = read_bundle(entry, verify=True)
    m = bundle.manifest
    programs = [mil.parse(bundle.path(s.program).read_text(encoding="utf-8")) for s in m.segments]
    weights = [
        None if s.weights is None else bundle.path(s.weights).read_bytes() for s in m.segments
    ]
    wmap = bundle.path(WEIGHT_MAP).read_bytes() if WEIGHT_MAP in m.files else None
    return Program(m, programs, weights, where=f"cache entry {entry.name[:12]}", weight_map=wmap)


def _touch(entry: Path) -> None:
    used = entry / _USED
    used.touch(exist_ok=True)
    now = time.time()
    os.utime(used, (now, now))
