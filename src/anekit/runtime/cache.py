"""A program cache by content, shared by processes (seed 001 section 4.2).

Entries are compiled bundles, keyed by what they are: the sha256 of the anekit version and
the bundle's whole manifest, which holds the sha256 of every file (:func:`content_key`). A
second index maps what was compiled (the imported graph's structure and weight bytes, the
target, the compile options) to an entry, so :func:`cached` (``anekit.load_or_compile``)
finds a model compiled before without running the compiler.

Layout under the cache directory (``ANEKIT_CACHE_DIR``, else the user cache directory)::

    .lock                         flock: shared to read, exclusive to insert, evict or clear
    entries/<content key>/bundle/ a bundle (manifest.json, segments/, weights.json, ...)
    entries/<content key>/.used   its mtime is the entry's last use (LRU)
    entries/<content key>/.from-<source key>   the sources that compiled to it
    entries/.insert.<pid>-<hex>/  an insert under way (a dead process's is removed)
    sources/<source key>          the content key the source compiled to

The cache is untrusted like any input, and serves only what it verified: the folder and
everything in it must belong to this user and be writable by no one else; nothing in it is
followed through a symbolic link or opened blocking (a named pipe is refused); every hit
reads the whole bundle into memory under the shared lock, checks every digest and that
the manifest hashes to the entry's key, and that the entry records the source it is served
for (a source index pointing at another model's entry is a miss). A bad entry is a miss,
and the next insert of that key replaces it.

Inserting writes the bundle into a private temporary directory and renames it into place
under the exclusive lock (a concurrent writer of the same entry finds it there and drops
its copy). The cache is bounded by ``ANEKIT_CACHE_MAX_BYTES`` (default 2 GiB): after an
insert the least recently used entries are removed until it fits. Only folders proven to
be anekit bundles and names this module writes are ever deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit.atomic import alive
from anekit.errors import AnekitError, FormatError
from anekit.files import kind_of
from anekit.formats.bundle import not_a_bundle, read_bundle
from anekit.version import __version__

DEFAULT_MAX_BYTES = 2 << 30
_KEY = re.compile(r"^[0-9a-f]{64}$")
_INSERT = re.compile(r"\.insert\.(\d+)-[0-9a-f]{8}\Z")
_USED = ".used"
_FROM = ".from-"
_BUNDLE = "bundle"
_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # never a link, never blocking


class CacheError(AnekitError):
    """The cache folder, or something in it, cannot be trusted or used as it is."""


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

    # --- the folder and the lock -----------------------------------------------------------

    def _folder(self, path: Path, create: bool) -> bool:
        """Whether ``path`` is a folder of this user's that no one else can write (created
        so when ``create``); CacheError when something else stands there."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            if not create:
                return False
            try:
                os.makedirs(path, mode=0o700, exist_ok=True)
                info = os.lstat(path)
            except OSError as exc:
                raise CacheError(f"cannot create the cache folder '{path}': {exc.strerror}",
                                 hint=_HINT) from None  # fmt: skip
        except OSError as exc:
            raise CacheError(f"cannot use the cache folder '{path}': {exc.strerror}",
                             hint=_HINT) from None  # fmt: skip
        if stat.S_ISLNK(info.st_mode) and path == self.directory:
            info = os.stat(path)  # the cache folder itself may be a link the user made
        if not stat.S_ISDIR(info.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else kind_of(info.st_mode)
            if stat.S_ISREG(info.st_mode):
                what = "a file"
            raise CacheError(f"the cache folder '{path}' is {what}, not a folder", hint=_HINT)
        _check_owner(path, info)
        return True

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        import fcntl  # POSIX (macOS, Linux): the platforms anekit's runtime serves

        self._folder(self.directory, create=True)
        lock = self.directory / ".lock"
        try:
            # no link followed (a planted .lock link creates nothing elsewhere), no blocking
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
        except OSError as exc:
            raise CacheError(f"cannot open the cache lock '{lock}': {exc.strerror}",
                             hint=_HINT) from None  # fmt: skip
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise CacheError(f"the cache lock '{lock}' is {kind_of(info.st_mode)}", hint=_HINT)
            _check_owner(lock, info)
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

    def get(self, key: str, source_key: str | None = None) -> Any | None:
        """The entry ``key`` as a Program held in memory, or None when the cache has no
        verified entry of that key (compiled from ``source_key``, when given)."""
        if not _KEY.match(key):
            raise AnekitError(f"{key!r} is not a cache key (64 hex digits)")
        with self._locked(exclusive=False):
            entry = self._entries / key
            if not self._folder(self._entries, create=False) or not self._entry_folder(entry):
                return None
            if source_key is not None and not _is_file(entry / (_FROM + source_key)):
                return None  # the source index names an entry that another source made
            program = _in_memory(entry, key)
            if program is None:
                return None
            _touch(entry)
        return program

    def _entry_folder(self, entry: Path) -> bool:
        """Whether ``entry`` is a folder of this user's (CacheError when something else
        stands at an entry's name: a file, a link, a pipe)."""
        try:
            info = os.lstat(entry)
        except FileNotFoundError:
            return False
        if not stat.S_ISDIR(info.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else (
                "a file" if stat.S_ISREG(info.st_mode) else kind_of(info.st_mode))  # fmt: skip
            raise CacheError(f"the cache entry '{entry}' is {what}, not a folder anekit wrote",
                             hint="move it away (or remove the whole cache folder)")  # fmt: skip
        _check_owner(entry, info)
        return True

    def lookup_source(self, source_key: str) -> str | None:
        """The content key a source compiled to, if the cache has it."""
        if not _KEY.match(source_key):
            raise AnekitError(f"{source_key!r} is not a cache key (64 hex digits)")
        raw = _read_small(self._sources / source_key, 64)
        if raw is None:
            return None
        key = raw.decode("ascii", "replace").strip()
        return key if _KEY.match(key) else None

    def put(self, contents: Any, source_key: str | None = None) -> str:
        """Insert a bundle built in memory (`BundleContents`); returns its content key."""
        from anekit.codegen.bundle import write_bundle

        key = content_key(contents.manifest)
        with self._locked(exclusive=False):  # the folders checked (and made) first
            self._folder(self._entries, create=True)
        staging = self._entries / f".insert.{os.getpid()}-{secrets.token_hex(4)}"
        os.mkdir(staging, 0o700)
        try:
            os.mkdir(staging / "entry", 0o700)
            write_bundle(contents, staging / "entry" / _BUNDLE)
            _touch(staging / "entry")
            with self._locked(exclusive=True):
                entry = self._entries / key
                if self._entry_folder(entry) and _in_memory(entry, key) is None:
                    problem = _not_an_entry(entry)
                    if problem is not None:  # not ours to remove
                        raise CacheError(f"'{entry}' is not a cache entry anekit wrote "
                                         f"({problem})", hint="move it away")  # fmt: skip
                    shutil.rmtree(entry)  # a damaged entry of this key: ours replaces it
                if not os.path.lexists(entry):
                    os.replace(staging / "entry", entry)
                if source_key is not None:
                    _write_small(entry / (_FROM + source_key), b"")
                    self._folder(self._sources, create=True)
                    _write_small(self._sources / source_key, key.encode("ascii"))
                self._evict(keep=key)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return key

    # --- size ------------------------------------------------------------------------------

    def _listing(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, path) of every entry that is a folder of this user's."""
        found: list[tuple[float, int, Path]] = []
        if not self._folder(self._entries, create=False):
            return found
        for entry in self._entries.iterdir():
            if not _KEY.match(entry.name):
                continue
            info = os.lstat(entry)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            size = sum(
                q.lstat().st_size for q in entry.rglob("*") if stat.S_ISREG(q.lstat().st_mode)
            )
            try:
                used = os.lstat(entry / _USED).st_mtime
            except OSError:
                used = 0.0
            found.append((used, size, entry))
        return found

    def _remove_dead_inserts(self) -> None:
        """Remove the temporary folders of inserts whose process no longer runs."""
        if not self._entries.is_dir():
            return
        for entry in self._entries.iterdir():
            match = _INSERT.match(entry.name)
            if match is not None and not alive(int(match.group(1))):
                info = os.lstat(entry)
                if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
                    shutil.rmtree(entry, ignore_errors=True)

    def _evict(self, keep: str | None) -> None:
        self._remove_dead_inserts()
        listing = sorted(self._listing(), key=lambda e: (e[0], e[2].name))
        total = sum(size for _, size, _ in listing)
        for _, size, entry in listing:
            if total <= self.max_bytes:
                break
            if entry.name == keep or _not_an_entry(entry) is not None:
                continue  # only anekit's own bundles are removed
            shutil.rmtree(entry, ignore_errors=True)
            total -= size
        self._forget_sources()

    def _forget_sources(self) -> None:
        """Remove the source index files whose entry is gone."""
        if not self._sources.is_dir() or self._sources.is_symlink():
            return
        live = {e.name for e in self._entries.iterdir()} if self._entries.is_dir() else set()
        for source in self._sources.iterdir():
            if _KEY.match(source.name) and self.lookup_source(source.name) not in live:
                if stat.S_ISREG(os.lstat(source).st_mode):
                    source.unlink(missing_ok=True)

    def info(self) -> CacheInfo:
        with self._locked(exclusive=False):
            listing = self._listing()
        return CacheInfo(
            self.directory, len(listing), sum(s for _, s, _ in listing), self.max_bytes
        )

    def clear(self) -> int:
        """Remove every entry that is an anekit bundle (and the inserts of dead processes);
        returns how many entries were removed. Anything else is left where it is."""
        with self._locked(exclusive=True):
            self._remove_dead_inserts()
            removed = 0
            for _, _, entry in self._listing():
                if _not_an_entry(entry) is None:
                    shutil.rmtree(entry, ignore_errors=True)
                    removed += 1
            self._forget_sources()
        return removed


_HINT = "point ANEKIT_CACHE_DIR at a folder of your own that only you can write"


def _check_owner(path: Path, info: os.stat_result) -> None:
    """A cache folder or file must be this user's, writable by no one else: another user
    who can write it could plant a program that this one would run."""
    if info.st_uid != os.geteuid():
        raise CacheError(f"'{path}' belongs to another user (uid {info.st_uid}); refusing to "
                         "use it as a program cache", hint=_HINT)  # fmt: skip
    if info.st_mode & 0o022:
        raise CacheError(f"'{path}' can be written by other users (mode "
                         f"{stat.S_IMODE(info.st_mode):o}); refusing to use it as a program cache",
                         hint=f"chmod go-w '{path}', or " + _HINT)  # fmt: skip


def _not_an_entry(entry: Path) -> str | None:
    """Why ``entry`` cannot be proven a cache entry anekit wrote (None when it can): a
    bundle folder (proven by its manifest) and the marks this module writes, nothing else."""
    for name in os.listdir(entry):
        mode = os.lstat(entry / name).st_mode
        if name == _BUNDLE and stat.S_ISDIR(mode):
            problem = not_a_bundle(entry / name)
            if problem is not None:
                return problem
        elif not (stat.S_ISREG(mode) and (name == _USED or name.startswith(_FROM)
                                          and _KEY.match(name[len(_FROM):]))):  # fmt: skip
            return f"it holds '{name}'"
    return None


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _read_small(path: Path, limit: int) -> bytes | None:
    """A small regular file's bytes (None when missing, a link, a pipe, or too large)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return os.read(fd, limit)
    finally:
        os.close(fd)


def _write_small(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a new temporary file renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def content_key(manifest: Any) -> str:
    """sha256 of the anekit version and the whole manifest (which holds the target, the
    wiring and the sha256 of every file): an entry whose manifest was edited, or whose
    files were edited and the manifest re-signed, no longer hashes to its name."""
    return hashlib.sha256(
        json.dumps(["anekit", __version__]).encode() + manifest.to_bytes()
    ).hexdigest()


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
        program = cache.get(key, skey)
        if program is not None:
            program.cache_key = key
            return program
    compiled = compile_graph(graph)
    key = cache.put(compiled.bundle, skey)
    program = compiled.program
    program.cache_key = key
    return program


def _in_memory(entry: Path, key: str) -> Any | None:
    """A cached bundle read whole into a Program that needs no files, when every digest
    and the key check out (None otherwise: a damaged or edited entry is a miss)."""
    from anekit.codegen.weight_map import WEIGHT_MAP
    from anekit.formats import mil
    from anekit.runtime.program import Program

    try:
        if not stat.S_ISDIR(os.lstat(entry / _BUNDLE).st_mode):
            return None  # a link or a file where the bundle belongs: never followed
        bundle = read_bundle(entry / _BUNDLE, verify=True)
        m = bundle.manifest
        if content_key(m) != key:
            return None
        programs = [mil.parse_bytes(bundle.read(s.program), f"{entry}/{s.program}")
                    for s in m.segments]  # fmt: skip
    except (FormatError, OSError):
        return None
    weights = [None if s.weights is None else bundle.read(s.weights) for s in m.segments]
    wmap = bundle.read(WEIGHT_MAP) if WEIGHT_MAP in m.files else None
    return Program(m, programs, weights, where=f"cache entry {entry.name[:12]}", weight_map=wmap)


def _touch(entry: Path) -> None:
    """Mark the entry used now (its ``.used`` file: created, never followed)."""
    used = entry / _USED
    with contextlib.suppress(FileExistsError):
        os.close(os.open(used, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600))
    now = time.time()
    with contextlib.suppress(OSError):
        os.utime(used, (now, now), follow_symlinks=False)
