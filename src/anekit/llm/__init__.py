"""Language models end to end: Hugging Face folders in, text out (needs the `llm` extra).

    model = anekit.llm.load("path/to/gpt2", target="m4")
    result = model.generate("def fibonacci(n):", max_new_tokens=64)
    print(result.text)

See docs/llm.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from anekit import targets
from anekit.errors import ModelError
from anekit.llm.config import LMConfig, read_config
from anekit.llm.export import is_export
from anekit.llm.exported import ExportedModel, load_export
from anekit.llm.graph import PREFIXES, model_weights
from anekit.llm.model import GenerateResult, LanguageModel, Token
from anekit.llm.programs import clear_cache
from anekit.llm.sampling import SamplingOptions
from anekit.llm.tokenizer import Tokenizer, load_tokenizer
from anekit.llm.weights import WeightSet, read_weights, shard_files

DEFAULT_MAX_CONTEXT = 256


def load(
    path: str | os.PathLike[str],
    *,
    target: Any = "m4",
    max_context: int | None = None,
    compress: str | None = None,
) -> LanguageModel | ExportedModel:
    """Load a Hugging Face-style folder (config.json, safetensors, tokenizer files), or an
    export folder (`LanguageModel.export`), which runs its packages as written.

    ``max_context`` is the decode cache's length in positions (default: the model's own
    limit, at most 256); ``compress`` compresses every projection's weights (see
    `anekit.compile`). Programs are compiled on first use and cached for the process.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise ModelError(f"'{folder}' is not a folder", hint="pass a Hugging Face model folder")
    if is_export(folder):
        return load_export(folder)
    config = read_config(folder)
    context = max_context or min(config.max_positions, DEFAULT_MAX_CONTEXT)
    if isinstance(context, bool) or not isinstance(context, int) or not 2 <= context <= config.max_positions:
        raise ModelError(
            f"max_context must be an integer in [2, {config.max_positions}] (the model's "
            f"max_position_embeddings), got {max_context!r}"
        )
    files = shard_files(folder)
    weights = model_weights(config, WeightSet(read_weights(folder), PREFIXES[config.family], str(folder)))
    has_tokenizer = any((folder / n).exists() for n in ("tokenizer.json", "vocab.json"))
    tokenizer = load_tokenizer(folder) if has_tokenizer else None
    chip = targets.get(target)
    if compress is not None:
        from anekit.codegen.compress import check_scheme

        check_scheme(compress, chip.mil.opset)
    stamp = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    fingerprint = (str(folder.resolve()), stamp, chip.name, compress, context)
    return LanguageModel(folder, config, weights, tokenizer, target=chip, max_context=context,
                         compress=compress, fingerprint=fingerprint)  # fmt: skip


__all__ = [
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
