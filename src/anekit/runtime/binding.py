"""The engine's binding rules for a program's I/O surfaces (Orion constraints #2-#4
and #18-#20), checked on a bundle and modelled byte for byte by :class:`Surfaces`.

- all input surfaces of a program have one allocation size, and so do all output surfaces
  (#18, #2): a session allocates every surface of an engine segment at one size;
- surfaces are bound to the program's inputs (and outputs) in alphabetical order of their
  MIL names (#19, #3): a program that declares them in another order would be fed the
  wrong data by a runtime that passes surfaces in declaration order, so it is refused;
- the engine reads a surface as packed data from byte 0, whatever its size (#20): values
  are written and read at the start of the surface;
- no surface is smaller than the minimum (#4, ``limits.min_io_bytes``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from anekit import targets
from anekit.errors import FormatError, TargetError
from anekit.formats import mil
from anekit.formats.bundle import SegmentEntry, SegmentIO
from anekit.simulator.fp16 import contiguous, narrow_into, widen_fp16
from anekit.simulator.values import STORAGE

# the element types an engine port binds (a surface holds them little-endian, packed)
SURFACE_DTYPES = ("bool", "fp16", "fp32", "int8", "int32", "uint8")


@functools.lru_cache(maxsize=4096)
def port_bytes(io: SegmentIO) -> int:
    """The packed size of a port's value in the program's shape and dtype (asked every
    step: remembered per port)."""
    return math.prod(io.mil_shape) * mil.dtype_info(io.mil_dtype).itemsize


def min_surface_bytes(target_name: str) -> int:
    """The target's minimum surface; for a program of unknown target the largest any chip
    needs (a surface that large is accepted everywhere)."""
    try:
        return targets.get(target_name).limits.min_io_bytes
    except TargetError:
        return max(targets.get(n).limits.min_io_bytes for n in targets.names())


def check_engine_segment(
    segment: SegmentEntry, program: mil.MilProgram, min_bytes: int, where: str
) -> int:
    """Refuse an engine segment whose I/O breaks a binding rule; returns the one size every
    surface of the segment gets (its input and output allocations' maximum)."""
    function = program.function(segment.function)
    at = f"{where}: segment {segment.index}"
    for kind, names, rule in (
        ("inputs", [b.name for b in function.inputs], "#19"),
        ("outputs", list(function.outputs), "#3"),
    ):
        if names != sorted(names):
            raise FormatError(
                f"the program declares its {kind} in the order {names}; the engine binds "
                f"surfaces in alphabetical order of their names (Orion {rule}), so they would "
                "receive each other's data",
                where=at,
                hint="declare inputs and return outputs sorted by name (anekit compile does)",
            )
    sizes = []
    for kind, ports, alloc, rule in (
        ("input", segment.inputs, segment.input_alloc_bytes, "#18"),
        ("output", segment.outputs, segment.output_alloc_bytes, "#2"),
    ):
        if not ports:
            continue
        if alloc is None:
            raise FormatError(
                f"an engine segment without an {kind} allocation size: the engine needs every "
                f"{kind} surface of a program allocated at one size (Orion {rule})",
                where=at,
            )
        if alloc < min_bytes:
            raise FormatError(
                f"{kind} surfaces of {alloc} bytes are below the engine's minimum surface of "
                f"{min_bytes} bytes (Orion #4)",
                where=at,
                hint="pad the last axis to at least 16 (anekit compile does)",
            )
        for io in ports:
            if port_bytes(io) > alloc:
                raise FormatError(
                    f"{kind} '{io.mil_name}' needs {port_bytes(io)} bytes, more than the "
                    f"{alloc}-byte allocation every {kind} surface shares (Orion {rule})",
                    where=at,
                )
        sizes.append(alloc)
    return max(sizes, default=min_bytes)


class PinnedInputs:
    """Inputs filled outside the steps: state aliased to an output, or an input written
    once (an adapter). Subclasses keep ``_fixed`` and define ``write_input``."""

    _fixed: set[str]

    def write_input(self, name: str, array: np.ndarray) -> None:
        raise NotImplementedError

    def pin(self, input_name: str, array: np.ndarray) -> None:
        """Write an input that stays the same from step to step (an adapter) once."""
        self.write_input(input_name, array)
        self._fixed.add(input_name)

    def fixed(self, input_name: str) -> bool:
        """The input's surface is filled outside the steps (aliased state, pinned input)."""
        return input_name in self._fixed


class Surfaces(PinnedInputs):
    """The I/O surfaces of one engine program: one byte buffer per port, all of one size,
    bound in alphabetical order of the ports' MIL names.

    Values are written packed from byte 0 and read back the same way. ``alias`` binds an
    input port to an output port's surface (e5rt-reference's output-to-input aliasing): what a
    step writes there, the next step reads, without leaving the surface.

    The rules are checked once, when the session binds the program
    (:func:`check_engine_segment`); each port's packed view of its surface (its value's
    dtype and shape at byte 0) is made here once too, so a step only converts values.

    A value a session already holds in the simulator's storage form (fp16 values as
    float32: a segment's result, or a feed it has rounded) is kept beside the surface and
    converted into its fp16 bytes only when the bytes are read (:meth:`read_input`,
    :meth:`read_output`, :meth:`read_inputs`): the round trip through fp16 is exact for
    such values, so a step that hands results from segment to segment in the same form,
    and resident state from step to step, never converts them (:meth:`stored_inputs`).
    """

    def __init__(self, inputs: Sequence[SegmentIO], outputs: Sequence[SegmentIO], size: int):
        self.size = size
        self.inputs = {io.mil_name: io for io in sorted(inputs, key=lambda io: io.mil_name)}
        self.outputs = {io.mil_name: io for io in sorted(outputs, key=lambda io: io.mil_name)}
        self._in = {n: np.zeros(size, np.uint8) for n in self.inputs}
        self._out = {n: np.zeros(size, np.uint8) for n in self.outputs}
        self._in_views = {n: _packed(self._in[n], io) for n, io in self.inputs.items()}
        self._out_views = {n: _packed(self._out[n], io) for n, io in self.outputs.items()}
        self._seen = MappingProxyType(self._in_views)  # read-only, follows alias()
        self._aliased: dict[str, str] = {}  # input -> the output whose surface it reads
        self._paired: dict[str, str] = {}  # input -> the output it swaps surfaces with
        # values not yet converted into their surface's bytes (storage form, read-only)
        self._in_held: dict[str, np.ndarray] = {}
        self._out_held: dict[str, np.ndarray] = {}

        self._fixed: set[str] = set()  # inputs not written per step: aliased or pinned

    def alias(self, input_name: str, output_name: str) -> None:
        self._in_held.pop(input_name, None)
        self._in[input_name] = self._out[output_name]
        self._in_views[input_name] = _packed(self._in[input_name], self.inputs[input_name])
        self._aliased[input_name] = output_name
        self._fixed.add(input_name)

    def pair(self, input_name: str, output_name: str) -> None:
        """Double-buffer a state: the input keeps a surface of its own, the output writes
        the other, and :meth:`swap` exchanges them once a step's value is accepted. Until
        then the input still reads the previous value: a step can be discarded."""
        self._paired[input_name] = output_name
        self._fixed.add(input_name)

    def swap(self, input_name: str) -> None:
        """The output's surface becomes the paired input's, and the input's old surface
        the output's spare (what it holds is stale: the next step writes it)."""
        output_name = self._paired[input_name]
        self._in[input_name], self._out[output_name] = self._out[output_name], self._in[input_name]
        self._in_views[input_name], self._out_views[output_name] = (
            self._out_views[output_name], self._in_views[input_name],
        )  # fmt: skip
        held = self._out_held.pop(output_name, None)
        stale = self._in_held.pop(input_name, None)
        if held is not None:
            self._in_held[input_name] = held
        if stale is not None:
            self._out_held[output_name] = stale

    def write_input(self, name: str, array: np.ndarray) -> None:
        self._forget_input(name)
        _write(self._in_views[name], array, self.inputs[name])

    def write_output(self, name: str, array: np.ndarray) -> None:
        """Write a segment's result: kept in its storage form until the bytes are read."""
        io = self.outputs[name]
        if _storable(array, io):
            self._out_held[name] = contiguous(array)
        else:
            self._out_held.pop(name, None)
            _write(self._out_views[name], array, io)

    def hold_input(self, name: str, array: np.ndarray) -> None:
        """Fill an input with a value already in the port's storage form (a held result,
        or a feed rounded to fp16): its bytes are written only when read."""
        if not _storable(array, self.inputs[name]) or name in self._aliased:
            self.write_input(name, array)  # an aliased input's bytes are its output's too
            return
        self._forget_input(name)
        self._in_held[name] = contiguous(array)

    def copy_input(self, name: str, packed: np.ndarray) -> None:
        """Fill an input with a value already packed on another surface in the port's
        form (a producing engine segment's output): its bytes, as they are."""
        self._forget_input(name)
        np.copyto(self._in_views[name], packed)

    def hand_over(self, name: str, producer: Surfaces, output_name: str) -> None:
        """Fill an input with what ``producer``'s output holds, in the same form: its
        bytes as they are, or the value not yet converted into them."""
        held = producer._out_held.get(output_name)
        if held is None or name in self._aliased:
            self.copy_input(name, producer.read_output(output_name))
        else:
            self._forget_input(name)
            self._in_held[name] = held

    def read_input(self, name: str) -> np.ndarray:
        self._settle_input(name)
        return self._in_views[name]

    def read_output(self, name: str) -> np.ndarray:
        held = self._out_held.pop(name, None)
        if held is not None:
            _write(self._out_views[name], held, self.outputs[name])
        return self._out_views[name]

    def read_inputs(self) -> Mapping[str, np.ndarray]:
        """What the engine sees: each input read packed from byte 0 of its surface."""
        for name in self.inputs:
            self._settle_input(name)
        return self._seen

    def stored_inputs(self) -> dict[str, np.ndarray]:
        """Each input in the simulator's storage form (fp16 widened to float32): the value
        held beside the surface where there is one, else the surface's bytes converted."""
        out = {}
        for name, io in self.inputs.items():
            held = self._in_held.get(name)
            if held is None and name in self._aliased:
                held = self._out_held.get(self._aliased[name])
            out[name] = held if held is not None else from_surface(self._in_views[name], io)
        return out

    def _settle_input(self, name: str) -> None:
        """Convert a held input (or the output it is aliased to) into its bytes."""
        held = self._in_held.pop(name, None)
        if held is not None:
            _write(self._in_views[name], held, self.inputs[name])
        elif name in self._aliased:
            self.read_output(self._aliased[name])

    def _forget_input(self, name: str) -> None:
        """The input's bytes are about to be written: a held value is stale (an aliased
        input shares its output's bytes, so the output's is too)."""
        self._in_held.pop(name, None)
        if name in self._aliased:
            self._out_held.pop(self._aliased[name], None)


def _storable(array: np.ndarray, io: SegmentIO) -> bool:
    """``array`` can stand for the port's bytes: fp16 values as float32 of the port's shape
    (a round trip through fp16 returns them bit for bit). It is held C-contiguous, as a
    read off the surface would be: kernels take other paths for strided inputs (numpy's
    BLAS instead of the C GEMM), whose sums can differ in the last bit."""
    return (
        io.mil_dtype == "fp16"
        and type(array) is np.ndarray
        and array.dtype == np.float32
        and array.shape == io.mil_shape
    )


def from_surface(array: np.ndarray, io: SegmentIO) -> np.ndarray:
    """A value read off a surface in the simulator's storage form (fp16 widened exactly)."""
    if io.mil_dtype == "fp16":
        return widen_fp16(array)
    return np.array(array, dtype=STORAGE[io.mil_dtype])


def _packed(surface: np.ndarray, io: SegmentIO) -> np.ndarray:
    """The port's value as it lies packed from byte 0 of ``surface`` (a view)."""
    return (
        surface[: port_bytes(io)]
        .view(mil.dtype_info(io.mil_dtype).little_endian)
        .reshape(io.mil_shape)
    )


def _write(view: np.ndarray, array: np.ndarray, io: SegmentIO) -> None:
    data = np.asarray(array)
    if data.shape != io.mil_shape:
        raise FormatError(
            f"port '{io.mil_name}' takes {io.mil_dtype}{list(io.mil_shape)}, "
            f"was given {list(data.shape)}"
        )
    if io.mil_dtype == "fp16":
        narrow_into(data, view)  # fp16 bits written in place, as numpy's cast would
    else:
        view[...] = data  # cast in place, no temporary
