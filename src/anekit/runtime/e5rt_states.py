"""An exported package's function on the engine through e5rt, its Core ML states resident.

Written to the documented e5rt interface (`anekit.runtime.e5rt`) and tested only against
the stand-in library (tests/runtime/test_e5rt_states.py); not yet run on Apple hardware.
The documented interface compiles a MIL file and binds named ports; it names no state API.
So each function is compiled as its own program ``main`` from the package's MIL with the
states lowered as the simulator lowers them (`anekit.simulator.states.without_states`): a
state is an input port and its update an output port, and the input port is bound once to
the output port's buffer (seed 004 section 2.5.1), so from one call of the function to the
next the state never leaves the engine's buffers. When another function (decode after
prefill) takes the state over, it is copied from the last writer's output buffers into the
new function's, once per hand-over, as an app's ``MLState`` is shared between functions.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import AnekitError
from anekit.formats.mil import MilTensorType, dtype_info, print_program
from anekit.formats.mlpackage import Package
from anekit.runtime import e5rt
from anekit.runtime.binding import SURFACE_DTYPES, min_surface_bytes
from anekit.simulator.states import without_states


@dataclass(frozen=True)
class _Port:
    """What `E5Program` reads of a port (the shape of a bundle's `SegmentIO`)."""

    mil_name: str
    mil_dtype: str
    mil_shape: tuple[int, ...]


class E5State:
    """A chunk's states on the engine: which function's buffers hold them now."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.shapes = shapes
        self.owner: E5StatefulFunction | None = None  # None: zeros, not on any buffer yet


class E5StatefulFunction:
    def __init__(self, package: Package, path: Path, name: str):
        function = package.program.function(name)
        plain, states, self.updates = without_states(function)
        self.states = {s: tuple(int(d) for d in t.shape) for s, t in states.items()}
        self.outputs = function.outputs
        self.inputs = tuple(b.name for b in function.inputs if b.name not in states)
        program = replace(package.program, functions=(replace(plain, name="main"),))
        ports = {b.name: _port(b.name, b.type) for b in plain.inputs}
        outs = {o: _port(o, plain.types()[o]) for o in plain.outputs}
        # the largest minimum surface of any chip: accepted everywhere
        surface = max(
            min_surface_bytes(""), *(_bytes(p) for p in (*ports.values(), *outs.values()))
        )
        self._stage = _stage(print_program(program), package.model_dir)
        # the staged MIL goes with this object (the engine program releases itself likewise)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._stage, ignore_errors=True)
        from anekit.runtime.backends.ane import compiler_cache

        try:
            self.engine = e5rt.E5Program(self._stage / "model.mil", ports.values(), outs.values(), surface,
                                         compiler_cache())  # fmt: skip
        except BaseException:
            shutil.rmtree(self._stage, ignore_errors=True)
            raise
        for state, output in self.updates.items():
            self.engine.alias(state, output)  # resident: each call reads what the last wrote

    def new_state(self) -> E5State:
        return E5State(dict(self.states))

    def run(self, feeds: dict[str, np.ndarray], state: E5State) -> dict[str, np.ndarray]:
        if state.owner is not self:
            self._take_over(state)
        for name in self.inputs:
            self.engine.write_input(name, np.asarray(feeds[name]))
        self.engine.execute()
        state.owner = self
        out = {}
        for name in self.outputs:
            value = self.engine.read_output(name)
            out[name] = value.astype(np.float32) if value.dtype == np.float16 else value
        return out

    def _take_over(self, state: E5State) -> None:
        """Copy the states into this function's buffers from the function that last wrote
        them (zeros for a new state)."""
        for name, shape in self.states.items():
            owner = state.owner
            if owner is None or name not in owner.updates:
                value = np.zeros(shape, np.float16)
            else:
                value = owner.engine.read_output(owner.updates[name])
            self.engine.write_input(name, value)

    def release(self) -> None:
        self.engine.release()
        self._cleanup()


def _port(name: str, t: Any) -> _Port:
    if not isinstance(t, MilTensorType) or t.dtype not in SURFACE_DTYPES:
        raise AnekitError(
            f"port '{name}' is {t}; the engine binds tensors of {', '.join(SURFACE_DTYPES)}"
        )
    return _Port(name, t.dtype, tuple(int(d) for d in t.shape))


def _bytes(port: _Port) -> int:
    return int(np.prod(port.mil_shape)) * dtype_info(port.mil_dtype).itemsize


def _stage(text: str, model_dir: Path) -> Path:
    """``model.mil`` beside a link to the package's ``weights/`` (``@model_path``)."""
    root = Path(tempfile.mkdtemp(prefix="anekit-e5rt-package-"))
    try:
        (root / "model.mil").write_text(text, encoding="utf-8")
        os.symlink((model_dir / "weights").resolve(), root / "weights")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root
