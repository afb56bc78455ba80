"""Writing a folder where another may stand: only over what anekit can prove it wrote, and
so that the path always holds the complete old folder or the complete new one.

:func:`replace_folder` writes the new folder beside the target under a recognisable
temporary name (``.NAME.anekit-PID-TOKEN.tmp``), then swaps it in:

- on Linux with one ``renameat2(RENAME_EXCHANGE)`` call (the old folder lands at the
  temporary name and is removed), or ``renameat2(RENAME_NOREPLACE)`` when nothing stands
  there yet;
- elsewhere (or on a file system without them) with two renames: the old folder to
  ``.NAME.anekit-PID-TOKEN.old``, then the new one into place. A crash between them leaves the
  old folder under that name, and the next write to the same place puts it back first.

A write that dies (SIGKILL, power loss) leaves at most its temporary folders; the next write
to the same place removes those of processes that no longer run, and nothing else.

Every writer of an existing folder (a replace, a weight update, the recovery of a killed
update) holds :func:`locked_folder` on it exclusively while it changes it, and a reader that
must see one whole state (loading a bundle) holds it shared: an advisory ``flock`` on the
folder itself, so nothing is added to the folder and a folder swapped in place gets a lock
of its own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from anekit.errors import AnekitError, PathError, os_error

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_AT_FDCWD = -100
# Why an existing folder may not be replaced (None: it may).
Check = Callable[[Path], "str | None"]


def checkpoint(step: str) -> None:
    """Called after every write and rename step; the crash-safety tests replace it with one
    that kills the process at step N. Does nothing otherwise."""


def temp_name(name: str, kind: str) -> str:
    return f".{name}.anekit-{os.getpid()}-{secrets.token_hex(4)}.{kind}"


def _temp_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(name)}\.anekit-(\d+)-[0-9a-f]{{8}}\.(tmp|old)\Z")


def replace_folder(target: str | os.PathLike[str], write: Callable[[Path], None], *,
                   check: Check, what: str) -> Path:  # fmt: skip
    """Write the folder ``target`` by calling ``write(folder)`` on an empty temporary folder,
    then swap it in. An existing ``target`` is replaced only when ``check`` finds nothing
    wrong with it (or it is an empty folder); otherwise AnekitError, and nothing is touched.
    """
    path, _ = check_target(target, check, what)
    parent = path.parent
    tmp = parent / temp_name(path.name, "tmp")
    try:
        os.mkdir(tmp)
        checkpoint("created the temporary folder")
        write(tmp)
        _fsync_dir(tmp)
        checkpoint("wrote the new folder")
        # under the folder's lock, so that no update or load is half-way in it; proven
        # replaceable again there (a writer may have changed it since the first check)
        with locked_folder(path, exclusive=True):
            if _replaceable(path, check, what):
                _swap(tmp, path, check, what)
            else:
                _move_new(tmp, path)
        _fsync_dir(parent)
    except OSError as exc:
        raise os_error(exc, f"write {what} '{target}'") from None
    finally:
        _remove(tmp)  # the new folder's remains on failure, the old folder after a swap
    checkpoint("removed the old folder")
    return path


def check_target(target: str | os.PathLike[str], check: Check, what: str) -> tuple[Path, bool]:
    """Whether :func:`replace_folder` may write ``target``, checked before any work (and by
    it again): its absolute path, and whether a folder stands there (which ``check`` found
    replaceable); AnekitError naming the path and what to do otherwise. Cleans up the
    temporary folders of dead writers to the same place first."""
    path = Path(os.path.abspath(os.fspath(target)))
    if not path.name or path == path.parent:
        raise PathError(f"cannot write {what} at '{target}': the path names no folder",
                          hint="give a new path such as out/model.anekit")  # fmt: skip
    parent = path.parent
    if not parent.is_dir():
        raise PathError(f"cannot write {what} '{target}': the folder '{parent}' does not exist",
                          hint=f"create it first (mkdir -p '{parent}')")  # fmt: skip
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PathError(f"cannot write {what} '{target}': the folder '{parent}' is not writable",
                          hint="choose an output path in a folder you can write to")  # fmt: skip
    recover_stale(parent, path.name)
    with locked_folder(path, exclusive=False):  # a live writer's files are not seen
        return path, _replaceable(path, check, what)


def _replaceable(path: Path, check: Check, what: str) -> bool:
    """True when ``path`` exists and may be replaced, False when it does not exist."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(mode):
        problem = "it is a symbolic link"
    elif not stat.S_ISDIR(mode):
        problem = "it is a file, not a folder"
    elif not any(path.iterdir()):
        return True  # an empty folder: nothing to lose
    else:
        problem = check(path)
    if problem is not None:
        raise AnekitError(
            f"'{path}' exists and is not {what} that anekit can prove it wrote ({problem}); "
            "refusing to replace it",
            hint="choose another output path, or move it away yourself if it may go",
        )
    return True


