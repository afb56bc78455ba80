"""Language models end to end: Hugging Face folders in, text out (needs the `llm` extra).

    model = anekit.llm.load("path/to/gpt2", target="m4")
    result = model.generate("def fibonacci(n):", max_new_tokens=64)
    print(result.text)

See docs/llm.md.
"""

from __future__ import annotations

import os
from typing import Any

from anekit import budget, targets
from anekit.errors import ModelError, path_argument
from anekit.llm.config import LMConfig, read_config
from anekit.llm.export import is_export
from anekit.llm.exported import ExportedModel, load_export
from anekit.llm.graph import model_weights
from anekit.llm.model import GenerateResult, LanguageModel, Token
from anekit.llm.plan import Chunk, ProgramPlan, ProgramSpec, kv_bytes, plan_programs, weight_bytes
from anekit.llm.programs import clear_cache, set_cache_limit
from anekit.llm.sampling import SamplingOptions
from anekit.llm.tokenizer import Tokenizer, load_tokenizer
from anekit.llm.weights import Checkpoint, shard_files
from anekit.targets import DEFAULT_TARGET

DEFAULT_MAX_CONTEXT = 2048


def load(
    path: str | os.PathLike[str],
    *,
    target: Any = DEFAULT_TARGET,
    max_context: int | None = None,
    compress: str | None = None,
) -> LanguageModel | ExportedModel:
    """Load a Hugging Face-style folder (config.json, safetensors, tokenizer files), or an
    export folder (`LanguageModel.export`), which runs its packages as written.

    ``max_context`` is the decode cache's length in positions (default: the model's own
    limit, at most 2048); ``compress`` compresses every projection's weights (see
    `anekit.compile`). The weights are read once, converted to fp16 and shared by every
    program; programs are compiled on first use and cached for the process. A model whose
    weights and cache exceed the memory budget (``ANEKIT_MAX_MEMORY``) is refused before
    any weight is read.
    """
    folder = path_argument(path, "the model folder")
    if not folder.is_dir():
        raise ModelError(f"'{folder}' is not a folder", hint="pass a Hugging Face model folder")
    if is_export(folder):
        return load_export(folder)
    config = read_config(folder)
    context = min(config.max_positions, DEFAULT_MAX_CONTEXT) if max_context is None else max_context
    if isinstance(context, bool) or not isinstance(context, int) or not 2 <= context <= config.max_positions:
        raise ModelError(
            f"max_context must be an integer in [2, {config.max_positions}] (the model's "
            f"max_position_embeddings), got {max_context!r}"
        )
    chip = targets.get(target)
    if compress is not None:
        from anekit.codegen.compress import check_scheme

        check_scheme(compress, chip.mil.opset)
    budget.check(resident_bytes(config, context), f"the model ({config.family}, {config.layers} "
                 f"layers) with a {context}-position cache", where=str(folder))  # fmt: skip
    files = shard_files(folder)
    with Checkpoint(folder, (config.prefix,)) as ckpt:
        weights = model_weights(config, ckpt)
    has_tokenizer = any((folder / n).exists() for n in ("tokenizer.json", "vocab.json"))
    tokenizer = load_tokenizer(folder) if has_tokenizer else None
    stamp = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    fingerprint = (str(folder.resolve()), stamp, chip.name, compress, context)
    return LanguageModel(folder, config, weights, tokenizer, target=chip, max_context=context,
                         compress=compress, fingerprint=fingerprint, conversion=ckpt.conversion)  # fmt: skip


def resident_bytes(config: LMConfig, context: int) -> int:
    """What generating with a model needs at least on the simulator: what its programs share
    (the one fp16 copy of its weights, `programs.SHARED`), a prefill and a decode program's own bytes (`programs.FOOTPRINT`
    each) and the float32 decode cache (measured peaks: `benchmarks/results/llm_scale.json`)."""
    from anekit.llm.programs import FOOTPRINT, SHARED

    return int((SHARED + 2 * FOOTPRINT) * weight_bytes(config)) + kv_bytes(config, context)


__all__ = [
    "Checkpoint",
    "Chunk",
    "ProgramPlan",
    "ProgramSpec",
    "plan_programs",
    "resident_bytes",
    "set_cache_limit",
    "ExportedModel",
    "GenerateResult",
    "LMConfig",
    "LanguageModel",
    "SamplingOptions",
    "Token",
    "Tokenizer",
    "clear_cache",
    "load",
]
