"""Running one step: the kernel call, the checks of its results against the declared types, fp16 rounding.

Shared by load time (ops folded into constants) and by :meth:`SimProgram.run`, whose loop
inlines the common single-output path of :func:`check_output`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from anekit.errors import FormatError, InternalError
from anekit.formats.mil import MilTensorType, ScalarType

from .fp16 import round_to_fp16
from .values import frozen

NO_SLOT = -1
RUN_ARGS = 8  # positional arguments of a step _native.run_steps runs (RUN_ARGS in _native.c)


class Source(Protocol):
    """Where a function came from: the file name and each operation's line, when known."""

    where: str | None

    def line(self, index: int) -> int | None: ...


def op_error(source: Source, index: int, message: str, hint: str | None = None) -> FormatError:
    """A FormatError about operation ``index``, naming the file and line when known."""
    return FormatError(message, where=source.where, line=source.line(index), hint=hint)


@dataclass(frozen=True)
class Expect:
    """What one output of a step must look like, and whether the run loop rounds it to fp16
    (False also where the step's prepared kernel rounds it, see prepared.py)."""

    slot: int
    name: str
    dtype: str  # MIL dtype
    storage: np.dtype
    shape: tuple[int, ...] | None  # None when the declared shape has symbols
    pattern: tuple[int | str, ...]
    round: bool


@dataclass(frozen=True)
class Step:
    """One operation, ready to run."""

    index: int  # position in the function, for error messages
    op: str
    name: str
    kernel: Callable[..., Any]
    known: Mapping[str, Any]
    dynamic: tuple[tuple[str, int], ...]  # (argument, slot)
    variadic: tuple[tuple[str, tuple[tuple[int, Any], ...]], ...]  # (arg, ((slot|-1, value)...))
    outputs: tuple[Expect, ...]
    frees: tuple[int, ...] = ()


def storage_shape(t: Any) -> tuple[tuple[int | str, ...], str]:
    """(shape pattern, dtype) of a scalar or tensor type (FormatError for other types)."""
    if isinstance(t, ScalarType):
        return (), t.dtype
    if isinstance(t, MilTensorType):
        return tuple(t.shape), t.dtype
    raise FormatError(f"values of type {t} are not supported by the simulator")


def shape_matches(shape: tuple[int, ...], pattern: tuple[int | str, ...], symbols: dict) -> bool:
    """True when ``shape`` fits ``pattern`` (ints exact, "?" anything, names bound once)."""
    if len(shape) != len(pattern):
        return False
    for dim, want in zip(shape, pattern, strict=True):
        if isinstance(want, int):
            if dim != want:
                return False
        elif want != "?":
            if symbols.setdefault(want, dim) != dim:
                return False
    return True


KERNEL_ERRORS = (ValueError, IndexError, ZeroDivisionError, OverflowError, MemoryError)


def kernel_error(step: Step, exc: BaseException, source: Source) -> FormatError:
    """A kernel's complaint about its inputs (bad shapes, indices, sizes) as a FormatError."""
    if isinstance(exc, MemoryError):
        exc = ValueError("the result does not fit in memory")
    return op_error(source, step.index, f"{step.op} '{step.name}' failed: {exc}")


def apply(step: Step, kwargs: dict[str, Any], symbols: dict, source: Source) -> tuple[Any, ...]:
    """Call a step's kernel and check (and round) its results; the slow, general path."""
    try:
        with np.errstate(all="ignore"):
            result = step.kernel(**kwargs)
    except KERNEL_ERRORS as exc:
        raise kernel_error(step, exc, source) from None
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(step.outputs):
        raise op_error(
            source,
            step.index,
            f"{step.op} '{step.name}' produced {len(results)} outputs, the program declares "
            f"{len(step.outputs)}",
        )
    return tuple(
        check_output(step, e, r, symbols, source)
        for e, r in zip(step.outputs, results, strict=True)
    )


def check_output(step: Step, e: Expect, value: Any, symbols: dict, source: Source) -> Any:
    """``value`` checked against its declared type, rounded if fp16, made read-only."""
    if isinstance(value, str):
        if e.dtype != "string":
            raise InternalError(f"{step.op} kernel returned a string for {e.dtype}")
        return value
    if not isinstance(value, np.ndarray):
        value = np.asarray(value)
    if value.dtype != e.storage:
        raise InternalError(
            f"{step.op} kernel returned {value.dtype} for an {e.dtype} output (storage {e.storage})"
        )
    if value.shape != e.shape and not (
        e.shape is None and shape_matches(value.shape, e.pattern, symbols)
    ):
        raise op_error(
            source,
            step.index,
            f"{step.op} '{step.name}' computed {e.name} with shape {list(value.shape)}, the "
            f"program declares tensor<{e.dtype}, [{', '.join(map(str, e.pattern))}]>",
        )
    if e.round:
        value = round_to_fp16(value, in_place=value.flags.writeable and value.flags.owndata)
    return frozen(value) if value.flags.writeable else value
