"""SimProgram: a MIL function loaded once (constants decoded, ops checked) and run many times in fp16.

fp16 storage between ops, fp32 arithmetic inside an op: fp16 values are float32 arrays holding
fp16 values; a kernel computes in float32 and its fp16 results are rounded once (round to
nearest even, overflow to infinity). fp32 values stay fp32; integers and bools keep their
dtypes. Each op's result is checked against the type the program declares.
Runs of elementwise ops over one shape run as one fused C pass with the same bits
(fusion.py).
"""

from __future__ import annotations

import inspect
import math
import os
import re
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import InputError, check_input_names
from anekit.formats.mil import MilProgram, MilTensorType, ScalarType, parse, parse_file

from . import fp16, gemm, heap
from .execute import (
    KERNEL_ERRORS,
    NO_SLOT,
    RUN_ARGS,
    Step,
    apply,
    check_output,
    kernel_error,
    shape_matches,
    storage_shape,
)
from .fp16 import GATHER_MIN, binary_rounded, gathered, narrow_to_float16, round_to_fp16, widen_fp16
from .fusion import FusedKernel
from .plan import Plan, load_plan
from .values import STORAGE, BlobFiles, frozen


class _Lines:
    """The file name, and the source line of an operation (found only when an error needs it)."""

    def __init__(self, text: str | None, program: MilProgram, function: str, where: str | None):
        self.text = text
        self.program = program
        self.function = function
        self.where = where
        self._lines: list[int | None] | None = None

    def line(self, index: int) -> int | None:
        if self.text is None:
            return None
        if self._lines is None:
            self._lines = self._find()
        return self._lines[index] if index < len(self._lines) else None

    def _find(self) -> list[int | None]:
        text = self.text or ""
        start = re.search(rf"\bfunc\s+{re.escape(self.function)}\b", text)
        pos = start.end() if start else 0
        lines: list[int | None] = []
        for o in self.program.function(self.function).operations:
            pattern = rf"\b{re.escape(o.outputs[0].name)}\s*[,=]"
            match = re.compile(pattern).search(text, pos)
            if match is None:
                lines.append(None)
                continue
            lines.append(text.count("\n", 0, match.start()) + 1)
            pos = match.end()
        return lines


