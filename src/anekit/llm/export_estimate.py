"""What the exported artifact costs on a chip: prefill per bucket and one decode token, in
the cost model's terms, summing every chunk's functions (each chunk is at least one dispatch
per token; a chunk's CPU embedding segment counts too).

The cost model is calibrated on per-op measurements only; published whole-model figures
(README, "Exported language models") are checks of it, never inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Cost = tuple[float, int]  # (ms, engine dispatches) of one function


def program_cost(compiled: Any, target: Any = None) -> Cost:
    """``target`` another chip of the same engine generation (default: the compile target)."""
    from anekit.cost import estimate_compiled

    est = estimate_compiled(compiled, target)
    return est.total_ms, sum(1 for s in compiled.segments if s.device == "ane")


def summarize(
    target: str, decode: Sequence[Cost], prefill: Mapping[int, Sequence[Cost]]
) -> dict[str, Any]:
    """Per-chunk costs (in chunk order) as the artifact's speeds."""
    decode_ms = sum(ms for ms, _ in decode)

    def bucket(s: int) -> dict[str, float]:
        ms = sum(m for m, _ in prefill[s])
        return {"ms": ms, "tokens_per_s": s / ms * 1e3, "dispatches": sum(n for _, n in prefill[s])}

    return {
        "target": target,
        "chunks": len(decode),
        "decode_ms_per_token": decode_ms,
        "decode_tokens_per_s": 1e3 / decode_ms,
        "decode_dispatches": sum(n for _, n in decode),
        "prefill": {str(s): bucket(s) for s in sorted(prefill)},
    }


def estimate_chunks(chunks: Sequence[Any], target: Any = None) -> dict[str, Any]:
    """The estimate of `anekit.llm.export.ChunkPrograms` (each program compiled on demand)."""
    decode, prefill = [], {}
    name = target.name if hasattr(target, "name") else target
    for chunk in chunks:
        compiled = chunk.decode()
        name = name or compiled.target.name
        decode.append(program_cost(compiled, target))
        for s, make in chunk.prefill.items():
            prefill.setdefault(s, []).append(program_cost(make(), target))
    return summarize(name, decode, prefill)
