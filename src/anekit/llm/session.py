"""The decode programs' KV cache as session state: each layer's ``k_cache_<l>_next`` and
``v_cache_<l>_next`` outputs bound to its ``k_cache_<l>``/``v_cache_<l>`` inputs, so the
cache stays resident between steps (on sim, on the engine segment's fp16 surface) and
callers feed only the token, its position and the masks. A model cut into chunks has one
session per chunk, each holding its own layers' cache."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def state_bindings(layers: Iterable[int]) -> dict[str, str]:
    """Decode-program input -> the output that replaces it after each step."""
    return {f"{kind}_cache_{i}": f"{kind}_cache_{i}_next" for i in layers for kind in ("k", "v")}


def open_session(compiled: Any, backend: str, layers: Iterable[int]) -> Any:
    """A `anekit.runtime.session.Session` over a compiled decode program, cache bound."""
    return compiled.program.session(backend, state=state_bindings(layers))
