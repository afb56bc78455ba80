"""The user-facing error hierarchy: every error a user can cause is an AnekitError."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


class AnekitError(Exception):
    """An error caused by the user's input; the CLI prints it and exits with status 2.

    ``hint`` says how to fix it; ``where`` names the file, node or offset at fault.
    """

    def __init__(self, message: str, *, hint: str | None = None, where: str | None = None):
        self.message = message
        self.hint = hint
        self.where = where
        super().__init__(self.__str__())

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class FormatError(AnekitError):
    """A malformed external file (ONNX, MIL, weight.bin, netplist, .hwx, bundle).

    ``offset`` is the byte offset (binary formats) or ``line``/``column`` (text formats)
    where the problem was found, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        where: str | None = None,
        offset: int | None = None,
        line: int | None = None,
        column: int | None = None,
    ):
        self.offset = offset
        self.line = line
        self.column = column
        loc = []
        if offset is not None:
            loc.append(f"offset 0x{offset:x}")
        if line is not None:
            loc.append(f"line {line}" + (f", column {column}" if column is not None else ""))
        if loc:
            where = f"{where} ({', '.join(loc)})" if where else ", ".join(loc)
        super().__init__(message, hint=hint, where=where)


class ModelError(AnekitError):
    """A model that is well-formed but cannot be used as given (bad shapes, bad attributes)."""


class UnsupportedModelError(ModelError):
    """A model that uses operators anekit does not implement; lists all of them at once."""


class DynamicShapeError(ModelError):
    """Inputs with dynamic dimensions the caller has not fixed; names every one of them."""


class ShapeError(ModelError):
    """Shape or dtype inference failed; the message names the node and the op."""


class InputError(AnekitError):
    """Bad feeds passed to run(): a missing input, a wrong shape or dtype."""


def check_input_names(
    expected: Iterable[str], given: Mapping[str, Any] | Iterable[str], takes: str
) -> None:
    """Raise one InputError naming every missing and every unknown input, then what the
    callee takes (e.g. "the graph takes (x: fp32[1x3])")."""
    if not isinstance(given, Mapping) and not _names(given):  # feeds, or their names
        raise InputError(
            f"the inputs must map each input name to an array, not a {type(given).__name__}; "
            f"{takes}",
            hint="e.g. run({'x': array}) or run(x=array)",
        )
    expected, given = list(expected), list(given)
    missing = [n for n in expected if n not in given]
    extra = [n for n in given if n not in expected]
    if missing or extra:
        parts = [f"missing input(s) {missing}"] if missing else []
        parts += [f"unknown input(s) {extra}"] if extra else []
        raise InputError("; ".join(parts) + f"; {takes}")


def _names(given: Any) -> bool:
    """True when ``given`` is a list or tuple of input names."""
    return isinstance(given, list | tuple) and all(isinstance(n, str) for n in given)


class TargetError(AnekitError):
    """An unknown target name or an impossible target setting."""


class MissingDependencyError(AnekitError):
    """An optional dependency (an extra) is needed but not installed."""

    def __init__(self, package: str, extra: str, purpose: str):
        super().__init__(
            f"{purpose} needs the Python package '{package}', which is not installed",
            hint=f"pip install 'anekit[{extra}]'",
        )


class PathError(AnekitError):
    """A path argument of the wrong type, or a file or folder the system will not let anekit
    read or write (missing, no permission, read-only, disk full)."""


def path_argument(value: Any, what: str) -> Path:
    """``value`` as a Path, or a PathError saying what ``what`` must be."""
    if isinstance(value, str | os.PathLike) and not isinstance(value, bytes):
        path = Path(value)
        if str(path):
            return path
    raise PathError(
        f"{what} must be a path (a str or os.PathLike), not a {type(value).__name__} ({value!r})"
    )


def os_error(exc: OSError, doing: str) -> PathError:
    """An OSError met while ``doing`` something, as the user's error naming the path."""
    reason = exc.strerror or str(exc)
    if exc.filename is not None:
        reason += f" ('{exc.filename}')"
    return PathError(
        f"cannot {doing}: {reason}",
        hint="check that the folder exists and is writable, and that the disk has room",
    )


class InternalError(Exception):
    """A bug in anekit (not the user's fault): the CLI exits with status 1."""


class MemoryBudgetError(AnekitError):
    """Work that would need more memory than anekit's budget (``ANEKIT_MAX_MEMORY``); the
    message names what asked for how much. ``requested`` and ``limit`` are in bytes."""

    def __init__(self, message: str, *, requested: int, limit: int, hint: str | None = None,
                 where: str | None = None):  # fmt: skip
        self.requested = requested
        self.limit = limit
        super().__init__(message, hint=hint, where=where)

