"""The decode program's KV cache as session state: each layer's ``k_cache_<l>_next`` and
``v_cache_<l>_next`` outputs bound to its ``k_cache_<l>``/``v_cache_<l>`` inputs, so the
cache stays resident between steps and callers feed only the token, position and masks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def state_bindings(layers: int) -> dict[str, str]:
    """Decode-program input -> the output that replaces it after each step."""
    return {f"{kind}_cache_{i}": f"{kind}_cache_{i}_next"
            for i in range(layers) for kind in ("k", "v")}  # fmt: skip


class HostSession:
    """Output->input binding done on the host, for a Program without resident sessions."""

    def __init__(self, program: Any, backend: str, state: Mapping[str, str]):
        self._program, self._backend = program, backend
        self._bindings = dict(state)
        self._state: dict[str, np.ndarray] = {}

    def seed(self, values: Mapping[str, np.ndarray]) -> None:
        self._state.update(values)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        out = self._program.run({**feeds, **self._state}, self._backend)
        for name, output in self._bindings.items():
            self._state[name] = out.pop(output)
        return out

    def read(self, name: str) -> np.ndarray:
        return self._state[name]


def open_session(compiled: Any, backend: str, layers: int) -> Any:
    """A session over the compiled decode program with its cache bound as state."""
    return HostSession(compiled.program, backend, state_bindings(layers))
