"""Load-time rewrite of elementwise chains: steps over one shape run as one fused C pass.

An optimizer update or an activation is a chain of elementwise ops over the same tensor; run
one by one, each op is a numpy pass over memory, a rounding pass and ~2 us of Python. Here
consecutive elementwise steps whose results share one static shape become one step whose
kernel runs them all block by block in the C extension (``_native.fused_run``), each op
computed in float32 and its result rounded to fp16 where the step's is, so every value has
the bits the separate steps give. Values read only inside the group never reach memory;
values read by other steps or returned by the program are written out.

Only ops whose results C reproduces bit for bit are fused (IEEE add, sub, mul, div and
sqrt; maximum, minimum, clip, relu and sigmoid_hard with numpy's NaN and signed-zero rules; abs;
comparisons, logical ops and select, with bools as 0/1 in the pass). Other ops
(transcendentals, whose numpy SIMD results differ from libm's) stay separate steps.

Where the CPU has AVX512-FP16 the pass may compute in fp16 lanes with the same bits
(_native.c says when). A group of one step stays that step, unless an operand broadcasts
along some axes (x [N, C, H, W] times a per-channel scale): numpy's broadcast loop and
rounding pass cost twice the C pass.

Groups: a fusable step joins the open group of its shape. Another step that reads values of
one open group waits to run right after it (a reshape of an updated weight does not end
the optimizer's chain); one that reads values of several is run after closing them; one
that reads none runs before the open groups. A fusable step that reads a waiting step's
value, or a value of a group of another shape, closes that group first. Every step thus
still runs after the values it reads are made.

Where the C pass does not run (no extension, no AVX2 and F16C) no groups are formed; a
group whose extension is switched off after loading (tests do) runs its steps with numpy.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from . import fp16, gemm, pieces, window_kernels
from .execute import NO_SLOT, Expect, Step
from .fp16 import GATHER_MIN, gathered, round_to_fp16
from .ops import REGISTRY

ENABLED = True  # read when a program loads; tests switch it off to compare with unfused runs

# the C extension's op codes (_native.c, fused_run)
(ADD, SUB, MUL, DIV, MAX, MIN, SQRT, ABS, EQ, NE, LT, LE, GT, GE, AND, OR, XOR, NOT,
 SELECT) = range(19)  # fmt: skip
_F32, _BOOL = np.dtype(np.float32), np.dtype(np.bool_)
_ZERO = np.zeros((), np.float32)
_ZERO.flags.writeable = False
_ONE = np.ones((), np.float32)
_ONE.flags.writeable = False
_TEMPORARIES = itertools.count()  # names of values computed inside one op

# An operand of an instruction: ("slot", n) a runtime value, ("known", array) a constant,
# ("tmp", n) a value computed inside one op (clip's maximum before its minimum).
Operand = tuple[str, Any]
# (op, round, result, a, b, c): c is select's condition, else a again (unused)
Instruction = tuple[int, bool, Operand, Operand, Operand, Operand]


def _binary(code: int) -> Callable[[dict[str, Operand], Operand, bool], list[Instruction]]:
    return lambda a, out, r: [(code, r, out, a["x"], a["y"], a["x"])]


def _unary(code: int) -> Callable[[dict[str, Operand], Operand, bool], list[Instruction]]:
    return lambda a, out, r: [(code, r, out, a["x"], a["x"], a["x"])]


def _clip(a: dict[str, Operand], out: Operand, r: bool) -> list[Instruction]:
    inner: Operand = ("tmp", next(_TEMPORARIES))  # the kernel's np.maximum result, unrounded
    return [(MAX, False, inner, a["x"], a["alpha"], a["x"]),
            (MIN, r, out, inner, a["beta"], inner)]  # fmt: skip


def _sigmoid_hard(a: dict[str, Operand], out: Operand, r: bool) -> list[Instruction]:
    """min(max(alpha * x + beta, 0), 1), rounded once at the end (activation.py)."""
    product: Operand = ("tmp", next(_TEMPORARIES))
    shifted: Operand = ("tmp", next(_TEMPORARIES))
    low: Operand = ("tmp", next(_TEMPORARIES))
    return [(MUL, False, product, a["alpha"], a["x"], a["alpha"]),
            (ADD, False, shifted, product, a["beta"], product),
            (MAX, False, low, shifted, ("known", _ZERO), shifted),
            (MIN, r, out, low, ("known", _ONE), low)]  # fmt: skip


# op -> its instructions, given its operands by parameter name, its result and whether the
# result is rounded; each mirrors the op's numpy kernel (ops/elementwise.py, activation.py)
_LOWER: dict[str, Callable[[dict[str, Operand], Operand, bool], list[Instruction]]] = {
    "add": _binary(ADD),
    "sub": _binary(SUB),
    "mul": _binary(MUL),
    "real_div": _binary(DIV),
    "maximum": _binary(MAX),
    "minimum": _binary(MIN),
    "sqrt": _unary(SQRT),
    "abs": _unary(ABS),
    "square": _unary(MUL),  # x * x
    "relu": lambda a, out, r: [(MAX, r, out, a["x"], ("known", _ZERO), a["x"])],
    "clip": _clip,
    "sigmoid_hard": _sigmoid_hard,
    "equal": _binary(EQ),
    "not_equal": _binary(NE),
    "less": _binary(LT),
    "less_equal": _binary(LE),
    "greater": _binary(GT),
    "greater_equal": _binary(GE),
    "logical_and": _binary(AND),
    "logical_or": _binary(OR),
    "logical_xor": _binary(XOR),
    "logical_not": _unary(NOT),
    "select": lambda a, out, r: [(SELECT, r, out, a["a"], a["b"], a["cond"])],
}
_COMPARISONS = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})
_LOGICAL = frozenset({"logical_and", "logical_or", "logical_xor", "logical_not"})


def _types_fit(op: str, operands: Mapping[str, np.dtype], result: np.dtype) -> bool:
    """The storage dtypes the C pass handles for ``op``: float32 arithmetic, comparisons of
    float32 giving bool, logical ops on bools, select of float32 or bool by a bool."""
    if op in _COMPARISONS:
        return result == _BOOL and all(d == _F32 for d in operands.values())
    if op in _LOGICAL:
        return result == _BOOL and all(d == _BOOL for d in operands.values())
    if op == "select":
        values = {operands["a"], operands["b"], result}
        return operands["cond"] == _BOOL and len(values) == 1 and result in (_F32, _BOOL)
    return result == _F32 and all(d == _F32 for d in operands.values())


def _reads(step: Step) -> list[int]:
    slots = [slot for _, slot in step.dynamic]
    slots += [slot for _, items in step.variadic for slot, _ in items if slot != NO_SLOT]
    return slots


def _lower(
    step: Step, shapes: Mapping[int, Any], storages: Mapping[int, Any]
) -> list[Instruction] | None:
    """The instructions of a step that can be fused, else None: an elementwise op with the
    registry's kernel and storage dtypes the C pass handles (_types_fit), one output of a
    static shape that its operands (of static shapes) broadcast to exactly."""
    lower = _LOWER.get(step.op)
    if lower is None or step.variadic or len(step.outputs) != 1:
        return None
    if step.kernel is not REGISTRY[step.op].kernel:
        return None
    e = step.outputs[0]
    if e.shape is None:
        return None
    operands: dict[str, Operand] = {}
    dtypes: dict[str, np.dtype] = {}
    operand_shapes = []
    for key, value in step.known.items():
        if not isinstance(value, np.ndarray):
            return None
        operands[key], dtypes[key] = ("known", value), value.dtype
        operand_shapes.append(value.shape)
    for key, slot in step.dynamic:
        if shapes.get(slot) is None or storages.get(slot) is None:
            return None
        operands[key], dtypes[key] = ("slot", slot), np.dtype(storages[slot])
        operand_shapes.append(tuple(shapes[slot]))
    if not _types_fit(step.op, dtypes, np.dtype(e.storage)):
        return None
    try:
        if np.broadcast_shapes(*operand_shapes) != tuple(e.shape):
            return None
        instructions = lower(operands, ("slot", e.slot), e.round)
    except (ValueError, KeyError):  # shapes that do not broadcast; a missing operand
        return None
    return instructions


def available() -> bool:
    """True when the C pass runs on this machine: the extension has it and the CPU has AVX2
    and F16C (elsewhere it computes nothing, and a group would only add its numpy path)."""
    fused_run = fp16._converter("fused_run")
    if fused_run is None:
        return False
    one = np.ones(1, np.float32)
    code = np.array([[ADD, 1, 1, 0, 0, 0]], np.int32)
    return fused_run(code, (one,), (np.empty(1, np.float32),), 0) is not None


FUSED_BLOCK = 1024  # values per block of the C pass (_native.c): pieces start on whole blocks
# values x ops from which the pass runs in pieces on two threads: handing pieces to the helper
# costs ~70 us (a 2-op pass over 131k values took 32 us alone, 74 in pieces; 7 ops over 1M
# values 1060 -> 644 us)
SPLIT_WORK = 1 << 21
BROADCAST_MIN = 4096  # values of a one-step group with a broadcast operand run as a fused pass
RUN_MIN = 64  # contiguous values per run below which a strided input is gathered first


def _walks_badly(value: np.ndarray) -> bool:
    """True when the C pass would read ``value`` (strided) in short runs: its last axis of
    more than one value is not contiguous, or short. A conv result in [N, C, H, W] order
    seen as NCHW (runs of H*W) is read in place; a transpose (runs of one) is not."""
    if value.flags.c_contiguous:
        return False
    run = 1
    for size, stride in zip(reversed(value.shape), reversed(value.strides), strict=True):
        if size == 1:
            continue
        if stride != run * value.itemsize:
            break
        run *= size
    return run < RUN_MIN


@dataclass
class _Group:
    shape: tuple[int, ...]
    members: list[Step] = field(default_factory=list)
    instructions: list[Instruction] = field(default_factory=list)
    after: list[Step] = field(default_factory=list)  # other steps waiting for its values

    def produced(self) -> list[int]:
        return [m.outputs[0].slot for m in self.members]


def fuse_elementwise(
    steps: Sequence[Step],
    keep: Iterable[int],
    shapes: Mapping[int, Any],
    storages: Mapping[int, Any],
) -> list[Step]:
    """``steps`` with runs of fusable elementwise steps replaced by fused steps (see the
    module's docstring); the steps as they are when fusion is off or not built."""
    if not ENABLED or not available():
        return list(steps)
    kept = set(keep)
    readers: dict[int, set[int]] = {}
    for step in steps:
        for slot in _reads(step):
            readers.setdefault(slot, set()).add(id(step))
    out: list[Step] = []
    groups: dict[tuple[int, ...], _Group] = {}  # open groups by shape
    owner: dict[int, _Group] = {}  # slot -> the open group it waits for
    waiting: set[int] = set()  # slots made by the steps waiting after a group

    def close(group: _Group) -> None:
        del groups[group.shape]
        for slot in group.produced():
            del owner[slot]
        for step in group.after:
            for e in step.outputs:
                del owner[e.slot]
                waiting.discard(e.slot)
        out.extend(_group_steps(group, kept, readers, shapes))
        out.extend(group.after)

    for step in steps:
        instructions = _lower(step, shapes, storages)
        shape = tuple(step.outputs[0].shape) if instructions is not None else None
        reads = _reads(step)
        read_groups = list({id(g): g for s in reads if (g := owner.get(s))}.values())
        if instructions is None:
            if len(read_groups) == 1:  # waits for that group, which may still grow
                read_groups[0].after.append(step)
                for e in step.outputs:
                    owner[e.slot] = read_groups[0]
                    waiting.add(e.slot)
                continue
            for group in read_groups:
                close(group)
            out.append(step)
            continue
        for group in read_groups:  # other shapes, or a waiting step's result: run first
            if group.shape != shape or any(s in waiting and owner[s] is group for s in reads):
                close(group)
        group = groups.setdefault(shape, _Group(shape))
        group.members.append(step)
        group.instructions.extend(instructions)
        owner[step.outputs[0].slot] = group
    for group in list(groups.values()):
        close(group)
    return out


def _broadcasts(group: _Group, shapes: Mapping[int, Any]) -> bool:
    """True when an operand of the group is neither one value nor of the group's shape (a
    per-channel scale of [N, C, H, W]) and the group has BROADCAST_MIN values or more."""
    size = math.prod(group.shape)
    if size < BROADCAST_MIN:
        return False
    for _, _, _, *operands in group.instructions:
        for kind, value in operands:
            if kind == "known":
                n = value.size
            elif kind == "slot" and value in shapes:
                n = math.prod(shapes[value])
            else:
                continue
            if 1 < n < size:
                return True
    return False


def _group_steps(
    group: _Group, kept: set[int], readers: Mapping[int, set[int]], shapes: Mapping[int, Any]
) -> list[Step]:
    """The fused step of a group (its one step as it was when it has one, unless an operand
    broadcasts along some axes: numpy's broadcast loop and rounding pass take 2x the C pass)."""
    if len(group.members) == 1 and not _broadcasts(group, shapes):
        return list(group.members)
    inside = {id(m) for m in group.members}
    outputs = [
        m.outputs[0]
        for m in group.members
        if m.outputs[0].slot in kept
        or not readers.get(m.outputs[0].slot, set()) <= inside
        or not readers.get(m.outputs[0].slot)
    ]
    kernel = FusedKernel.build(group, outputs, shapes)
    first = group.members[0]
    return [
        Step(
            first.index,
            "fused",
            f"{first.name} .. {group.members[-1].name} ({len(group.members)} ops)",
            kernel,
            {},
            tuple((f"in{k}", slot) for k, slot in enumerate(kernel.slots)),
            (),
            tuple(replace(e, round=False) for e in outputs),  # rounded by the kernel
        )
    ]


class FusedKernel:
    """A group's kernel: its instructions over registers (inputs, outputs, temporaries) for
    ``_native.fused_run``, and its steps for the numpy path."""

    def __init__(
        self,
        code: np.ndarray,
        slots: tuple[int, ...],
        known: tuple[np.ndarray, ...],
        temps: int,
        shape: tuple[int, ...],
        outputs: tuple[Expect, ...],
        members: tuple[Step, ...],
        gather: tuple[int, ...],
    ):
        self.code = code
        self.slots = slots  # runtime inputs, passed as in0, in1, ...
        self.known = known  # constant inputs, after them
        self.temps = temps
        self.shape = shape
        self.outputs = outputs
        self.members = members
        self.gather = gather
        # too little work for pieces on two threads: one pass on this thread
        self.small = math.prod(shape) * len(code) < SPLIT_WORK
        # and with one output, the call's shortest path (silero-vad's groups, where building
        # the results tuple and choosing the pieces cost ~1 us a call)
        self.alone = outputs[0].storage if len(outputs) == 1 and self.small else None
        # called with its runtime inputs positionally (the run loop reads this signature)
        self.__signature__ = inspect.Signature(
            [
                inspect.Parameter(f"in{k}", inspect.Parameter.POSITIONAL_ONLY)
                for k in range(len(slots))
            ]
        )

    @classmethod
    def build(
        cls, group: _Group, outputs: Sequence[Expect], shapes: Mapping[int, Any]
    ) -> FusedKernel:
        produced = set(group.produced())
        written = {e.slot for e in outputs}
        slots: list[int] = []
        known: list[np.ndarray] = []
        for _, _, _, a, b, c in group.instructions:
            for kind, value in (a, b, c):
                if kind == "slot" and value not in produced and value not in slots:
                    slots.append(value)
                elif kind == "known" and not any(value is k for k in known):
                    known.append(value)
        registers: dict[Any, int] = {("slot", s): i for i, s in enumerate(slots)}
        registers.update((("known", id(k)), len(slots) + i) for i, k in enumerate(known))
        first_temp = len(slots) + len(known) + len(outputs)
        registers.update((("slot", e.slot), len(slots) + len(known) + i)
                         for i, e in enumerate(outputs))  # fmt: skip

        def key(operand: Operand) -> Any:
            kind, value = operand
            return ("known", id(value)) if kind == "known" else operand

        last_read: dict[Any, int] = {}
        for n, (_, _, _, a, b, c) in enumerate(group.instructions):
            last_read[key(a)] = last_read[key(b)] = last_read[key(c)] = n
        free: list[int] = []
        temps = 0
        rows = []
        for n, (code, rounds, result, a, b, c) in enumerate(group.instructions):
            ra, rb, rc = registers[key(a)], registers[key(b)], registers[key(c)]
            for operand in {key(a), key(b), key(c)}:  # temporaries read for the last time
                if last_read[operand] == n and registers[operand] >= first_temp:
                    free.append(registers[operand])
            if key(result) not in registers:
                if not (result[0] == "slot" and result[1] in written) and free:
                    registers[key(result)] = free.pop()
                else:
                    registers[key(result)] = first_temp + temps
                    temps += 1
            rows.append((code, int(rounds), registers[key(result)], ra, rb, rc))
        code_array = np.array(rows, dtype=np.int32).reshape(-1, 6)
        code_array.flags.writeable = False
        # large inputs of the full shape, which may come strided (a transposed view): copied
        # in tiles first (fp16.gathered), as the pass's walk of a transpose misses the cache
        big = math.prod(group.shape) >= GATHER_MIN
        gather = tuple(k for k, s in enumerate(slots) if big and tuple(shapes[s]) == group.shape)
        return cls(code_array, tuple(slots), tuple(known), temps, group.shape, tuple(outputs),
                   tuple(group.members), gather)  # fmt: skip

    def __call__(self, *values: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]:
        """The group's outputs (made here: C-contiguous, rounded, of the group's shape)."""
        if self.gather:
            values = tuple(
                gathered(v) if k in self.gather and _walks_badly(v) else v
                for k, v in enumerate(values)
            )
        fused_run = fp16._converter("fused_run")  # read per call: tests switch _native off
        if fused_run is not None and self.alone is not None:
            out = np.empty(self.shape, self.alone)
            if fused_run(self.code, values + self.known, (out,), self.temps) is not None:
                return out
        elif fused_run is not None:
            results = tuple(np.empty(self.shape, e.storage) for e in self.outputs)
            if self._run(fused_run, values + self.known, results) is not None:
                return results if len(results) > 1 else results[0]
        return self.unfused(values)

    def _run(self, fused_run: Any, inputs: tuple[Any, ...], results: tuple[np.ndarray, ...]) -> Any:
        """The C pass over all values: in pieces of whole blocks on two threads when large
        and a CPU is idle (each block is computed alike whichever thread takes it)."""
        if self.small or not pieces.spare_cpu(gemm.THREADS):
            return fused_run(self.code, inputs, results, self.temps)
        size = results[0].size
        blocks = -(-size // FUSED_BLOCK)

        def run(lo: int, hi: int) -> Any:
            stop = min(hi * FUSED_BLOCK, size)
            return fused_run(self.code, inputs, results, self.temps, lo * FUSED_BLOCK, stop)

        done = pieces.run(run, blocks, window_kernels.PIECES)
        return None if any(d is None for d in done) else 0

    def unfused(self, values: tuple[np.ndarray, ...]) -> np.ndarray | tuple[np.ndarray, ...]:
        """The group's steps one by one with numpy, each result rounded as the run loop
        rounds it (the path without the C extension)."""
        env = dict(zip(self.slots, values, strict=True))
        for step in self.members:
            kwargs = dict(step.known)
            kwargs.update((key, env[slot]) for key, slot in step.dynamic)
            value = np.asarray(step.kernel(**kwargs))
            e = step.outputs[0]
            if e.round:
                value = round_to_fp16(value, in_place=value.flags.writeable and value.flags.owndata)
            value.flags.writeable = False
            env[e.slot] = value
        results = tuple(env[e.slot] for e in self.outputs)
        return results if len(results) > 1 else results[0]
