"""The decode program's KV cache as session state: each layer's ``k_cache_<l>_next`` and
``v_cache_<l>_next`` outputs bound to its ``k_cache_<l>``/``v_cache_<l>`` inputs, so the
cache stays resident between steps (on sim, on the engine segment's fp16 surface) and
callers feed only the token, its position and the masks."""

from __future__ import annotations

from typing import Any


def state_bindings(layers: int) -> dict[str, str]:
    """Decode-program input -> the output that replaces it after each step."""
    return {f"{kind}_cache_{i}": f"{kind}_cache_{i}_next"
            for i in range(layers) for kind in ("k", "v")}  # fmt: skip


def open_session(compiled: Any, backend: str, layers: int) -> Any:
    """A `anekit.runtime.session.Session` over the compiled decode program, cache bound."""
    return compiled.program.session(backend, state=state_bindings(layers))