class SimProgram:
    """One function of a MIL program, ready to run on the fp16 simulator.

    ``base_dir`` is the directory ``@model_path`` names (where ``weights/weight.bin`` lives);
    ``blobs``, instead of a directory, reads the weights from elsewhere (`values.WeightBytes`:
    a weight file's bytes in memory). ``source`` is the MIL text, used only to name line
    numbers in errors. Loading checks every op and reads every weight; :meth:`run` can then
    be called any number of times.
    """

    def __init__(
        self,
        program: MilProgram,
        base_dir: str | os.PathLike[str] | None = None,
        *,
        function: str = "main",
        source: str | None = None,
        where: str | None = None,
        blobs: BlobFiles | None = None,
    ):
        self.program = program
        self.function = program.function(function)
        self._source = _Lines(source, program, function, where)
        blobs = BlobFiles(base_dir) if blobs is None else blobs
        try:
            self._plan: Plan = load_plan(self.function, blobs, self._source)
        finally:
            blobs.close()
        # what a run reads of each step, unpacked once (a training step runs ~1300 steps
        # per call, ~2.4 us of Python each besides the arithmetic): a kernel whose arguments
        # are its leading parameters is called positionally, the others with keywords (the
        # known ones copied per call, never modified)
        self._loop = _loop(self._plan)
        self._specs = tuple(_spec(entry) for entry in self._loop)
        self._plain = _plain_inputs(self._plan)
        self._heap = heap.reuse(self._plan.peak_bytes)  # large results: freed memory reused
        # constants a kernel could hand back unchanged: outputs that are one of them are copied
        self._constants = frozenset(
            id(v)
            for step in self._plan.steps
            for v in (*step.known.values(), *(v for _, items in step.variadic for _, v in items))
            if isinstance(v, np.ndarray)
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, function: str = "main") -> SimProgram:
        """Load a ``model.mil`` file; its directory is ``@model_path``."""
        path = Path(path)
        program = parse_file(path)
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # pragma: no cover - parse_file read it already
            source = None
        return cls(program, path.parent, function=function, source=source, where=str(path))

    @classmethod
    def from_text(
        cls, text: str, base_dir: str | os.PathLike[str] | None = None, *, function: str = "main"
    ) -> SimProgram:
        """Parse MIL text and load its function ``function``."""
        return cls(parse(text), base_dir, function=function, source=text)

    @property
    def inputs(self) -> dict[str, Any]:
        """Input name -> MIL type, in declaration order."""
        return {b.name: b.type for b in self._plan.inputs}

    @property
    def outputs(self) -> dict[str, Any]:
        """Output name -> MIL type, in return order."""
        return dict(self._plan.output_types)

    def signature(self) -> str:
        """``(x: tensor<fp16, [1, 64, 1, 16]>, ...)``, for messages."""
        return "(" + ", ".join(f"{b.name}: {b.type}" for b in self._plan.inputs) + ")"

    def __call__(self, **feeds: Any) -> dict[str, np.ndarray]:
        return self.run(feeds)

    # --- running ----------------------------------------------------------------------------

    def _feeds(self, feeds: Mapping[str, Any], symbols: dict) -> list[Any]:
        if self._plain is not None and type(feeds) is dict and len(feeds) == len(self._plain):
            # every input a float tensor of a static shape, fed float32 arrays of that shape:
            # what _feed does for them (a copy, rounded to fp16 where the type is fp16)
            stored = []
            for name, shape, half in self._plain:
                value = feeds.get(name)
                if type(value) is not np.ndarray or value.dtype != np.float32 or value.shape != shape:
                    break
                array = value.copy()
                stored.append(frozen(round_to_fp16(array, in_place=True) if half else array))
            else:
                return stored
        names = [b.name for b in self._plan.inputs]
        if not isinstance(feeds, Mapping) or feeds.keys() != set(names):
            # the message (every input's type as text) only when it is needed
            check_input_names(names, feeds, f"the function '{self.function.name}' takes "
                                            f"{self.signature()}")  # fmt: skip
        return [self._feed(b.name, b.type, feeds[b.name], symbols) for b in self._plan.inputs]

    def _feed(self, name: str, t: ScalarType | MilTensorType, value: Any, symbols: dict) -> Any:
        pattern, dtype = storage_shape(t)
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as exc:  # a ragged nested list, an unconvertible object
            raise InputError(f"input '{name}' is not an array ({exc})",
                             hint=f"the function takes {self.signature()}") from None  # fmt: skip
        if not shape_matches(array.shape, pattern, symbols):
            raise InputError(
                f"input '{name}' has shape {list(array.shape)}, but the function expects {t}",
                hint=f"the function takes {self.signature()}",
            )
        kind = array.dtype.kind
        if dtype in ("fp16", "fp32", "fp64"):
            ok = kind in "fiu"
        elif dtype == "bool":
            ok = kind == "b"
        else:
            ok = kind in "iub"
        if not ok:
            raise InputError(
                f"input '{name}' has dtype {array.dtype}, but the function expects {t}",
                hint=f"convert the array, e.g. array.astype(numpy.{STORAGE[dtype].name})",
            )
        storage = STORAGE[dtype]
        if kind in "iu" and storage.kind in "iu" and array.size:
            info = np.iinfo(storage)
            low, high = int(array.min()), int(array.max())
            if low < info.min or high > info.max:
                raise InputError(
                    f"input '{name}' has values in [{low}, {high}], outside the {dtype} range"
                )
        if dtype == "fp16":
            if array.dtype == np.float16:
                array = widen_fp16(array)
            else:
                array = round_to_fp16(np.array(array, dtype=np.float32, order="C"), in_place=True)
        else:
            array = np.array(array, dtype=storage, order="C")
        return frozen(array)

    def run(self, feeds: Mapping[str, Any], *, fp32_outputs: bool = False) -> dict[str, np.ndarray]:
        """Run the function on ``feeds`` (name -> array); returns outputs by name.

        fp16 outputs come back as float16 arrays, or as float32 arrays holding the same values
        with ``fp32_outputs=True`` (saves a conversion when the caller computes in fp32).
        """
        symbols: dict[str, int] = {}
        return self._execute(self._feeds(feeds, symbols), symbols, fp32_outputs)

    def run_stored(self, stored: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on inputs already in the simulator's storage form (an fp16 value as a float32
        array holding fp16 values, of the declared shape), as a session's resident state
        is: nothing is rounded or converted on the way in. fp16 outputs come back in that
        form too (float32 arrays), and read-only: the caller (a session, which copies them
        onto surfaces or hands them to the next segment) does not own them, so nothing is
        copied."""
        args = []
        for b in self._plan.inputs:
            array = stored[b.name]
            pattern, dtype = storage_shape(b.type)
            if array.dtype != STORAGE[dtype] or not shape_matches(array.shape, pattern, {}):
                raise InputError(
                    f"stored input '{b.name}' is {array.dtype}{list(array.shape)}, "
                    f"the function declares {b.type}"
                )
            args.append(frozen(array) if array.flags.writeable else array)
        return self._execute(args, {}, True, owned=False)

    def _execute(
        self, inputs: list[Any], symbols: dict[str, int], fp32_outputs: bool, owned: bool = True
    ) -> dict[str, np.ndarray]:
        plan = self._plan
        env: list[Any] = [None] * plan.slot_count
        for slot, array in zip(plan.input_slots, inputs, strict=True):
            env[slot] = array
        source = self._source
        native = fp16._native  # read per run: tests switch it off
        # the common steps run in C (run_steps), the others here, in order
        specs = self._specs if native is not None and hasattr(native, "run_steps") else None
        loop, i, count = self._loop, 0, len(self._loop)
        with np.errstate(all="ignore"), gemm.blas_on_one_thread(), self._heap or nullcontext():
            while i < count:
                made = None  # a result run_steps handed back: its kernel ran already
                if specs is not None:
                    i, made, exc = native.run_steps(specs, env, i, np.ndarray)
                    if i == count:
                        break
                    if exc is not None:
                        if isinstance(exc, KERNEL_ERRORS):
                            raise kernel_error(loop[i][0], exc, source) from None
                        raise exc
                (
                    step, positional, known, dynamic, gathers, fused, variadic, single, frees,
                    reads, kernel,
                ) = loop[i]  # fmt: skip
                i += 1
                if made is not None:
                    kwargs = None
                elif reads is not None:  # runtime values only, one or two: no list to build
                    kwargs = None
                    args = (env[reads[0]],) if len(reads) == 1 else (env[reads[0]], env[reads[1]])
                elif positional is not None:
                    kwargs = None
                    args = [env[slot] if slot != NO_SLOT else value for slot, value in positional]
                    if gathers:
                        args = [gathered(a) for a in args]
                else:
                    kwargs = known.copy()
                    for key, slot in dynamic:
                        kwargs[key] = env[slot]
                    for key, items in variadic:
                        kwargs[key] = tuple(env[s] if s != NO_SLOT else v for s, v in items)
                if single is not None:
                    e = single
                    if made is None and fused is not None and kwargs is None:
                        out = binary_rounded(fused, args[0], args[1], e.shape)
                        if out is not None:  # computed and rounded in one pass
                            out.flags.writeable = False
                            env[e.slot] = out
                            for slot in frees:
                                env[slot] = None
                            continue
                    if made is not None:
                        out = made
                    else:
                        try:
                            out = kernel(*args) if kwargs is None else kernel(**kwargs)
                        except KERNEL_ERRORS as exc:
                            raise kernel_error(step, exc, source) from None
                    if (
                        type(out) is not np.ndarray
                        or (out.dtype is not e.storage and out.dtype != e.storage)
                        or out.shape != e.shape
                    ):
                        out = check_output(step, e, out, symbols, source)
                    else:
                        flags = out.flags
                        if e.round:
                            # writeable means made by the kernel: every value a kernel is given
                            # is read-only, and so is any view of one (a reshaped matmul result
                            # is a view, and is rounded where it is, without a copy)
                            if native is not None and flags.writeable and flags.c_contiguous:
                                if native.round_in_place(out):  # left |x| >= 65520, inf, NaN
                                    round_to_fp16(out, in_place=True)  # exact for those
                            else:
                                out = round_to_fp16(out, in_place=flags.writeable)
                                flags = out.flags
                        flags.writeable = False
                    env[e.slot] = out
                elif type(step.kernel) is FusedKernel and kwargs is None:
                    # a fused group's outputs: made, shaped and rounded by the kernel
                    try:
                        values = step.kernel(*args)
                    except KERNEL_ERRORS as exc:
                        raise kernel_error(step, exc, source) from None
                    for e, value in zip(step.outputs, values, strict=True):
                        value.flags.writeable = False
                        env[e.slot] = value
                else:
                    if kwargs is None:
                        kwargs = dict(known)
                        kwargs.update((key, env[slot]) for key, slot in dynamic)
                    values = apply(step, kwargs, symbols, source)
                    for e, value in zip(step.outputs, values, strict=True):
                        env[e.slot] = value
                for slot in frees:
                    env[slot] = None
        results: dict[str, np.ndarray] = {}
        if not owned:
            for name, slot, known in plan.outputs:
                results[name] = known if slot == NO_SLOT else env[slot]
            return results
        handed: set[int] = set(self._constants)
        for name, slot, known in plan.outputs:
            value = known if slot == NO_SLOT else env[slot]
            results[name] = self._output(name, value, fp32_outputs, slot != NO_SLOT, handed)
        return results

    def _output(
        self, name: str, value: Any, fp32_outputs: bool, computed: bool, handed: set[int]
    ) -> Any:
        """An output the caller owns: a writeable array, never shared with the program."""
        if isinstance(value, str) or not isinstance(value, np.ndarray):
            return value
        dtype = storage_shape(self._plan.output_types[name])[1]
        if dtype == "fp16" and not fp32_outputs:
            return narrow_to_float16(value)
        if computed and value.flags.owndata and id(value) not in handed:
            # made by this run and not handed out twice: no copy needed
            handed.add(id(value))
            value.flags.writeable = True
            return value
        return value.copy()


def _loop(plan: Plan) -> tuple[tuple[Any, ...], ...]:
    """What a run reads of each step of ``plan``, unpacked once (see SimProgram.__init__)."""
    out = []
    for step in plan.steps:
        positional, known, dynamic = _call(step)
        gathers = _gathers(step)
        out.append((step, positional, known, dynamic, gathers, _fused(step), step.variadic,
                    step.outputs[0] if len(step.outputs) == 1 else None, step.frees,
                    _reads(positional, gathers), step.kernel))  # fmt: skip
    return tuple(out)


def _plain_inputs(plan: Plan) -> tuple[tuple[str, tuple[int, ...], bool], ...] | None:
    """(name, shape, fp16) of each input when all are fp16 or fp32 tensors of static shapes
    (the feeds' short path), else None."""
    plain = []
    for b in plan.inputs:
        pattern, dtype = storage_shape(b.type)
        if dtype not in ("fp16", "fp32") or not all(type(d) is int for d in pattern):
            return None
        plain.append((b.name, tuple(pattern), dtype == "fp16"))
    return tuple(plain)


def _spec(entry: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What ``_native.run_steps`` needs to run a step of the loop as the Python loop's common
    path does (its kernel on positional values, one result of a static shape, checked,
    rounded, stored), or None for the others (keywords, fused operands, several or symbolic
    results): the Python loop runs those, and the steps whose operands it would gather."""
    _, positional, _, _, gathers, fused, _, single, frees, _, kernel = entry
    if positional is None or fused is not None or single is None:
        return None
    if single.shape is None or len(positional) > RUN_ARGS:
        return None
    slots = tuple(slot for slot, _ in positional)
    values = tuple(value for _, value in positional)
    return (kernel, slots, values, single.slot, single.storage, single.shape, single.round,
            tuple(frees), GATHER_MIN if gathers else 0)  # fmt: skip


def _reads(positional: Any, gathers: bool) -> tuple[int, ...] | None:
    """The slots of a step's positional arguments when they are one or two runtime values
    taken as they are (the run loop's shortest path), else None."""
    if positional is None or gathers or not 1 <= len(positional) <= 2:
        return None
    if any(slot == NO_SLOT for slot, _ in positional):
        return None
    return tuple(slot for slot, _ in positional)


def _gathers(step: Step) -> bool:
    """An elementwise step whose result is rounded (and so made C-contiguous whatever the
    kernel returns): a transposed operand is gathered first, 6x faster than numpy's
    arithmetic walking it, with the same values element by element."""
    single = step.outputs[0] if len(step.outputs) == 1 else None
    return (
        single is not None
        and single.round
        and not step.variadic
        and getattr(step.kernel, "elementwise", False)
    )


FUSE_MIN = 4096  # elements: below, the operand checks cost more than the pass saved


def _fused(step: Step) -> int | None:
    """The C extension's fused code of an arithmetic step whose (large) result is rounded
    (see fp16.binary_rounded), given its two operands positionally; else None."""
    code = getattr(step.kernel, "fused", None)
    single = step.outputs[0] if len(step.outputs) == 1 else None
    if code is None or single is None or not single.round or step.variadic:
        return None
    if single.shape is None or math.prod(single.shape) < FUSE_MIN:
        return None
    return code if len(step.dynamic) + len(step.known) == 2 else None


def _call(step: Step) -> tuple[Any, Any, Any]:
    """(positional arguments as (slot, value) pairs or None, known keywords, dynamic
    keywords): positional when the step's arguments are exactly its kernel's leading
    parameters (no variadic ones), so a call builds no keyword dict."""
    given = {key: (NO_SLOT, value) for key, value in step.known.items()}
    given.update((key, (slot, None)) for key, slot in step.dynamic)
    names = _parameters(step.kernel)
    if step.variadic or names is None or set(names[: len(given)]) != set(given):
        return None, dict(step.known), step.dynamic
    return tuple(given[name] for name in names[: len(given)]), dict(step.known), step.dynamic


def _parameters(kernel: Any) -> tuple[str, ...] | None:
    """A kernel's parameter names in order, when all can be passed positionally."""
    try:
        params = inspect.signature(kernel).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return None
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        return None
    return tuple(p.name for p in params)


def run_function(
    program: MilProgram,
    feeds: Mapping[str, Any],
    *,
    function: str = "main",
    base_dir: str | os.PathLike[str] | None = None,
) -> dict[str, np.ndarray]:
    """Load ``function`` of ``program`` and run it once on ``feeds``."""
    return SimProgram(program, base_dir, function=function).run(feeds)
