"""What the exported artifact costs on a chip: prefill per bucket and one decode token, in
the cost model's terms, summing every chunk's functions (each chunk is at least one dispatch
per token; a chunk's CPU embedding segment counts too).

The cost model is calibrated on per-op measurements only; published whole-model figures
(README, "Exported LLMs") are checks of it, never inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def estimate_chunks(chunks: Sequence[Any], target: Any = None) -> dict[str, Any]:
    """``target`` another chip of the same engine generation (default: the compile target)."""
    from anekit.cost import estimate_compiled

    def cost(compiled: Any) -> tuple[float, int]:
        est = estimate_compiled(compiled, target)
        return est.total_ms, sum(1 for s in compiled.segments if s.device == "ane")

    decode = [cost(c.decode) for c in chunks]
    buckets = sorted(chunks[0].prefill)
    prefill = {s: [cost(c.prefill[s]) for c in chunks] for s in buckets}
    decode_ms = sum(ms for ms, _ in decode)
    name = target if isinstance(target, str) else (target or chunks[0].decode.target).name
    return {
        "target": name,
        "chunks": len(chunks),
        "decode_ms_per_token": decode_ms,
        "decode_tokens_per_s": 1e3 / decode_ms,
        "decode_dispatches": sum(n for _, n in decode),
        "prefill": {
            str(s): {
                "ms": sum(ms for ms, _ in prefill[s]),
                "tokens_per_s": s / sum(ms for ms, _ in prefill[s]) * 1e3,
                "dispatches": sum(n for _, n in prefill[s]),
            }
            for s in buckets
        },  # fmt: skip
    }
