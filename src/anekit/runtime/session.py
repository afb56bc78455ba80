"""`Session`: a program loaded once on a backend, with state that stays between steps.

``state`` binds model inputs to the model outputs that feed them back (e5rt-reference section
2.5.1, output-to-input aliasing): after every step the output's value becomes the input's.
What a session does on a backend follows what the backend declares
(`anekit.runtime.backends.Capabilities`). On a backend with ``resident_state`` (``sim``) an
engine segment's I/O lives in surfaces modelled byte for byte on the engine's binding rules
(:mod:`anekit.runtime.binding`); on one with ``aliasing`` (``ane``) the runner is the
engine's own surfaces. A state whose input and output are ports of
the same engine segment has its input bound to the output's surface, so it stays there in
the engine's fp16 form from step to step and is read back only when asked. Other state
(crossing segments, or on a CPU segment) is handed from step to step in the producing
program's storage form, never converted to the caller's dtype or stripped of padding.

``guard`` names an output that decides whether a step's state is kept: when any element of
it is NaN or infinite, the step's next values are discarded and every state keeps the value
it had (a training step whose gradients overflowed, as torch's GradScaler skips it). A
guarded state on an engine surface is double-buffered instead of aliased: the step writes
its next value to a second surface, which becomes the input's only when the step is kept.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit import budget, lora
from anekit.errors import AnekitError, InputError
from anekit.formats.bundle import SegmentIO, Source
from anekit.ir.dtypes import to_dtype
from anekit.ir.graph import Value
from anekit.ir.interpret import coerce_feed
from anekit.runtime import backends
from anekit.runtime.binding import (
    Surfaces,
    check_engine_segment,
    from_surface,
    min_surface_bytes,
)
from anekit.runtime.program import check_feeds, from_program, to_program
from anekit.simulator.fp16 import round_to_fp16
from anekit.simulator.values import STORAGE

if TYPE_CHECKING:
    from anekit.runtime.program import Program

# a value between segments: an array in its producer's storage form with that producer's
# port, or a caller's array (port None)
Held = tuple[np.ndarray, SegmentIO | None]
_STEP_OVERHEAD = 512  # bytes a kept step costs besides its arrays (the dict, array headers)


class Session:
    """Run a program step after step with resident state; see :meth:`Program.session`."""

    def __init__(
        self,
        program: Program,
        backend: str,
        state: Mapping[str, str] | None = None,
        guard: str | None = None,
    ):
        self.program = program
        self.backend = backend
        self.state = dict(state or {})
        self.guard = guard
        self.kept = True  # whether the last step's state was kept (see guard)
        self._check_state()
        self._caps = caps = backends.get(backend).capabilities
        if self.state and not caps.state:
            raise AnekitError(
                f"backend '{backend}' does not declare session state (Capabilities.state), "
                f"so it cannot carry {sorted(self.state)} from step to step",
                hint="run this backend without state (program.run, or a session without "
                "state=), or choose one of: " + ", ".join(backends.stateful_backends()),
            )
        runners = program.runners(backend)  # loaded now: errors surface here
        # an engine segment's surfaces: the engine's own buffers (a backend declaring
        # aliasing, whose runners are `EngineBuffers`) or modelled ones (resident_state)
        self._surfaces: list[Any] = [None] * len(program.segments)
        self._aliases: dict[int, list[tuple[str, str]]] = {}  # segment -> (input, output)
        self._pinned: dict[int, set[str]] = {}  # segment -> inputs written once
        min_bytes = min_surface_bytes(program.target.name)
        for seg, mil_program in zip(program.segments, program.programs, strict=True):
            if seg.device != "ane":
                continue
            if caps.aliasing:
                self._surfaces[seg.index] = runners[seg.index]
            elif caps.resident_state:
                size = check_engine_segment(seg, mil_program, min_bytes, program.where)
                self._surfaces[seg.index] = Surfaces(seg.inputs, seg.outputs, size)
        # an engine segment's output port (by identity; the port is kept, so its id is not
        # reused) -> its segment: a consumer of the same form copies the value's bytes
        # from that output surface
        self._producers = {
            id(io): (seg.index, io)
            for seg in program.segments
            if isinstance(self._surfaces[seg.index], Surfaces)
            for io in seg.outputs
        }
        self._resident: dict[str, tuple[int, SegmentIO]] = {}  # state -> its aliased surface
        self._paired: dict[int, list[tuple[str, str]]] = {}  # the same, double-buffered
        self._held: dict[str, Held] = {}
        self._bind_state()
        ports = {p.name: p for p in program.inputs}
        self.seed({n: np.zeros(ports[n].shape, to_dtype(ports[n].dtype).numpy) for n in self.state})
        targets = set(self.state.values())
        self._outputs = [p for p in program.outputs if p.name not in targets]
        # adapter inputs (anekit.lora) are bound by set_adapter, not fed each step
        self._adapter_ports = {
            n: ports[n] for pair in lora.adapter_inputs(list(ports)).values() for n in pair
        }
        self._bound: dict[str, Held] = {}
        self.set_adapter(None)
        self._feed_ports = {
            p.name: p
            for p in program.inputs
            if p.name not in self.state and p.name not in self._adapter_ports
        }

    # --- state ---------------------------------------------------------------------------

    def _check_state(self) -> None:
        ins = {p.name: p for p in self.program.inputs}
        outs = {p.name: p for p in self.program.outputs}
        for name, target in self.state.items():
            if name not in ins:
                raise AnekitError(
                    f"state '{name}' is not an input of the program",
                    hint=f"inputs: {', '.join(ins)}",
                )
            if target not in outs:
                raise AnekitError(
                    f"state '{name}' is fed back from '{target}', which is not an output",
                    hint=f"outputs: {', '.join(outs)}",
                )
            a, b = ins[name], outs[target]
            if (a.shape, a.dtype) != (b.shape, b.dtype):
                raise AnekitError(
                    f"state '{name}' is {a.dtype}{list(a.shape)} but '{target}', which feeds "
                    f"it back, is {b.dtype}{list(b.shape)}"
                )
        if len(set(self.state.values())) != len(self.state):
            raise AnekitError("two states are fed back from the same output")
        if self.guard is not None and (self.guard not in outs or self.guard in self.state.values()):
            raise AnekitError(
                f"the guard '{self.guard}' is not an output of the program that is not state",
                hint=f"outputs: {', '.join(n for n in outs if n not in self.state.values())}",
            )

    def _bind_state(self) -> None:
        """Alias each state's input port to its output's surface where both are ports of
        one engine segment in the same form."""
        outs = {p.name: p.source for p in self.program.outputs}
        for name, target in self.state.items():
            src = outs[target]
            assert src is not None
            if src.segment is None:
                continue
            consumers = [
                (seg.index, io)
                for seg in self.program.segments
                for io in seg.inputs
                if io.source == Source(input=name)
            ]
            surfaces = self._surfaces[src.segment]
            producer = next(
                io for io in self.program.segments[src.segment].outputs if io.value == src.value
            )
            if (
                surfaces is not None
                and len(consumers) == 1
                and consumers[0][0] == src.segment
                and _same_form(consumers[0][1], producer)
            ):
                ports = (consumers[0][1].mil_name, producer.mil_name)
                if self.guard is None:
                    surfaces.alias(*ports)
                    self._aliases.setdefault(src.segment, []).append(ports)
                elif isinstance(surfaces, Surfaces) or self._caps.paired_surfaces:
                    surfaces.pair(*ports)
                    self._paired.setdefault(src.segment, []).append(ports)
                else:  # buffers that can only alias in place: a step could not be undone
                    continue
                self._resident[name] = (src.segment, consumers[0][1])

    @property
    def resident(self) -> tuple[str, ...]:
        """The states that stay on their engine surface between steps."""
        return tuple(self._resident)

    def seed(self, values: Mapping[str, Any]) -> None:
        """Set the value of some states (a new session's states start at zero)."""
        if not isinstance(values, Mapping):
            raise InputError(f"seed takes a mapping of state name to array, not "
                             f"{type(values).__name__}", hint=f"states: {', '.join(self.state) or 'none'}")  # fmt: skip
        unknown = sorted(set(values) - set(self.state))
        if unknown:
            raise InputError(
                f"{unknown} are not states of this session",
                hint=f"states: {', '.join(self.state) or 'none'}",
            )
        ports = {p.name: p for p in self.program.inputs}
        for name, value in values.items():
            p = ports[name]
            array = coerce_feed(Value(name, p.shape, to_dtype(p.dtype)), value)
            found = self._resident.get(name)
            if found is None:
                self._held[name] = (array, None)
            else:
                index, io = found
                surfaces = self._surfaces[index]
                assert surfaces is not None
                surfaces.write_input(io.mil_name, _store(io, array))

    def read(self, name: str) -> np.ndarray:
        """The current value of state ``name`` (read from its surface only now)."""
        if name not in self.state:
            raise InputError(
                f"'{name}' is not a state of this session",
                hint=f"states: {', '.join(self.state) or 'none'}",
            )
        found = self._resident.get(name)
        if found is not None:
            index, io = found
            surfaces = self._surfaces[index]
            assert surfaces is not None
            return from_program(from_surface(surfaces.read_input(io.mil_name), io), io)
        array, io = self._held[name]
        return _held_to_caller((array, io))

    # --- adapters ------------------------------------------------------------------------

    def set_adapter(self, adapter: lora.Adapter | Mapping[str, Any] | None) -> None:
        """Bind a LoRA adapter's matrices (an `anekit.lora.Adapter`, a mapping of layer to
        (A, B), or None: all zero, the base model); they stay bound for every step until
        the next call, written once to their engine surfaces."""
        if not self._adapter_ports:
            if adapter is None:
                return
            raise InputError(
                "this program takes no adapter", hint="compile it with lora=anekit.LoRA(...)"
            )
        if adapter is None:
            feeds = {n: np.zeros(p.shape, np.float32) for n, p in self._adapter_ports.items()}
        else:
            feeds = lora.bind(adapter, self._adapter_ports, self.program.lora_alpha)
        for name, value in feeds.items():
            p = self._adapter_ports[name]
            array = coerce_feed(Value(name, p.shape, to_dtype(p.dtype)), value)
            self._bound[name] = (array, None)
            for seg in self.program.segments:
                surfaces = self._surfaces[seg.index]
                for io in seg.inputs:
                    if surfaces is not None and io.source == Source(input=name):
                        surfaces.pin(io.mil_name, _store(io, array))
                        self._pinned.setdefault(seg.index, set()).add(io.mil_name)

    # --- running -------------------------------------------------------------------------

    def run(self, feeds: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        """One step: returns the outputs that are not state."""
        return self._step(self._coerce(feeds or {}))

    def run_steps(
        self, k: int, feeds: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    ) -> dict[str, np.ndarray]:
        """``k`` steps in one call; ``feeds`` is one mapping for every step or a sequence of
        ``k``. Returns each non-state output stacked over the steps (shape ``(k, ...)``)."""
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise InputError(f"run_steps needs a step count of at least 1, not {k!r}")
        k = int(k)
        # the outputs of every step are kept, then stacked: checked before the first step
        per_step = sum(
            int(np.prod(p.shape, dtype=np.int64)) * to_dtype(p.dtype).numpy.itemsize + _STEP_OVERHEAD
            for p in self._outputs
        )
        budget.check(2 * k * per_step, f"run_steps({k}) keeping and stacking its outputs")
        steps: Iterable[Mapping[str, np.ndarray]]
        if feeds is None or isinstance(feeds, Mapping):
            steps = itertools.repeat(self._coerce(feeds or {}), k)
        elif isinstance(feeds, list | tuple):
            if len(feeds) != k:
                raise InputError(
                    f"run_steps({k}) was given {len(feeds)} feed mappings",
                    hint="pass one mapping for every step, or a sequence of exactly k",
                )
            steps = [self._coerce(_mapping(f, i)) for i, f in enumerate(feeds)]
        else:
            raise InputError(
                f"run_steps takes one feed mapping or a list of k, not {type(feeds).__name__}",
                hint="a generator of feeds: pass list(feeds)",
            )
        results = [self._step(f) for f in steps]
        return {p.name: np.stack([r[p.name] for r in results]) for p in self._outputs}

    def _coerce(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        _mapping(feeds, None)
        return check_feeds(
            self._feed_ports, feeds, "each step takes", "; state comes from the session"
        )

    def _step(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[tuple, Held] = {("input", n): (a, None) for n, a in feeds.items()}
        for name, held in (*self._held.items(), *self._bound.items()):
            env[("input", name)] = held
        # fetched each step: a weight update swaps in reloaded runners
        runners = self.program.runners(self.backend)
        for seg, runner, surfaces in zip(
            self.program.segments, runners, self._surfaces, strict=True
        ):
            # a runner that takes storage-form inputs as they are skips a rounding pass
            run = runner.run_stored if self._caps.stored_runs else runner.run
            i = seg.index
            if isinstance(surfaces, Surfaces):
                self._fill(seg, surfaces, env)
                results = run(surfaces.stored_inputs())
                for io in seg.outputs:
                    surfaces.write_output(io.mil_name, results[io.mil_name])
            else:
                args = {
                    io.mil_name: _feed(io, env[io.source.key])
                    for io in seg.inputs
                    if surfaces is None or not surfaces.fixed(io.mil_name)
                }
                if surfaces is None:
                    results = run(args)
                else:  # the engine's buffers
                    if surfaces is not runner:  # reloaded by a weight update
                        surfaces = self._rebind(i, surfaces, runner)
                    results = runner.run(args)
            for io in seg.outputs:
                env[(i, io.value)] = (results[io.mil_name], io)
        outs = {p.name: p.source for p in self.program.outputs}
        self.kept = self.guard is None or bool(np.isfinite(env[outs[self.guard].key][0]).all())
        if self.kept:
            for index, pairs in self._paired.items():
                for in_name, _ in pairs:
                    self._surfaces[index].swap(in_name)
            for name, target in self.state.items():
                if name not in self._resident:
                    self._held[name] = env[outs[target].key]
        else:
            # the held values stand; the surfaces that produced them hold the discarded
            # step's now, so they are no longer handed over from there
            for name, (array, src) in list(self._held.items()):
                if src is not None:
                    self._held[name] = (from_program(array, src), None)
        return {p.name: _held_to_caller(env[p.source.key]) for p in self._outputs}

    def _fill(self, seg: Any, surfaces: Surfaces, env: Mapping[tuple, Held]) -> None:
        """Write a modelled engine segment's inputs (those not aliased or pinned). A value
        that still lies, in the port's form, on the output surface of the engine segment
        that produced it is copied from there as its bytes, as chained programs hand it
        on: a value produced earlier in this step, or state produced in the previous step
        by a segment that has not run again yet (one that has holds the new value there).
        Anything else is converted from the held array into the port's form."""
        for io in seg.inputs:
            if surfaces.fixed(io.mil_name):
                continue
            key = io.source.key
            held = env[key]
            src = held[1]
            found = None if src is None else self._producers.get(id(src))
            producer = found[0] if found is not None and found[1] is src else None
            if key[0] == "input" and producer is not None and producer < seg.index:
                producer = None  # overwritten this step: the held array is the value
            if producer is not None and _same_form(src, io):
                surfaces.hand_over(io.mil_name, self._surfaces[producer], src.mil_name)
            else:
                surfaces.hold_input(io.mil_name, _feed(io, held))

    def _rebind(self, index: int, old: Any, new: Any) -> Any:
        """Carry resident state (aliased or double-buffered) and pinned inputs from a
        released engine program to the one that replaced it."""
        for in_name, out_name in self._aliases.get(index, []):
            value = old.read_input(in_name)
            new.alias(in_name, out_name)
            new.write_input(in_name, value)
        for in_name, out_name in self._paired.get(index, []):
            new.pair(in_name, out_name)
            new.write_input(in_name, old.read_input(in_name))
        for name in self._pinned.get(index, ()):
            new.pin(name, old.read_input(name))
        self._surfaces[index] = new
        old.release()  # its engine program slot is free again
        return new

    def __repr__(self) -> str:
        return (
            f"Session({self.program.manifest.model!r}, backend={self.backend!r}, "
            f"state={self.state}, resident={list(self._resident)})"
        )


def _mapping(feeds: Any, step: int | None) -> Mapping[str, Any]:
    if not isinstance(feeds, Mapping):
        which = "" if step is None else f" for step {step}"
        raise InputError(f"the feeds{which} are a {type(feeds).__name__}, not a mapping of "
                         "input name to array")  # fmt: skip
    return feeds


def _same_form(a: SegmentIO, b: SegmentIO) -> bool:
    form = ("mil_dtype", "mil_shape", "shape", "dtype")
    return all(getattr(a, f) == getattr(b, f) for f in form)


def _feed(io: SegmentIO, held: Held) -> np.ndarray:
    """A held value in the storage form of the port ``io``."""
    array, src = held
    if src is not None and _same_form(src, io):
        return array  # already in this port's form: no conversion
    return _store(io, array if src is None else from_program(array, src))


def _store(io: SegmentIO, caller: np.ndarray) -> np.ndarray:
    """A caller's value (checked by coerce_feed) in the port's storage form, fp16 rounded."""
    array = to_program(caller, io)
    if io.mil_dtype == "fp16":
        return round_to_fp16(np.array(array, dtype=np.float32, order="C"), in_place=True)
    return np.ascontiguousarray(array, dtype=STORAGE[io.mil_dtype])


def _held_to_caller(held: Held) -> np.ndarray:
    """A value the caller owns: a writeable array of its own (a runner's stored results are
    read-only and may be the program's own)."""
    array, io = held
    if io is None:
        return array.copy()
    out = from_program(array, io)
    return out if out is not array and out.flags.writeable else out.copy()