def _swap(new: Path, target: Path, check: Check, what: str) -> None:
    """Put ``new`` at ``target`` and the old folder at ``new``'s name."""
    if _renameat2(new, target, RENAME_EXCHANGE):
        checkpoint("exchanged the folders")
        if any(new.iterdir()) and check(new) is not None:
            # swapped for something else since the check: put it back untouched
            _renameat2(new, target, RENAME_EXCHANGE)
            raise AnekitError(f"'{target}' changed while {what} was written; it was left as is")
        return
    old = new.with_name(temp_name(target.name, "old"))
    os.rename(target, old)
    checkpoint("moved the old folder aside")
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    checkpoint("moved the new folder into place")
    os.rename(old, new)  # removed with the temporary folder


def _move_new(new: Path, target: Path) -> None:
    if not _renameat2(new, target, RENAME_NOREPLACE):
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "the path appeared during the write")
        os.rename(new, target)
    checkpoint("moved the new folder into place")


def recover_stale(parent: Path, name: str) -> None:
    """Remove the temporary folders a dead writer left for ``parent/name``; an old folder it
    had moved aside is put back first when nothing stands at the path."""
    pattern = _temp_pattern(name)
    try:
        entries = sorted(os.listdir(parent))
    except OSError:
        return
    for entry in entries:
        match = pattern.match(entry)
        if match is None or alive(int(match.group(1))):
            continue
        stale = parent / entry
        if not stat.S_ISDIR(os.lstat(stale).st_mode):
            continue  # not a folder anekit made
        if match.group(2) == "old" and not os.path.lexists(parent / name):
            os.rename(stale, parent / name)
        else:
            _remove(stale)


@contextmanager
def locked_folder(path: str | os.PathLike[str], *, exclusive: bool) -> Iterator[bool]:
    """Hold an advisory lock on the folder ``path`` (exclusive for a writer, shared for a
    reader) for the block; yields whether it is held (False when nothing stands there or the
    file system has no locks: a local writer then runs alone). The lock is re-taken when the
    folder was swapped for another while waiting, so it always covers the folder now at
    ``path``. Opening never blocks (a named pipe there is not a folder)."""
    try:
        import fcntl  # POSIX: the platforms whose runtime writes bundles
    except ImportError:  # pragma: no cover - Windows: no advisory locks to take
        yield False
        return
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NONBLOCK | os.O_CLOEXEC
    while True:
        try:
            fd = os.open(path, flags)
        except (FileNotFoundError, NotADirectoryError):
            yield False
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            yield False
            return
        try:
            now = os.stat(path)
        except OSError:
            now = None
        held = os.fstat(fd)
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # replaced while waiting: lock the folder that stands there now
    try:
        yield True
    finally:
        os.close(fd)  # releases the lock


def alive(pid: int) -> bool:
    """Whether the process ``pid`` may still be writing (this process always may)."""
    if pid == os.getpid():
        return True  # this process: another write here may be under way
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _remove(folder: Path) -> None:
    try:
        if stat.S_ISDIR(os.lstat(folder).st_mode):
            shutil.rmtree(folder, ignore_errors=True)
    except FileNotFoundError:
        pass


def write_synced(
    path: Path, chunks: Iterable[bytes | memoryview], *, exclusive: bool = False
) -> None:
    """Write ``chunks`` to ``path`` unbuffered, straight from their memory, and fsync it;
    ``exclusive`` refuses a path that exists (a temporary name must be new)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags | getattr(os, "O_BINARY", 0), 0o644)
    try:
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            while view:
                view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> Path:
    """Write one file through ``write(handle)`` into a temporary file beside ``path``, fsync
    it, then rename it over ``path``: readers see the old file or the whole new one, and a
    failed write leaves nothing behind."""
    target = Path(path)
    remove_stale_files(target.parent, target.name)
    tmp = target.parent / temp_name(target.name, "tmp")
    # 0o666 less the umask, as for any file a program creates (mkstemp's 0o600 would leave
    # a checkpoint or exported model unreadable to the user's other accounts and tools)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def remove_stale_files(parent: Path, name: str) -> None:
    """Remove the temporary files a killed :func:`replace_file` of ``parent/name`` left
    (its writer no longer runs); nothing else."""
    pattern = _temp_pattern(name)
    try:
        entries = os.listdir(parent)
    except OSError:
        return
    for entry in entries:
        match = pattern.match(entry)
        if match is None or match.group(2) != "tmp" or alive(int(match.group(1))):
            continue
        try:
            if stat.S_ISREG(os.lstat(parent / entry).st_mode):
                os.unlink(parent / entry)
        except OSError:
            pass  # gone already, or not ours to remove


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - systems that cannot open folders (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - file systems without directory fsync
        pass
    finally:
        os.close(fd)


_libc_renameat2: Callable[..., int] | None | bool = False  # False: not looked up yet


def _renameat2_function() -> Callable[..., int] | None:
    global _libc_renameat2
    if _libc_renameat2 is False:
        function = None
        if os.uname().sysname == "Linux" if hasattr(os, "uname") else False:
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
                function = libc.renameat2  # glibc 2.28+
                function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                     ctypes.c_char_p, ctypes.c_uint]  # fmt: skip
                function.restype = ctypes.c_int
            except (OSError, AttributeError):
                function = None
        _libc_renameat2 = function
    return _libc_renameat2  # type: ignore[return-value]


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """``renameat2(src, dst, flags)``: True when done, False when this system or file system
    does not offer it (the caller falls back); OSError for other failures."""
    function = _renameat2_function()
    if function is None:
        return False
    if function(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(dst))
