"""Reading a file anekit was given: a regular file only, sniffed before it is read whole.

Every loader (ONNX models, MIL text, .npy/.npz feeds, bundle files) opens what it was given
through :func:`open_regular`, which never blocks: a named pipe, a device or a directory
where a file is expected is refused with a message that says what the path is instead.
:func:`read_file` then checks the size against the memory budget and lets the caller look
at the first bytes (``sniff``) before anything is read whole, so that a 3 GB file of the
wrong kind, or /dev/zero, fails at once.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from anekit import budget
from anekit.errors import AnekitError, FormatError

HEAD_BYTES = 4096  # what a sniff sees
# A sniff returns None when the head looks right, else what is wrong with it.
Sniff = Callable[[bytes], "str | None"]


def kind_of(mode: int) -> str:
    """What a file system object is, for messages ("a named pipe", "a directory", ...)."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(
    path: str | os.PathLike[str], what: str, *, error: type[AnekitError] = AnekitError,
    hint: str | None = None,
) -> Path:  # fmt: skip
    """``path`` when it names a regular file (symlinks followed), else ``error`` saying what
    it is. Looks without opening, so it never blocks."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise error(f"{what} '{p}' does not exist", hint=hint) from None
    except OSError as exc:
        raise error(f"cannot read {what} '{p}': {exc.strerror}", hint=hint) from None
    if not stat.S_ISREG(mode):
        raise error(
            f"{what} '{p}' is {kind_of(mode)}, not a regular file",
            hint=hint or "pass the path of a file",
        )
    return p


def open_regular(
    path: str | os.PathLike[str], what: str, *, error: type[AnekitError] = AnekitError
) -> int:
    """An fd open for reading on the regular file ``path``, checked through the fd itself
    (so a file swapped for a pipe after a look is still refused); never blocks on a pipe."""
    p = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise error(f"{what} '{p}' does not exist") from None
    except IsADirectoryError:
        raise error(f"{what} '{p}' is a directory, not a regular file") from None
    except OSError as exc:
        raise error(f"cannot open {what} '{p}': {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(
            f"{what} '{p}' is {kind_of(mode)}, not a regular file", hint="pass the path of a file"
        )
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return fd


def read_fd(fd: int, size: int) -> bytes:
    """Exactly ``size`` bytes from the start of ``fd`` (fewer if the file shrank)."""
    buffer = bytearray(size)
    view, done = memoryview(buffer), 0
    while done < size:
        n = os.preadv(fd, [view[done:]], done) if hasattr(os, "preadv") else _pread_into(fd, view, done)
        if n <= 0:
            break
        done += n
    del view
    if done < size:
        del buffer[done:]
    return bytes(buffer)


def _pread_into(fd: int, view: memoryview, offset: int) -> int:  # pragma: no cover - Windows
    os.lseek(fd, offset, os.SEEK_SET)
    chunk = os.read(fd, len(view) - offset)
    view[offset : offset + len(chunk)] = chunk
    return len(chunk)


def read_file(
    path: str | os.PathLike[str],
    what: str,
    *,
    sniff: Sniff | None = None,
    max_bytes: int | None = None,
    too_large_hint: str | None = None,
    error: type[AnekitError] = AnekitError,
) -> bytes:
    """The whole regular file ``path``, read once: refused before reading when it is larger
    than ``max_bytes`` or the memory budget, or when ``sniff`` finds its head wrong (a
    FormatError; ``error`` is raised when the path is missing or not a regular file)."""
    fd = open_regular(path, what, error=error)
    try:
        size = os.fstat(fd).st_size
        where = str(path)
        if sniff is not None:  # the wrong kind of file is the better message: first
            problem = sniff(os.pread(fd, min(size, HEAD_BYTES), 0))
            if problem is not None:
                raise FormatError(problem, where=where)
        if max_bytes is not None and size > max_bytes:
            raise FormatError(
                f"{what} is {budget.describe(size)}, more than the {budget.describe(max_bytes)} "
                "such a file can hold",
                where=where,
                hint=too_large_hint,
            )
        budget.check(size, f"reading {what}", where=where)
        return read_fd(fd, size)
    finally:
        os.close(fd)
